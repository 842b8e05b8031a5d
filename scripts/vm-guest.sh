#!/bin/bash
# Runs inside scripts/vm-test.sh's guest, as root, from the per-run disk
# mounted at /payload (sandpit-vm.service starts it once the lingering user's
# systemd manager, user@1000.service, is up). Its output goes to the serial
# console; the last line says PASS or FAIL, and the host decides on it.
#
# Modes (/payload/mode):
#   test      the rootless smoke suite as user sp (uid 1000) with systemd's
#             delegation, then again with delegation switched off, where
#             sandpit must refuse to run code
#   negative  the suite's negative control: delegation off, the server started
#             with --allow-unenforced-limits; the memory and CPU checks must
#             fail (and this mode passes only if they do)
set -u
p=/payload
mode=$(cat "$p/mode" 2>/dev/null || echo test)
uid=1000
userdir=/sys/fs/cgroup/user.slice/user-$uid.slice/user@$uid.service
fail=()

say() { echo "SANDPIT-VM: $*"; }
figure() { echo "SANDPIT-VM-FIGURE $1=$2"; }
now() { cut -d' ' -f1 /proc/uptime; }

figure boot_uptime_s "$(now)"
say "kernel $(uname -r), $(systemctl --version | head -n1), cgroup fs $(stat -fc %T /sys/fs/cgroup), $(nproc) vCPU, $(free -m | awk '/^Mem:/{print $2}') MiB"
say "controllers delegated to user@$uid.service: $(cat "$userdir/cgroup.controllers" 2>&1) (owner $(stat -c %U "$userdir"))"
# The kernel would load overlay on first mount too; loading it here keeps a
# module load out of the first import's time.
modprobe overlay
# The third disk, when there is one: the user's rootless containerd root
# with the language image already imported (vm-test.sh's image_disk).
if [ -b /dev/vdc ]; then
	root=/home/sp/.local/share/sandpit/rootless/root
	runuser -u sp -- mkdir -p "$root"
	mount /dev/vdc "$root"
	say "language image pre-imported: $(df -h --output=used "$root" | tail -n1 | tr -d " ") used on /dev/vdc at $root"
else
	say "no image disk: serve.sh imports the language image from /payload/cache"
fi

# as_user runs a command as sp with the environment a login session gives.
as_user() {
	runuser -u sp -- env -i HOME=/home/sp USER=sp LOGNAME=sp SHELL=/bin/bash \
		PATH=/usr/local/bin:/usr/bin:/bin \
		XDG_RUNTIME_DIR=/run/user/$uid DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus \
		SANDPIT_BIN=$p/bin/sandpit SANDPIT_VM_CHECKOUT=$p SANDPIT_CACHE_DIR=$p/cache \
		TMPDIR=/tmp "$@"
}

# suite NAME TEST [ENV...]: run one test of the smoke binary as sp.
suite() {
	local name=$1 test=$2 start rc
	shift 2
	start=$(now)
	say "== $name"
	(cd /tmp && as_user "$@" "$p/bin/vm.test" -test.run "^$test\$" -test.v -test.count=1 -test.timeout=20m 2>&1) | tee "/tmp/$name.out"
	rc=${PIPESTATUS[0]}
	figure "${name}_s" "$(awk -v a="$start" -v b="$(now)" 'BEGIN{printf "%.0f", b-a}')"
	return "$rc"
}

oom_kills() { awk '/^oom_kill /{print $2}' "$userdir/memory.events" 2>/dev/null || echo "?"; }

# delegation_off restarts the user's manager with only the pids controller
# delegated. (Delegate=no stops the user manager from starting at all: it
# needs its cgroup.) Measured: memory stays available to user@1000.service
# (systemd enables it in the slice for accounting), cpu goes: so sandpit must
# refuse, naming cpu.
delegation_off() {
	as_user "$p/scripts/rootless.sh" stop || true
	mkdir -p /etc/systemd/system/user@.service.d
	printf '[Service]\nDelegate=\nDelegate=pids\nMemoryAccounting=no\nCPUAccounting=no\n' >/etc/systemd/system/user@.service.d/zz-sandpit-vm-off.conf
	systemctl daemon-reload
	systemctl restart "user@$uid.service"
	say "delegation switched off: user@$uid.service now has controllers: $(cat "$userdir/cgroup.controllers" 2>&1), owner $(stat -c %U "$userdir")"
}

case $mode in
test)
	scripts_ok=1
	# serve.sh's own check, as the user would see it.
	as_user "$p/scripts/rootless.sh" check || scripts_ok=0
	[ "$scripts_ok" -eq 1 ] || fail+=("rootless.sh check")
	before=$(oom_kills)
	suite rootless TestVMRootless SANDPIT_VM_SUITE=rootless || fail+=(TestVMRootless)
	after=$(oom_kills)
	say "OOM kills counted in user@$uid.service's memory.events: $before before the suite, $after after"
	figure user_cgroup_oom_kills "$before->$after"
	if [ "$before" = "?" ] || [ "$after" = "?" ] || [ "$after" -le "$before" ]; then
		fail+=("no OOM kill in the user's cgroup")
	fi
	cg=/sys/fs/cgroup$(systemctl --user -M sp@ show -p ControlGroup --value sandpit-containerd.service 2>/dev/null)
	say "the rootless containerd's unit: $cg; under it: $(cd "$cg" 2>/dev/null && find . -mindepth 1 -maxdepth 1 -type d -printf '%P ' ); controllers its sandboxes got (sandpit/cgroup.subtree_control): $(cat "$cg/sandpit/cgroup.subtree_control" 2>&1)"
	delegation_off
	suite refusal TestVMRefusal SANDPIT_VM_SUITE=refusal || fail+=(TestVMRefusal)
	;;
negative)
	delegation_off
	if suite negative TestVMRootless SANDPIT_VM_SUITE=rootless SANDPIT_VM_NEGATIVE=1; then
		fail+=("the suite passed with limits unenforced")
	fi
	for t in oom cpu_quota; do
		grep -q -- "--- FAIL: TestVMRootless/$t " /tmp/negative.out || fail+=("TestVMRootless/$t did not fail with limits unenforced")
	done
	;;
*) fail+=("unknown mode $mode") ;;
esac

figure guest_uptime_end_s "$(now)"
if [ ${#fail[@]} -eq 0 ]; then
	echo "SANDPIT-VM-RESULT: PASS ($mode)"
else
	echo "SANDPIT-VM-RESULT: FAIL ($mode): $(IFS=';'; echo "${fail[*]}")"
fi
