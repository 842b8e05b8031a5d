package attacks

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// payload is a Case before its threat is stamped on: the suite's tables
// read as they did in the test.
type payload struct {
	name string
	lang string
	code string
	want []string // every one must appear in stdout+stderr
}

func (p payload) as(threat string) Case {
	return Case{Threat: threat, Name: p.name, Lang: p.lang, Code: p.code, Want: slices.Clone(p.want)}
}

// Portable is every case of the suite whose verdict depends on the sandbox
// alone: nothing in it names a host path, address, process or token that the
// caller's side must create or know. It holds the tables of TestAttackNetwork
// (but its host listeners and abstract socket: HostListeners,
// HostAbstractSocket), TestAttackReadOnlyFilesystem,
// TestAttackPrivilegeEscalation, TestAttackKernelInterfaces,
// TestAttackProcessIsolation (but signalling a host process: HostProcess),
// TestAttackEscapeCVEs and TestAttackSyscallABI, in that order.
//
// The SyscallABI cases are C with x86-64 assembly: a caller whose sandboxes
// run on another architecture leaves them out. The attack tests without a
// table are not here: most judge from the host (a canary file, the server's
// environment, another sandbox's files, host uids, processes and inotify
// instances, limits, floods), so their verdict is not in the payload's output
// alone; TestAttackSignalQueueBudget and
// TestAttackDiskExhaustion/no_writable_disk_mount could be, but stay in their
// tests for now. Each call returns fresh slices: a caller may change them.
func Portable() []Case {
	var all []Case
	for _, t := range []struct {
		threat   string
		payloads []payload
	}{
		{"Network", network},
		{"ReadOnlyFilesystem", readOnlyFilesystem},
		{"PrivilegeEscalation", privilegeEscalation},
		{"KernelInterfaces", kernelInterfaces},
		{"ProcessIsolation", processIsolation},
		{"EscapeCVEs", escapeCVEs},
		{"SyscallABI", syscallABI},
	} {
		for _, p := range t.payloads {
			all = append(all, p.as(t.threat))
		}
	}
	return all
}

// HostListeners is one Network case per address, each a TCP connection
// attempt from the sandbox to a listener the caller keeps open on the
// sandbox's host (or anywhere the host reaches: an API server, a node
// agent): "tcp_to_host_listener" for the first address,
// "tcp_to_host_listener_2", "_3"… for the others. The addresses are IPs, not
// names, so that a case cannot pass merely because the sandbox has no DNS;
// an IPv4-mapped IPv6 address is tried as IPv4.
func HostListeners(addrs ...netip.AddrPort) []Case {
	var out []Case
	for i, a := range addrs {
		name := "tcp_to_host_listener"
		if i > 0 {
			name = fmt.Sprintf("%s_%d", name, i+1)
		}
		out = append(out, payload{name, "python", connect(a.Addr().Unmap().String(), int(a.Port())), []string{"blocked"}}.as("Network"))
	}
	return out
}

// HostAbstractSocket is the Network case "abstract_unix_socket_on_host": a
// connection from the sandbox to an abstract unix socket the caller listens
// on in the host's network namespace (the CVE-2020-15257 class). name is the
// socket's address as Go's net package spells it, "@" and then the name; it
// panics if the name holds anything but letters, digits and "-_./", which
// the payload could not quote.
func HostAbstractSocket(name string) Case {
	name = strings.TrimPrefix(name, "@")
	if name == "" || strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./") != "" {
		panic(fmt.Sprintf("attacks: abstract socket name %q: want letters, digits and -_./ only", name))
	}
	return payload{"abstract_unix_socket_on_host", "python", fmt.Sprintf(`import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0%s")
    print("UNSAFE connected")
except OSError as e:
    print("blocked", e)
`, name), []string{"blocked"}}.as("Network")
}

// HostProcess is the ProcessIsolation case "host_process_not_signalable":
// the sandbox can neither signal nor see pid, a process outside it (the
// caller's own, say) numbered as the host's pid namespace numbers it.
func HostProcess(pid int) Case {
	return payload{"host_process_not_signalable", "bash", fmt.Sprintf(`if kill -0 %d 2>/dev/null; then echo "UNSAFE host pid %d signalable"; else echo "blocked kill"; fi
if [ -e /proc/%d/cmdline ]; then echo "UNSAFE host pid visible"; else echo "blocked proc"; fi`, pid, pid, pid), []string{"blocked kill", "blocked proc"}}.as("ProcessIsolation")
}

// connect is a Python payload that opens a TCP connection to host:port.
func connect(host string, port int) string {
	return fmt.Sprintf(`import socket
try:
    socket.create_connection((%q, %d), timeout=3)
    print("UNSAFE connected")
except OSError as e:
    print("blocked", e)
`, host, port)
}

// network: the sandbox's network namespace is empty (loopback only), so
// nothing beyond it is reachable.
var network = []payload{
	{"tcp_to_internet", "python", connect("1.1.1.1", 443), []string{"blocked"}},
	{"tcp_ipv6", "python", connect("2606:4700:4700::1111", 443), []string{"blocked"}},
	{"udp_dns_query", "python", `import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", ("8.8.8.8", 53))
    s.settimeout(3)
    s.recvfrom(512)
    print("UNSAFE dns answered")
except OSError as e:
    print("blocked", e)
`, []string{"blocked"}},
	{"dns_lookup", "python", `import socket
try:
    print("UNSAFE resolved", socket.getaddrinfo("example.com", 443))
except OSError as e:
    print("blocked", e)
`, []string{"blocked"}},
	{"raw_socket", "python", `import socket
for fam, typ, proto, name in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP, "raw icmp"), (socket.AF_PACKET, socket.SOCK_RAW, 0, "packet")]:
    try:
        socket.socket(fam, typ, proto)
        print("UNSAFE", name, "socket opened")
    except OSError as e:
        print("blocked", name, e)
`, []string{"blocked raw icmp", "blocked packet"}},
	{"only_loopback", "bash", `ifs=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')
[ "$ifs" = "lo " ] && echo "only loopback" || echo "UNSAFE interfaces: $ifs"`, []string{"only loopback"}},
}

// write is a bash payload that appends to p, which must fail.
func write(p string) string {
	return fmt.Sprintf(`if ( echo x >> %q ) 2>/dev/null; then echo "UNSAFE wrote %s"; else echo "blocked $( ( echo x >> %q ) 2>&1 )"; fi`, p, p, p)
}

// readOnlyFilesystem: the root filesystem and the source mount are
// read-only; only size-limited tmpfs mounts are writable.
var readOnlyFilesystem = []payload{
	{"root", "bash", write("/x"), []string{"blocked", "Read-only file system"}},
	{"usr", "bash", write("/usr/bin/python3"), []string{"blocked"}},
	{"etc_passwd", "bash", write("/etc/passwd"), []string{"blocked"}},
	{"source_dir", "bash", write(sandpit.SourceDir+"/main.sh") + `
grep -qE ' /sandpit/src ro,' /proc/self/mountinfo && echo "mounted read-only" || echo "UNSAFE source mount is writable"`, []string{"blocked", "mounted read-only"}},
	{"proc_sys", "bash", `if ( echo evil > /proc/sys/kernel/hostname ) 2>/dev/null; then echo UNSAFE; else echo blocked; fi; [ "$(hostname)" = sandpit ] && echo "hostname intact"`, []string{"blocked", "hostname intact"}},
	{"sys", "bash", write("/sys/kernel/uevent_helper"), []string{"blocked"}},
}

// privilegeEscalation: no capabilities, no-new-privileges, and setuid
// binaries (the image has su, passwd, mount…) do not raise the uid.
var privilegeEscalation = []payload{
	{"no_new_privs", "bash", `grep -q 'NoNewPrivs:[[:space:]]1' /proc/self/status && echo "nnp set" || echo UNSAFE nnp`, []string{"nnp set"}},
	{"no_capabilities", "bash", `for c in CapInh CapPrm CapEff CapBnd CapAmb; do grep -q "$c:[[:space:]]0000000000000000" /proc/self/status && echo "blocked $c" || echo "UNSAFE $c"; done`, []string{"blocked CapEff", "blocked CapBnd", "blocked CapAmb"}},
	{"non_root", "bash", `[ "$(id -u)" != 0 ] && echo "blocked uid $(id -u)" || echo UNSAFE root`, []string{"blocked uid"}},
	{"setuid_binaries_do_not_elevate", "python", `import subprocess, time, os
found = 0
for b in ["/usr/bin/su", "/usr/bin/passwd", "/usr/bin/chfn", "/usr/bin/newgrp", "/usr/bin/mount"]:
    if not os.path.exists(b) or not os.stat(b).st_mode & 0o4000:
        continue
    found += 1
    p = subprocess.Popen([b], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.3)
    try:
        uids = [l.split()[1:] for l in open(f"/proc/{p.pid}/status") if l.startswith("Uid:")][0]
        print("blocked" if "0" not in uids else "UNSAFE", b, "runs with uids", uids)
    except (OSError, IndexError):
        pass  # exited before we looked: it had no chance to run as root either
    p.kill(); p.communicate()
print("setuid binaries probed:", found)
`, []string{"blocked /usr/bin/su", "blocked /usr/bin/passwd"}},
	{"setuid_bit_in_tmp", "bash", `cp /bin/bash /tmp/rootsh && chmod 4755 /tmp/rootsh
grep -E ' /tmp .*nosuid' /proc/self/mountinfo >/dev/null && echo "blocked nosuid" || echo "UNSAFE /tmp lacks nosuid"
if /tmp/rootsh -c true 2>/dev/null; then echo "UNSAFE exec from /tmp"; else echo "blocked noexec"; fi`, []string{"blocked nosuid", "blocked noexec"}},
	{"su_to_root", "bash", `if echo root | timeout 5 su -c id root 2>/dev/null | grep -q 'uid=0'; then echo UNSAFE; else echo "blocked su"; fi`, []string{"blocked su"}},
	{"user_namespace_map", "bash", `m=$(tr -s ' ' < /proc/self/uid_map); case "$m" in *" 0 0 4294967295"*) echo "UNSAFE host ids: $m";; *) echo "blocked ids mapped:$m";; esac`, []string{"blocked ids mapped"}},
}

// kernelInterfaces: syscalls into kernel subsystems an untrusted snippet
// never needs fail with EPERM (seccomp, capabilities, user namespace).
var kernelInterfaces = []payload{
	{"keyctl", "python", `sc("keyctl", 250, 0, -3, 1)
sc("add_key", 248, buf(b"user"), buf(b"k"), buf(b"secret"), 6, -2)
sc("request_key", 249, buf(b"user"), buf(b"k"), 0, -2)`, []string{"blocked keyctl", "blocked add_key", "blocked request_key"}},
	{"kernel_modules", "python", `sc("init_module", 175, buf(64), 64, buf(b""))
sc("finit_module", 313, 0, buf(b""), 0)
sc("delete_module", 176, buf(b"loop"), 0o4000)`, []string{"blocked init_module", "blocked finit_module", "blocked delete_module"}},
	{"kexec_and_reboot", "python", `sc("kexec_load", 246, 0, 0, 0, 0)
sc("reboot_bad_magic", 169, 0, 0, 0, 0)`, []string{"blocked kexec_load", "blocked reboot_bad_magic"}},
	{"bpf", "python", `sc("bpf", 321, 0, buf(128), 128)`, []string{"blocked bpf"}},
	{"perf_event_open", "python", `import struct
attr = struct.pack("IIQQQQ", 1, 112, 0, 0, 0, 1 << 5) + bytes(112 - 40)
sc("perf_event_open", 298, buf(attr), 0, -1, -1, 0)`, []string{"blocked perf_event_open"}},
	{"userfaultfd", "python", `sc("userfaultfd", 323, 1)`, []string{"blocked userfaultfd"}},
	{"io_uring", "python", `sc("io_uring_setup", 425, 4, buf(120))`, []string{"blocked io_uring_setup"}},
	{"file_handles", "python", `sc("name_to_handle_at", 303, -100, buf(b"/etc/passwd"), buf(136), buf(8), 0)
sc("open_by_handle_at", 304, -100, buf(136), 0)`, []string{"blocked name_to_handle_at", "blocked open_by_handle_at"}},
	{"personality_read_implies_exec", "python", `sc("personality", 135, 0x0400000)`, []string{"blocked personality"}},
	{"sysrq_trigger", "bash", `# 'h' only prints help to the kernel log: harmless if it got through.
if ( echo h > /proc/sysrq-trigger ) 2>/dev/null; then echo UNSAFE sysrq; else echo "blocked sysrq"; fi`, []string{"blocked sysrq"}},
	{"clock_settime", "python", `import time
ts = ctypes.create_string_buffer(16); ctypes.memmove(ts, ctypes.byref(ctypes.c_long(int(time.time()))), 8)
sc("clock_settime", 227, 0, ctypes.addressof(ts))
sc("settimeofday", 164, ctypes.addressof(ts), 0)
# adjtimex with modes=ADJ_OFFSET would slew the clock.
tx = bytearray(208); tx[0:4] = (1).to_bytes(4, "little")
sc("adjtimex", 159, buf(bytes(tx)))`, []string{"blocked clock_settime", "blocked settimeofday", "blocked adjtimex"}},
	{"date_set", "bash", `# Sets the clock to now: a no-op if it got through.
if date -s "@$(date +%s)" >/dev/null 2>&1; then echo UNSAFE date; else echo "blocked $(date -s "@$(date +%s)" 2>&1)"; fi`, []string{"blocked", "Operation not permitted"}},
	{"mount_syscall", "python", `os.makedirs("/tmp/m", exist_ok=True)
sc("mount", 165, buf(b"none"), buf(b"/tmp/m"), buf(b"tmpfs"), 0, 0)
sc("umount2", 166, buf(b"/tmp"), 2)
sc("pivot_root", 155, buf(b"/tmp"), buf(b"/tmp/m"))
sc("chroot", 161, buf(b"/tmp"))`, []string{"blocked mount", "blocked umount2", "blocked pivot_root", "blocked chroot"}},
	{"mount_command", "bash", `mkdir -p /tmp/m; if mount -t tmpfs none /tmp/m 2>/dev/null; then echo UNSAFE mount; else echo "blocked mount"; fi
if mount -t proc proc /tmp/m 2>/dev/null; then echo UNSAFE proc; else echo "blocked proc"; fi`, []string{"blocked mount", "blocked proc"}},
	{"unshare_user_namespace", "bash", `if unshare -U true 2>/dev/null; then echo "UNSAFE unshare -U"; else echo "blocked unshare -U"; fi
if unshare -r id 2>/dev/null; then echo "UNSAFE unshare -r"; else echo "blocked unshare -r"; fi`, []string{"blocked unshare -U", "blocked unshare -r"}},
	{"unshare_and_setns_syscalls", "python", `sc("unshare_newuser", 272, 0x10000000)
sc("unshare_newns", 272, 0x00020000)
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
sc("setns", 308, fd, 0)`, []string{"blocked unshare_newuser", "blocked unshare_newns", "blocked setns"}},
	{"clone_new_user_namespace", "c", `#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
static char stack[65536];
static int child(void *arg) { (void)arg; return 0; }
int main(void) {
	int flags[] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID};
	const char *names[] = {"newuser", "newns", "newnet", "newpid"};
	for (int i = 0; i < 4; i++) {
		int pid = clone(child, stack + sizeof stack, flags[i] | SIGCHLD, NULL);
		if (pid < 0) printf("blocked clone_%s %s\n", names[i], strerror(errno));
		else { waitpid(pid, NULL, 0); printf("UNSAFE clone_%s\n", names[i]); }
	}
	return 0;
}`, []string{"blocked clone_newuser", "blocked clone_newns", "blocked clone_newnet", "blocked clone_newpid"}},
	{"swap_and_accounting", "python", `sc("swapon", 167, buf(b"/tmp/swap"), 0)
sc("acct", 163, buf(b"/tmp/acct"))`, []string{"blocked swapon", "blocked acct"}},
}

// processIsolation: the sandbox sees only its own processes and cannot
// trace or read a sibling's memory (HostProcess: nor signal one outside).
var processIsolation = []payload{
	{"ptrace_sibling", "python", `import time, signal
pid = os.fork()
if pid == 0:
    time.sleep(30); os._exit(0)
sc("ptrace_attach", 101, 16, pid, 0, 0)
sc("ptrace_seize", 101, 0x4206, pid, 0, 0)
os.kill(pid, signal.SIGKILL)`, []string{"blocked ptrace_attach", "blocked ptrace_seize"}},
	{"process_vm_readv_sibling", "python", `import time, signal
secret = ctypes.create_string_buffer(b"sibling-secret")
pid = os.fork()
if pid == 0:
    time.sleep(30); os._exit(0)
local = ctypes.create_string_buffer(16)
liov = (ctypes.c_void_p * 2)(ctypes.addressof(local), 14)
riov = (ctypes.c_void_p * 2)(ctypes.addressof(secret), 14)
sc("process_vm_readv", 310, pid, ctypes.addressof(liov), 1, ctypes.addressof(riov), 1, 0)
os.kill(pid, signal.SIGKILL)`, []string{"blocked process_vm_readv"}},
	{"host_processes_invisible", "bash", `pids=$(cd /proc && ls -d [0-9]* | tr '\n' ' ')
n=$(echo $pids | wc -w)
foreign=""
for p in $pids; do u=$(awk '/^Uid:/{print $2}' /proc/$p/status 2>/dev/null); [ -z "$u" ] || [ "$u" = "$(id -u)" ] || foreign="$foreign $p"; done
# The init shell, the program and its command substitutions: a handful.
[ "$n" -le 8 ] && [ -z "$foreign" ] && echo "blocked only $n pids, all the sandbox's: $pids" || echo "UNSAFE $n pids visible: $pids (not the sandbox's:$foreign)"
[ "$(awk '/^Uid:/{print $2}' /proc/1/status)" = "$(id -u)" ] && echo "pid 1 is the sandbox's" || echo "UNSAFE pid 1 is $(cat /proc/1/comm)"`, []string{"blocked only", "pid 1 is the sandbox's"}},
}

// escapeCVEs: the container-escape classes that made headlines:
// overwriting the runtime through /proc/self/exe (CVE-2019-5736), a leaked
// host fd or a cwd outside the rootfs (CVE-2024-21626), and a cgroup
// release_agent (CVE-2022-0492).
var escapeCVEs = []payload{
	{"proc_self_exe_overwrite", "python", `for p in ["/proc/self/exe", "/proc/1/exe"]:
    try:
        fd = os.open(p, os.O_WRONLY)
        os.close(fd)
        print("UNSAFE opened", p, "for writing")
    except OSError as e:
        print("blocked", p, e.strerror)
try:
    fd = os.open("/proc/self/exe", os.O_PATH)
    os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
    print("UNSAFE reopened exe for writing")
except OSError as e:
    print("blocked reopen", e.strerror)
`, []string{"blocked /proc/self/exe", "blocked /proc/1/exe", "blocked reopen"}},
	{"leaked_fds", "python", `import stat
for pid in ["self", "1"]:
    d = f"/proc/{pid}/fd"
    try:
        fds = sorted(int(f) for f in os.listdir(d))
    except PermissionError:
        # sandpit's shim runs a cold run's init from its loader, a binary
        # the sandbox may not read: the kernel makes PID 1 undumpable.
        print(f"blocked no leaked fds in {pid} (not readable)")
        continue
    extra = []
    for f in fds:
        try:
            link = os.readlink(f"{d}/{f}")
        except OSError:
            continue  # the directory fd listdir itself opened, now closed
        if pid == "1" and link == "/sandpit/src/alive":
            continue  # the init's read end of sandpit's liveness FIFO (init.go), no host object
        if f > 2:
            extra.append((f, link))
        elif not (link.startswith("pipe:") or link == "/dev/null"):
            extra.append((f, link))
    print(("UNSAFE leaked " + str(extra)) if extra else f"blocked no leaked fds in {pid}")
`, []string{"blocked no leaked fds in self", "blocked no leaked fds in 1"}},
	{"cwd_inside_rootfs", "python", `cwd = os.getcwd()
link = os.readlink("/proc/self/cwd")
# The run's working directory: /tmp, or the workspace when the server
# gives it one (an MCP run_code); never a directory outside the sandbox.
if cwd.startswith("(unreachable)") or link != cwd or not any(os.path.isdir(d) and os.path.samefile(cwd, d) for d in ("/tmp", "/workspace")):
    print("UNSAFE cwd", cwd, link)
else:
    print("blocked cwd is", cwd)
try:
    if os.stat("/proc/1/root").st_ino == os.stat("/").st_ino and os.path.samefile("/proc/1/root/.", "/"):
        print("blocked pid 1's root is the sandbox rootfs")
except PermissionError:
    print("blocked pid 1's root is not reachable")  # undumpable (see leaked_fds)
`, []string{"blocked cwd is /", "blocked pid 1's root"}},
	{"cgroup_release_agent", "bash", `found=$(find / -xdev -name release_agent 2>/dev/null; find /sys -name release_agent 2>/dev/null)
[ -z "$found" ] && echo "blocked no release_agent" || echo "UNSAFE release_agent at $found"
grep -q ' - cgroup' /proc/self/mountinfo && echo "UNSAFE cgroupfs mounted" || echo "blocked no cgroupfs"
mkdir -p /tmp/cg
for t in "cgroup -o memory" "cgroup -o rdma" cgroup2; do if mount -t $t cgroup /tmp/cg 2>/dev/null; then echo "UNSAFE mounted $t"; else echo "blocked mount $t"; fi; done
[ "$(cut -d: -f3 /proc/self/cgroup | sort -u)" = / ] && echo "blocked cgroup namespace root" || echo "UNSAFE host cgroup path $(cat /proc/self/cgroup)"`, []string{"blocked no release_agent", "blocked no cgroupfs", "blocked mount cgroup2", "blocked cgroup namespace root"}},
	{"masked_proc_and_sys", "bash", `for f in /proc/kcore /proc/keys /proc/kallsyms /proc/timer_list /proc/sched_debug; do
  n=$(head -c 64 "$f" 2>/dev/null | wc -c); [ "$n" = 0 ] && echo "blocked $f" || echo "UNSAFE $f readable"
done
for d in /sys/firmware /sys/kernel /sys/fs; do [ -z "$(ls -A $d 2>/dev/null)" ] && echo "blocked $d" || echo "UNSAFE $d has entries"; done`, []string{"blocked /proc/kcore", "blocked /proc/keys", "blocked /sys/kernel", "blocked /sys/fs"}},
}

// abiProbe is the C prelude of the SyscallABI cases: probe runs one raw
// syscall in a child (so a seccomp kill takes only the child) and prints
// "blocked NAME ..." when the call was refused — the child killed by SIGSYS,
// or EPERM or ENOSYS returned — or "UNSAFE NAME ..." when it reached the
// kernel. Pointer arguments for the 32-bit ABI live below 4 GiB (MAP_32BIT).
const abiProbe = `#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define X32_BIT 0x40000000L
enum { I386, X32, NATIVE };
static unsigned int *low; /* below 4 GiB: int 0x80 passes 32-bit pointers */

static long raw(int abi, long nr, long a, long b, long c) {
	long r;
	switch (abi) {
	case I386:
		__asm__ volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
		return r;
	case X32:
		__asm__ volatile("syscall" : "=a"(r) : "a"(nr | X32_BIT), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
		return r;
	}
	r = syscall(nr, a, b, c);
	return r < 0 ? -errno : r;
}

static void probe(const char *name, int abi, long nr, long a, long b, long c) {
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		long r = raw(abi, nr, a, b, c);
		if (r == -EPERM || r == -ENOSYS)
			printf("blocked %s %s\n", name, r == -EPERM ? "EPERM" : "ENOSYS");
		else if (r < 0)
			printf("UNSAFE %s reached the kernel: %s\n", name, strerror(-r));
		else
			printf("UNSAFE %s returned %ld\n", name, r);
		fflush(stdout);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS)
		printf("blocked %s killed by SIGSYS\n", name);
	else if (WIFSIGNALED(st))
		printf("blocked %s: no such ABI here (signal %d)\n", name, WTERMSIG(st));
}

int main(void) {
	low = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
	if (low == MAP_FAILED) { perror("mmap"); return 1; }
	printf("native getpid %ld\n", raw(NATIVE, SYS_getpid, 0, 0, 0));
`

// abi is a SyscallABI payload: abiProbe, then body as the rest of main.
func abi(body string) string { return abiProbe + body + "\treturn 0;\n}\n" }

// syscallABI: seccomp admits only the native x86-64 ABI. The 32-bit one
// (int 0x80) has socketcall(2), through which socket(2)'s family filter (no
// AF_VSOCK, no AF_ALG) was bypassed; x32 would be a third syscall table.
// Both fall to the filter's action for a foreign architecture (the process
// is killed), and socketcall is denied too.
var syscallABI = []payload{
	// socketcall(SYS_SOCKET, {AF_VSOCK, SOCK_STREAM, 0}): vsock is not
	// network-namespaced; on a VM it reaches the hypervisor's services.
	{"socketcall_vsock", "c", abi(`	low[0] = 40; low[1] = SOCK_STREAM; low[2] = 0;
	probe("socketcall_vsock", I386, 102, 1, (long)(uintptr_t)low, 0);
`), []string{"native getpid", "blocked socketcall_vsock"}},
	{"socketcall_alg", "c", abi(`	low[0] = 38; low[1] = SOCK_SEQPACKET; low[2] = 0;
	probe("socketcall_alg", I386, 102, 1, (long)(uintptr_t)low, 0);
`), []string{"native getpid", "blocked socketcall_alg"}},
	// i386's own socket(2) (359), and the native one as the control.
	{"socket_vsock", "c", abi(`	probe("i386_socket_vsock", I386, 359, 40, SOCK_STREAM, 0);
	probe("native_socket_vsock", NATIVE, SYS_socket, 40, SOCK_STREAM, 0);
	probe("native_socket_alg", NATIVE, SYS_socket, 38, SOCK_SEQPACKET, 0);
`), []string{"blocked i386_socket_vsock", "blocked native_socket_vsock", "blocked native_socket_alg"}},
	// Harmless calls: the ABI itself is what is refused.
	{"i386_abi", "c", abi(`	probe("i386_getpid", I386, 20, 0, 0, 0);
`), []string{"native getpid", "blocked i386_getpid"}},
	{"x32_abi", "c", abi(`	probe("x32_getpid", X32, 39, 0, 0, 0);
`), []string{"native getpid", "blocked x32_getpid"}},
}
