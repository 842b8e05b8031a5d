#!/usr/bin/env bash
# Rootless on a real cgroup v2 + systemd system: boot a Debian 12 guest under
# qemu (software emulation, TCG) and run sandpit's rootless smoke suite in it
# as a normal, lingering user. The suite's verdict comes back on the serial
# console; this script exits 0 only if the guest printed a pass.
#
#   sudo scripts/vm-test.sh            build what is missing, boot, run the suite
#   sudo scripts/vm-test.sh negative   the suite's negative control: with delegation
#                                      off and limits unenforced, its memory and CPU
#                                      checks must fail (passes only if they do)
#   sudo scripts/vm-test.sh build      only build (or reuse) the guest's disks
#   sudo scripts/vm-test.sh guest      only build (or reuse) the guest's root disk,
#                                      kernel and initrd; prints their directory
#
# Why a VM: the CI machines are cgroup v1 hybrid without systemd, where
# rootless runc cannot enforce limits; the hosts people run sandpit on as a
# normal user are cgroup v2 with systemd delegating memory, pids and cpu to
# user@UID.service. Why TCG: /dev/kvm here is a PVM backend on which a stock
# kernel hangs (RUNTIME-NOTES.md).
#
# What is cached, outside the checkout, under $SANDPIT_VM_CACHE
# (default /var/cache/sandpit/vm), keyed by a hash of the guest recipe below:
#   <key>/root.img       ext4 root filesystem (debootstrap minbase + systemd,
#                        containerd, runc, rootlesskit, uidmap, the kernel)
#   <key>/vmlinuz, <key>/initrd.img
#   image-<digest>.img   the language image, imported on the host into a
#                        containerd root for the guest user's rootless
#                        containerd (from the rootfs layer `bin/sandpit images
#                        build` caches in /var/cache/sandpit/images)
# Per run, a small second disk carries what is under test: bin/sandpit, the
# smoke-test binary (go test -c of cmd/sandpit, gated by SANDPIT_VM_SUITE) and
# scripts/. The cached disks are opened snapshot=on: a run never changes them.
#
# Environment: SANDPIT_VM_CACHE, SANDPIT_CACHE_DIR (the image cache),
#              SANDPIT_DEBIAN_MIRROR, SANDPIT_VM_TIMEOUT (seconds, default 1200),
#              SANDPIT_VM_CPUS (default 2), SANDPIT_VM_MEM_MB (default 3072),
#              SANDPIT_VM_IMPORT=1 (the guest imports the image itself, as serve.sh
#              does on first use: slow under emulation), SANDPIT_VM_LOG (console log).
set -euo pipefail
# Functions whose stdout is captured (dir=$(build_guest)) stop at a failing
# step too: without this bash drops set -e inside $(...).
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

vm_cache=${SANDPIT_VM_CACHE:-/var/cache/sandpit/vm}
image_cache=${SANDPIT_CACHE_DIR:-/var/cache/sandpit/images}
mirror=${SANDPIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
timeout_s=${SANDPIT_VM_TIMEOUT:-1200}
cpus=${SANDPIT_VM_CPUS:-2}
mem_mb=${SANDPIT_VM_MEM_MB:-3072}

say() { echo "vm-test: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- the guest recipe: any change to these three definitions rebuilds ----
guest_packages=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,udev,kmod,procps,containerd,runc,rootlesskit,uidmap,debootstrap,debian-archive-keyring,ca-certificates,linux-image-amd64,initramfs-tools

# guest_configure turns a debootstrapped tree into the test guest.
guest_configure() {
	local root=$1
	# A small initrd: the guest boots from a virtio disk and needs no more.
	echo MODULES=list >"$root/etc/initramfs-tools/conf.d/sandpit-vm.conf"
	printf '%s\n' virtio_pci virtio_blk ext4 >>"$root/etc/initramfs-tools/modules"
	unshare --mount --fork sh -c 'mount -t proc proc "$1/proc" && chroot "$1" update-initramfs -u -k all >/dev/null' sh "$root"

	echo sandpit-vm >"$root/etc/hostname"
	printf '127.0.0.1\tlocalhost sandpit-vm\n' >"$root/etc/hosts"
	: >"$root/etc/fstab" # the kernel mounts / rw (root=/dev/vda rw); nothing else
	# The normal user the suite runs as: lingering (its user@1000.service, with
	# memory, pids and cpu delegated, runs from boot) and with the subordinate
	# id ranges rootlesskit maps.
	chroot "$root" useradd --create-home --uid 1000 --shell /bin/bash sp
	echo "sp:100000:65536" >"$root/etc/subuid"
	echo "sp:100000:65536" >"$root/etc/subgid"
	mkdir -p "$root/var/lib/systemd/linger"
	touch "$root/var/lib/systemd/linger/sp"
	# The runner: mounts the per-run disk and runs its guest-suite.sh, whose
	# output goes to the serial console, then powers off.
	cat >"$root/etc/systemd/system/sandpit-vm.service" <<'UNIT'
[Unit]
Description=sandpit VM smoke suite (from the second disk)
Wants=user@1000.service
After=user@1000.service systemd-user-sessions.service

[Service]
Type=oneshot
ExecStartPre=/bin/mkdir -p /payload
ExecStartPre=/bin/mount -o ro /dev/vdb /payload
ExecStart=/bin/bash /payload/scripts/vm-guest.sh
ExecStopPost=/bin/systemctl --no-block poweroff --force
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
	ln -sf /etc/systemd/system/sandpit-vm.service "$root/etc/systemd/system/multi-user.target.wants/sandpit-vm.service"
	# Nothing logs in on the console; keep boot short.
	for u in serial-getty@ttyS0.service getty@tty1.service systemd-timesyncd.service e2scrub_reap.service apt-daily.timer apt-daily-upgrade.timer; do
		ln -sf /dev/null "$root/etc/systemd/system/$u"
	done
	# Nor does the guest need the image's package caches.
	rm -rf "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/*
}
# ---- end of the guest recipe ----

guest_key() {
	{ echo "$guest_packages $mirror"; declare -f guest_configure; } | sha256sum | cut -c1-16
}

# build_guest prints the directory of the guest's root disk, kernel and
# initrd, building them first when they are not cached. Its stdout is that
# path and nothing else (callers hand it to qemu): every build tool's stdout
# goes to stderr, with the log (mkfs.ext4 -q still prints "Creating regular
# file ..." on stdout when the image file is new).
build_guest() {
	local key dir
	key=$(guest_key)
	dir="$vm_cache/$key"
	if [ -f "$dir/done" ]; then
		say "guest image cached: $dir"
	else
		guest_build "$dir" >&2
	fi
	[ -f "$dir/root.img" ] || die "the guest build left no $dir/root.img"
	echo "$dir"
}

# guest_build DIR builds the guest into DIR (its output is the log only).
guest_build() {
	local dir=$1 tmp start
	for bin in debootstrap mkfs.ext4 qemu-system-x86_64; do
		command -v "$bin" >/dev/null || die "$bin is missing (hint: scripts/install-deps.sh --vm)"
	done
	[ "$(id -u)" -eq 0 ] || die "building the guest image runs debootstrap and chroot: run as root"
	start=$(date +%s)
	mkdir -p "$vm_cache"
	# Builds interrupted earlier leave .build-* behind; nothing else is there.
	rm -rf "$vm_cache"/.build-*
	tmp=$(mktemp -d "$vm_cache/.build-XXXXXX")
	say "building the guest image (debootstrap bookworm from $mirror; a few minutes)"
	if ! debootstrap --variant=minbase --include="$guest_packages" bookworm "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1; then
		tail -n 30 "$tmp/debootstrap.log" >&2
		die "debootstrap failed (log above)"
	fi
	guest_configure "$tmp/root"
	cp "$(readlink -f "$tmp/root/vmlinuz")" "$tmp/vmlinuz"
	cp "$(readlink -f "$tmp/root/initrd.img")" "$tmp/initrd.img"
	# Room for containerd's content store and snapshots (the language image
	# twice, ~350 MB each); the file is sparse.
	mkfs.ext4 -q -F -L root -E root_owner=0:0 -d "$tmp/root" "$tmp/root.img" 4G
	rm -rf "$tmp/root"
	touch "$tmp/done"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	say "guest image built in $(($(date +%s) - start))s: $dir ($(du -sh "$dir/root.img" | cut -f1) on disk)"
}

# image_entry prints the host's cached rootfs layer of the default language
# image (built, or found cached, by `bin/sandpit images build`).
image_entry() {
	local sock out entry
	sock=$(scripts/containerd.sh start)
	for _ in 1 2; do
		# A cache hit logs the entry; right after a fresh build, the second
		# pass is that hit.
		out=$(SANDPIT_CACHE_DIR=$image_cache bin/sandpit images build --address "$sock" 2>&1) || { echo "$out" >&2; die "bin/sandpit images build failed"; }
		entry=$(sed -n 's/.*using cached image rootfs.* cache=\([^ ]*\).*/\1/p' <<<"$out" | tail -n1)
		if [ -n "$entry" ] && [ -f "$entry/layer.tar" ]; then
			echo "$entry"
			return
		fi
	done
	echo "$out" >&2
	die "cannot find the language image's cache entry in $image_cache"
}

# shift_ids DIR: give a tree written by real root the ids it would have had
# if the guest user's rootless containerd had written it: rootlesskit maps
# that daemon's root to sp (1000) and id N>0 to 100000+N-1 (sp's /etc/subuid
# and /etc/subgid ranges in the guest). chown clears setuid and setgid bits,
# so they are put back afterwards.
shift_ids() {
	local d=$1 id modes
	modes=$(mktemp)
	find "$d" -perm /6000 ! -type l -printf '%m %p\0' >"$modes"
	# Every id above 0 first: the new ids (100000 and up) are above any
	# old one, and 0 becomes 1000 only after the old 1000 has moved.
	for id in $(find "$d" -printf '%U\n' | sort -un | sed '/^0$/d'); do
		find "$d" -uid "$id" -exec chown -h "$((100000 + id - 1))" {} +
	done
	for id in $(find "$d" -printf '%G\n' | sort -un | sed '/^0$/d'); do
		find "$d" -gid "$id" -exec chgrp -h "$((100000 + id - 1))" {} +
	done
	find "$d" -uid 0 -exec chown -h 1000 {} +
	find "$d" -gid 0 -exec chgrp -h 1000 {} +
	while IFS=' ' read -r -d '' mode path; do chmod "$mode" "$path"; done <"$modes"
	rm -f "$modes"
}

# image_disk ENTRY prints a disk image holding a containerd root with the
# language image (the cache entry ENTRY) imported and unpacked, its ids
# shifted for the guest user's rootless containerd (cached by the layer's
# digest). Importing 350 MB inside the emulated guest takes many minutes
# (sha256 and untar under TCG); on the host it takes seconds. The guest
# mounts it as that containerd's root, so `serve.sh` finds the image there.
# SANDPIT_VM_IMPORT=1 skips this and has the guest import it instead.
image_disk() {
	local entry=$1 id out
	id=$(grep -o '"diff_id": *"sha256:[0-9a-f]*' "$entry/meta.json" | sed 's/.*sha256://' | cut -c1-16) || true
	[ -n "$id" ] || die "no diff_id in $entry/meta.json"
	out="$vm_cache/image-$id.img"
	if [ -f "$out" ]; then
		say "image disk cached: $out"
	else
		# As in build_guest: stdout is the path, the tools' output the log.
		image_disk_build "$entry" "$out" >&2
	fi
	echo "$out"
}

# image_disk_build ENTRY OUT builds image_disk's disk into OUT.
image_disk_build() {
	local entry=$1 out=$2 tmp pid
	rm -rf "$vm_cache"/.image-*
	tmp=$(mktemp -d "$vm_cache/.image-XXXXXX")
	mkdir -p "$tmp/root" "$tmp/run"
	bin/sandpit containerd config --private-dir "$tmp/run" --private-root "$tmp" >"$tmp/config.toml"
	containerd --config "$tmp/config.toml" >"$tmp/containerd.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do
		ctr --address "$tmp/run/containerd.sock" version >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ! SANDPIT_CACHE_DIR=$(dirname "$entry") bin/sandpit images build --address "$tmp/run/containerd.sock" >&2; then
		kill "$pid"
		die "importing the image for the guest failed (containerd log: $tmp/containerd.log)"
	fi
	kill "$pid"
	wait "$pid" || true
	shift_ids "$tmp/root"
	truncate -s "$(($(du -sm "$tmp/root" | cut -f1) * 13 / 10 + 128))M" "$tmp/image.img"
	mkfs.ext4 -q -F -L images -E root_owner=1000:1000 -d "$tmp/root" "$tmp/image.img"
	mv "$tmp/image.img" "$out"
	rm -rf "$tmp"
	say "image disk built: $out"
}

# make_payload DIR MODE ENTRY: the per-run disk: what is under test.
make_payload() {
	local pl=$1 mode=$2 entry=$3
	rm -rf "$pl" "$pl.img"
	mkdir -p "$pl/bin" "$pl/scripts" "$pl/cache"
	cp bin/sandpit "$pl/bin/"
	# The smoke suite: cmd/sandpit's tests, gated by SANDPIT_VM_SUITE.
	go test -c -o "$pl/bin/vm.test" ./cmd/sandpit
	cp scripts/*.sh "$pl/scripts/"
	if [ "${SANDPIT_VM_IMPORT:-0}" = 1 ]; then
		cp -r "$entry" "$pl/cache/"
	fi
	echo "$mode" >"$pl/mode"
	chmod -R a+rX "$pl"
	truncate -s "$(($(du -sm "$pl" | cut -f1) * 11 / 10 + 64))M" "$pl.img"
	mkfs.ext4 -q -F -L payload -d "$pl" "$pl.img"
	rm -rf "$pl"
}

run_vm() {
	local mode=$1 dir start log rc boot entry images
	for bin in qemu-system-x86_64 mkfs.ext4; do
		command -v "$bin" >/dev/null || die "$bin is missing (hint: sudo scripts/install-deps.sh --vm)"
	done
	dir=$(build_guest)
	mkdir -p bin
	go build -o bin/sandpit ./cmd/sandpit
	work=$(mktemp -d /var/tmp/sandpit-vm.XXXXXX) # global: the EXIT trap needs it
	trap 'rm -rf "${work:-}"' EXIT
	start=$(date +%s)
	entry=$(image_entry)
	images=()
	if [ "${SANDPIT_VM_IMPORT:-0}" != 1 ]; then
		images=(-drive file="$(image_disk "$entry")",format=raw,if=virtio,snapshot=on)
	fi
	make_payload "$work/payload" "$mode" "$entry"
	say "disks ready in $(($(date +%s) - start))s; booting (qemu TCG, $cpus vCPU, $mem_mb MiB; timeout ${timeout_s}s)"
	log=${SANDPIT_VM_LOG:-$work/console.log}
	start=$(date +%s)
	# -snapshot on the root disk: the cached image is never written.
	timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -smp "$cpus" -m "$mem_mb" \
		-nodefaults -no-reboot -display none -serial stdio -nic none \
		-device virtio-rng-pci \
		-kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" \
		-append "root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 panic=-1 quiet" \
		-drive file="$dir/root.img",format=raw,if=virtio,snapshot=on \
		-drive file="$work/payload.img",format=raw,if=virtio,readonly=on \
		"${images[@]}" \
		</dev/null 2>&1 | while IFS= read -r line; do
		printf '[%4ds] %s\n' $(($(date +%s) - start)) "${line%$'\r'}"
	done | tee "$log"
	rc=${PIPESTATUS[0]}
	say "qemu exited ($rc) after $(($(date +%s) - start))s wall"
	boot=$(grep -m1 'SANDPIT-VM-FIGURE boot_uptime_s=' "$log" | sed 's/^\[ *\([0-9]*\)s\].*=\(.*\)/wall \1 s, guest uptime \2 s/') || true
	say "figures: boot to the suite: ${boot:-none}"
	grep -o 'SANDPIT-VM-FIGURE .*' "$log" | sed 's/^SANDPIT-VM-FIGURE /vm-test:   /' >&2 || true
	if grep -q 'SANDPIT-VM-RESULT: PASS' "$log"; then
		say "PASS ($mode)"
		return 0
	fi
	grep 'SANDPIT-VM-RESULT' "$log" >&2 || say "the guest printed no result (timeout, or it failed to boot; console log above)"
	die "FAIL ($mode)"
}

case "${1:-test}" in
guest)
	# As run_vm takes it: from inside $(...).
	dir=$(build_guest)
	echo "$dir"
	;;
build)
	build_guest >/dev/null
	go build -o bin/sandpit ./cmd/sandpit
	image_disk "$(image_entry)" >/dev/null
	;;
test) run_vm test ;;
negative) run_vm negative ;;
*) die "usage: $0 [test | negative | build]" ;;
esac
