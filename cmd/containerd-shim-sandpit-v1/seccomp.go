package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"
)

// seccompExecMode is how sandpit-shim starts a sandbox's program through
// this binary: "/proc/self/fd/3 seccomp-exec PROGRAM ARGS...", with this
// binary (a sealed copy) at fd 3 and a sealed copy of a compiled seccomp
// filter at fd 4. Compiling the profile with libseccomp costs ~20 ms of
// CPU per sandbox (three architectures, 355 syscalls); the shim compiles
// it once, with runc's own code, and every sandbox loads the result here,
// as the last step before its program starts — where runc would load it.
const seccompExecMode = "seccomp-exec"

// Descriptors the shim passes: this binary, the filter, and the init
// binary its init ran from (runtime/shim.InitFD; not always passed).
const (
	selfFD   = 3
	filterFD = 4
	initFD   = 5
)

// seccompExec loads the filter and execs argv. It never runs argv without
// the filter: any failure exits 127 with the reason.
func seccompExec(argv []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "sandpit: cannot start %s: %v\n", argv[0], err)
		return 127
	}
	// The filter and the exec happen on one thread (TSYNC also gives the
	// filter to every other thread of this process; exec ends them).
	runtime.LockOSThread()
	if runtime.GOARCH != "amd64" {
		return fail(errors.New("the seccomp loader knows x86-64 only"))
	}
	prog, flags, err := readFilter(filterFD)
	syscall.Close(filterFD)
	syscall.Close(selfFD)
	syscall.Close(initFD)
	if err != nil {
		return fail(fmt.Errorf("seccomp filter: %w", err))
	}
	// Without no_new_privs an unprivileged process cannot load a filter,
	// and the shim only takes this path when the spec sets it.
	if nnp, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prGetNoNewPrivs, 0, 0, 0, 0, 0); e != 0 || nnp != 1 {
		return fail(errors.New("no_new_privs is not set"))
	}
	initMode := argv[0] == initFlag
	var path string
	if !initMode {
		if path, err = exec.LookPath(argv[0]); err != nil {
			return fail(err)
		}
	}
	fprog := sockFprog{len: uint16(len(prog)), filter: &prog[0]}
	ret, _, e := syscall.RawSyscall(sysSeccomp, seccompSetModeFilter, uintptr(flags|seccompFilterFlagTSYNC), uintptr(unsafe.Pointer(&fprog)))
	if err := filterLoaded(ret, e); err != nil {
		return fail(err)
	}
	// Belt and braces: whatever seccomp(2) said, the kernel must report
	// this thread in filter mode before anything runs.
	mode, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prGetSeccomp, 0, 0, 0, 0, 0)
	if err := inFilterMode(mode, e); err != nil {
		return fail(err)
	}
	if initMode {
		return sandpitInit(argv[1:])
	}
	return fail(syscall.Exec(path, argv, os.Environ()))
}

// filterLoaded tells from seccomp(2)'s return whether the filter is in
// force. Any nonzero return is a failure: with SECCOMP_FILTER_FLAG_TSYNC
// the kernel returns the id of a thread it could not synchronise, and then
// installs no filter at all.
func filterLoaded(ret uintptr, e syscall.Errno) error {
	if e != 0 {
		return fmt.Errorf("load seccomp filter: %w", e)
	}
	if ret != 0 {
		return fmt.Errorf("load seccomp filter: thread %d could not be synchronised; no filter installed", ret)
	}
	return nil
}

// inFilterMode checks prctl(PR_GET_SECCOMP)'s answer: SECCOMP_MODE_FILTER.
func inFilterMode(mode uintptr, e syscall.Errno) error {
	if e != 0 {
		return fmt.Errorf("check seccomp mode: %w", e)
	}
	if mode != seccompModeFilter {
		return fmt.Errorf("seccomp mode is %d after loading the filter, want %d (filter)", mode, seccompModeFilter)
	}
	return nil
}

const (
	sysSeccomp             = 317 // x86-64 only: see the GOARCH check
	prGetNoNewPrivs        = 39
	prGetSeccomp           = 21
	seccompModeFilter      = 2
	seccompSetModeFilter   = 1
	seccompFilterFlagTSYNC = 1
	bpfMaxInstructions     = 4096
	sockFilterSize         = 8
	headerSize             = 8
	filterMagic            = 0x31535053  // "SPS1"
	knownFlags             = 1<<1 | 1<<2 // SECCOMP_FILTER_FLAG_LOG, _SPEC_ALLOW
)

// sockFilter and sockFprog are the kernel's struct sock_filter and
// struct sock_fprog.
type sockFilter struct {
	code uint16
	jt   uint8
	jf   uint8
	k    uint32
}

type sockFprog struct {
	len    uint16
	_      [6]byte
	filter *sockFilter
}

// readFilter reads what the shim compiled, with pread: the descriptor is
// shared by every sandbox started meanwhile, and so is its offset. The file
// is "SPS1", the seccomp(2) flags (both little-endian uint32), then the BPF
// instructions.
func readFilter(fd int) ([]sockFilter, uint32, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, 0, err
	}
	n := int(st.Size) - headerSize
	if n <= 0 || n%sockFilterSize != 0 || n/sockFilterSize > bpfMaxInstructions {
		return nil, 0, fmt.Errorf("%d bytes is not a compiled filter", st.Size)
	}
	buf := make([]byte, st.Size)
	for off := 0; off < len(buf); {
		k, err := syscall.Pread(fd, buf[off:], int64(off))
		if err != nil {
			return nil, 0, err
		}
		if k == 0 {
			return nil, 0, errors.New("short read")
		}
		off += k
	}
	le32 := func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24 }
	if le32(buf) != filterMagic {
		return nil, 0, errors.New("not a compiled filter")
	}
	flags := le32(buf[4:])
	if flags&^knownFlags != 0 {
		return nil, 0, fmt.Errorf("unknown seccomp flags %#x", flags)
	}
	buf = buf[headerSize:]
	prog := make([]sockFilter, n/sockFilterSize)
	for i := range prog {
		b := buf[i*sockFilterSize:]
		prog[i] = sockFilter{
			code: uint16(b[0]) | uint16(b[1])<<8,
			jt:   b[2],
			jf:   b[3],
			k:    le32(b[4:]),
		}
	}
	return prog, flags, nil
}
