package shim

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/exeseal"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
)

// Seccomp, compiled once. libcontainer compiles a sandbox's profile with
// libseccomp inside its init, for every sandbox: ~20 ms of CPU for sandpit's
// profile (355 syscalls, three architectures) — the largest single cost of
// a sandbox. The shim compiles each distinct profile once, with runc's own
// code (seccomp.InitSeccomp, in a helper process that loads it into itself),
// reads the exact program back from the kernel (PTRACE_SECCOMP_GET_FILTER),
// and has every sandbox load that program just before its program starts:
// libcontainer is given no profile, and the process it execs is the seccomp
// loader (containerd-shim-sandpit-v1 seccomp-exec, static, from a sealed
// memfd at fd 3) with the program at fd 4, which loads it and execs the real
// program. Where any of this is unavailable, libcontainer compiles as runc
// does.

// CompileMode is the helper's argument: sandpit-shim seccomp-compile.
const CompileMode = "seccomp-compile"

// RunCompileHelper is the helper process: it loads the profile on stdin
// into itself, says so on stdout, and waits to be read and killed. It
// never returns.
func RunCompileHelper() {
	runtime.LockOSThread()
	var cfg configs.Seccomp
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := seccomp.InitSeccomp(&cfg); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("OK")
	io.Copy(io.Discard, os.Stdin) // until the shim is done with us
	os.Exit(0)
}

// filters compiles and keeps the programs, by profile.
type filters struct {
	log    *slog.Logger
	loader *os.File // sealed copy of the loader binary; nil: disabled
	// init is a sealed copy of sandpit-shim-init, passed at InitFD beside
	// the loader (nil: none); sandpit-shim's init re-executes into it.
	init   *os.File
	mu     sync.Mutex
	byKey  map[[32]byte]*os.File // sealed programs
	failed map[[32]byte]error
}

// InitFD is where a sandbox's init finds sandpit-shim-init: after the
// loader (fd 3) and the filter (fd 4). cmd/sandpit-shim's constructor
// checks the same number at compile time.
const InitFD = 5

// newFilters makes the loader's sealed copy, and that of the init binary
// if initPath is set; an empty loaderPath disables precompiled filters,
// and with them the init binary, which travels beside the loader.
func newFilters(loaderPath, initPath, tmp string, log *slog.Logger) (*filters, error) {
	f := &filters{log: log, byKey: map[[32]byte]*os.File{}, failed: map[[32]byte]error{}}
	if loaderPath == "" || runtime.GOARCH != "amd64" {
		log.Info("seccomp profiles are compiled in every sandbox (no loader)")
		return f, nil
	}
	var err error
	if f.loader, err = sealedCopy(loaderPath, "sandpit-seccomp-loader", tmp); err != nil {
		return nil, fmt.Errorf("seccomp loader: %w", err)
	}
	if initPath != "" {
		if f.init, err = sealedCopy(initPath, "sandpit-shim-init", tmp); err != nil {
			return nil, fmt.Errorf("init binary: %w", err)
		}
	}
	return f, nil
}

// sealedCopy is a sealed, executable copy of the binary at path (a memfd
// named runc_cloned:name where the kernel has them), as libcontainer makes
// of its own binary: nothing in a sandbox can write through to the host's
// file (CVE-2019-5736).
func sealedCopy(path, name, tmp string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return nil, err
	}
	return exeseal.CloneBinary(src, st.Size(), name, tmp)
}

// apply replaces cfg's profile with a precompiled program loaded by the
// loader in front of the process, when that is possible; otherwise it
// leaves cfg as is for libcontainer.
func (f *filters) apply(cfg *configs.Config, p *libcontainer.Process, noNewPrivs bool) error {
	sc := cfg.Seccomp
	if f.loader == nil || sc == nil || !noNewPrivs || sc.ListenerPath != "" || len(p.ExtraFiles) > 0 ||
		sc.DefaultAction == configs.Notify || slices.ContainsFunc(sc.Syscalls, func(s *configs.Syscall) bool { return s.Action == configs.Notify }) {
		return nil
	}
	flags, err := kernelFlags(sc.Flags)
	if err != nil {
		return err
	}
	prog, err := f.program(sc, flags)
	if err != nil {
		return err
	}
	cfg.Seccomp = nil
	p.Args = append([]string{loaderPath, loaderMode}, p.Args...)
	p.ExtraFiles = []*os.File{f.loader, prog} // fds 3 and 4
	if f.init != nil {
		// InitFD; the loader closes it with the other two.
		p.ExtraFiles = append(p.ExtraFiles, f.init)
	}
	return nil
}

// goInit replaces sandpit's bash init in its "stdin" mode (a cold run; the
// runtime says so with sandpit.InitAnnotation) by the loader's built-in
// equivalent: the loader is a Go program already running as PID 1, so the
// sandbox skips bash's start-up and its timer's fork. Only on the loader
// path (apply rewrote args) and only for exactly the script's argument
// shape; anything else runs as given.
func goInit(args []string, annotations map[string]string) []string {
	if annotations[sandpit.InitAnnotation] != "stdin" || len(args) < 8 ||
		args[0] != loaderPath || args[1] != loaderMode ||
		args[2] != "/bin/bash" || args[3] != "-c" || args[5] != "sandpit-init" || args[6] != "stdin" {
		return args
	}
	return append([]string{loaderPath, loaderMode, loaderInitFlag}, args[7:]...)
}

// How apply starts the loader, and the flag that makes it the init
// (cmd/containerd-shim-sandpit-v1: seccompExecMode, initFlag).
const (
	loaderPath     = "/proc/self/fd/3"
	loaderMode     = "seccomp-exec"
	loaderInitFlag = "--init"
)

// The seccomp(2) flags runc passes for a profile's flags (patchbpf's
// filterFlags): TSYNC is implied (runc ignores it; the loader uses it).
const (
	seccompFlagLog       = 1 << 1
	seccompFlagSpecAllow = 1 << 2
)

func kernelFlags(fl []specs.LinuxSeccompFlag) (uint32, error) {
	var k uint32
	for _, f := range fl {
		switch f {
		case specs.LinuxSeccompFlagLog:
			k |= seccompFlagLog
		case specs.LinuxSeccompFlagSpecAllow:
			k |= seccompFlagSpecAllow
		case "SECCOMP_FILTER_FLAG_TSYNC":
		default:
			return 0, fmt.Errorf("seccomp flag %s is not known to the loader", f)
		}
	}
	return k, nil
}

// filterMagic starts a compiled program's file: "SPS1", then the seccomp(2)
// flags, then the BPF instructions (containerd-shim-sandpit-v1 reads it).
const filterMagic = 0x31535053

// program returns the compiled program of sc, compiling it the first time.
func (f *filters) program(sc *configs.Seccomp, flags uint32) (*os.File, error) {
	b, err := json.Marshal(sc)
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.byKey[key]; p != nil {
		return p, nil
	}
	if err := f.failed[key]; err != nil {
		return nil, err
	}
	prog, err := compile(b)
	if err == nil {
		var buf bytes.Buffer
		binary.Write(&buf, binary.LittleEndian, [2]uint32{filterMagic, flags})
		for _, ins := range prog {
			binary.Write(&buf, binary.LittleEndian, ins)
		}
		var p *os.File
		p, err = exeseal.CloneBinary(&buf, int64(buf.Len()), "sandpit-seccomp-filter", os.TempDir())
		if err == nil {
			f.byKey[key] = p
			f.log.Info("seccomp profile compiled once for every sandbox", "instructions", len(prog), "profile", fmt.Sprintf("%x", key[:6]))
			return p, nil
		}
	}
	f.failed[key] = err
	return nil, err
}

// compile runs the helper on the profile and reads back the program it
// loaded.
func compile(profile []byte) ([]unix.SockFilter, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, CompileMode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	// ptrace calls must come from the thread that attached.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Kill()
		stdin.Close()
		cmd.Wait()
	}()
	stdin.Write(profile)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "OK" {
		return nil, fmt.Errorf("seccomp helper: %q %v", strings.TrimSpace(line), err)
	}
	pid := cmd.Process.Pid
	if err := unix.PtraceAttach(pid); err != nil {
		return nil, fmt.Errorf("ptrace the seccomp helper: %w", err)
	}
	defer unix.PtraceDetach(pid)
	if err := waitStopped(pid); err != nil {
		return nil, err
	}
	n, err := getFilter(pid, nil)
	if err != nil {
		return nil, fmt.Errorf("read the seccomp program: %w", err)
	}
	prog := make([]unix.SockFilter, n)
	if _, err := getFilter(pid, prog); err != nil {
		return nil, fmt.Errorf("read the seccomp program: %w", err)
	}
	// runc loads one filter; a second one would mean another loader.
	if _, err := getFilterAt(pid, 1, nil); !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("the seccomp helper has more than one filter (%v)", err)
	}
	return prog, nil
}

func waitStopped(pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err != nil {
			return fmt.Errorf("wait for the seccomp helper: %w", err)
		}
		if got == pid && ws.Stopped() {
			return nil
		}
		if got == pid {
			return fmt.Errorf("seccomp helper ended: %v", ws)
		}
		if time.Now().After(deadline) {
			return errors.New("seccomp helper did not stop")
		}
		time.Sleep(time.Millisecond)
	}
}

func getFilter(pid int, prog []unix.SockFilter) (int, error) { return getFilterAt(pid, 0, prog) }

func getFilterAt(pid, index int, prog []unix.SockFilter) (int, error) {
	var ptr uintptr
	if len(prog) > 0 {
		ptr = uintptr(unsafe.Pointer(&prog[0]))
	}
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), uintptr(index), ptr, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
