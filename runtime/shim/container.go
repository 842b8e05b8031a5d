package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/mount"
	_ "github.com/opencontainers/cgroups/devices" // device rules of the cgroup manager
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v2"
)

// container is one sandbox: a libcontainer container whose init process was
// created (parked on its exec fifo by libcontainer's init) and is started
// later. Its lock serialises its own lifecycle calls only: sandboxes never
// wait for each other.
type container struct {
	mu     sync.Mutex
	id     string
	bundle string
	rootfs string // bundle/rootfs, when the shim mounted it
	stdio  stdioPaths
	c      *libcontainer.Container
	proc   *libcontainer.Process
	pid    int

	started bool
	// stdinHold is a writer the shim keeps on the stdin FIFO until CloseIO,
	// so that the program never reads EOF before the client wrote.
	stdinHold *os.File
	copiers   sync.WaitGroup // the stdout and stderr copiers
	copyOut   []*os.File     // every copier's files, closed to stop them

	exited     chan struct{} // closed once the init was reaped
	exitStatus int           // set before exited closes
	exitedAt   time.Time
}

type stdioPaths struct{ stdin, stdout, stderr string }

// create makes the container of a CreateTaskRequest, its init parked on the
// exec fifo. On error nothing is left: no mount, no state, no process.
func create(stateRoot string, flt *filters, log *slog.Logger, r *taskAPI.CreateTaskRequest) (_ *container, retErr error) {
	if r.Terminal {
		return nil, errors.New("terminals are not supported")
	}
	if r.Checkpoint != "" {
		return nil, errors.New("checkpoints are not supported")
	}
	spec, err := readSpec(r.Bundle)
	if err != nil {
		return nil, err
	}
	ctr := &container{id: r.ID, bundle: r.Bundle, exited: make(chan struct{}),
		stdio: stdioPaths{r.Stdin, r.Stdout, r.Stderr}}
	defer func() {
		if retErr != nil {
			ctr.release()
		}
	}()
	if len(r.Rootfs) > 0 {
		ctr.rootfs = filepath.Join(r.Bundle, "rootfs")
		if err := os.Mkdir(ctr.rootfs, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		var ms []mount.Mount
		for _, m := range r.Rootfs {
			ms = append(ms, mount.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
		}
		if err := mount.All(ms, ctr.rootfs); err != nil {
			ctr.rootfs = ""
			return nil, fmt.Errorf("mount rootfs: %w", err)
		}
	}
	// specconv resolves a relative root against the working directory,
	// which is the bundle for runc and not for a shim serving many.
	if spec.Root == nil {
		return nil, errors.New("spec has no root")
	}
	if !filepath.IsAbs(spec.Root.Path) {
		spec.Root.Path = filepath.Join(r.Bundle, spec.Root.Path)
	}
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: r.ID, Spec: spec})
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	proc, err := newProcess(spec.Process)
	if err != nil {
		return nil, err
	}
	if err := flt.apply(cfg, proc, spec.Process.NoNewPrivileges); err != nil {
		// libcontainer compiles the profile itself, as runc would.
		log.Warn("seccomp profile not precompiled; compiling it per sandbox", "err", err)
	}
	proc.Args = goInit(proc.Args, spec.Annotations)
	if err := ctr.openStdio(proc); err != nil {
		return nil, err
	}
	ctr.c, err = libcontainer.Create(stateRoot, r.ID, cfg)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	if err := ctr.c.Start(proc); err != nil {
		return nil, fmt.Errorf("start container init: %w", err)
	}
	ctr.proc = proc
	ctr.pid, err = proc.Pid()
	if err != nil {
		return nil, err
	}
	// The init holds its own copies of its stdio now.
	closeStdio(proc)
	go ctr.reap()
	return ctr, nil
}

// reap waits for the init and records how it ended.
func (c *container) reap() {
	st, err := c.proc.Wait()
	status := 255
	if st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				status = 128 + int(ws.Signal())
			case ws.Exited():
				status = ws.ExitStatus()
			}
		}
	} else if err != nil {
		status = 255
	}
	c.exitStatus, c.exitedAt = status, time.Now()
	close(c.exited)
}

func (c *container) hasExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// openStdio connects the client's FIFOs to the init's standard streams
// through pipes, as containerd's runc shim does: a FIFO handed to the
// program would show it the host path of its run directory
// (/proc/self/fd/N), a pipe shows nothing. Copiers move the data; the FIFOs
// are opened non-blocking (the runtime's poller waits, not a thread per
// stream) and the program's ends of the pipes are blocking.
func (c *container) openStdio(p *libcontainer.Process) (retErr error) {
	defer func() {
		if retErr != nil {
			closeStdio(p)
			c.closeCopiers()
		}
	}()
	if c.stdio.stdin != "" {
		// A writer of our own first: the copier then never reads EOF
		// before the client has written and CloseIO has dropped it.
		hold, err := openFIFO(c.stdio.stdin, unix.O_RDWR)
		if err != nil {
			return fmt.Errorf("stdin: %w", err)
		}
		c.stdinHold = hold
		in, err := openFIFO(c.stdio.stdin, unix.O_RDONLY)
		if err != nil {
			return fmt.Errorf("stdin: %w", err)
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			in.Close()
			return err
		}
		p.Stdin = pr
		c.copyOut = append(c.copyOut, in, pw)
		go func() {
			io.Copy(pw, in)
			pw.Close()
			in.Close()
		}()
	}
	for _, s := range []struct {
		path string
		dst  *io.Writer
	}{{c.stdio.stdout, &p.Stdout}, {c.stdio.stderr, &p.Stderr}} {
		if s.path == "" {
			continue
		}
		// Read-write: the open never waits for a reader (the client opened
		// its own before it asked for the task).
		out, err := openFIFO(s.path, unix.O_RDWR)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(s.path), err)
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			out.Close()
			return err
		}
		*s.dst = pw
		c.copiers.Add(1)
		c.copyOut = append(c.copyOut, out, pr)
		go func() {
			defer c.copiers.Done()
			io.Copy(out, pr)
			pr.Close()
			out.Close()
		}()
	}
	return nil
}

// openFIFO opens a FIFO non-blocking, for the runtime's poller.
func openFIFO(path string, flags int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("%s is not a FIFO", path)
	}
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// closeStdio closes the shim's copies of the program's ends of the pipes.
func closeStdio(p *libcontainer.Process) {
	for _, s := range []any{p.Stdin, p.Stdout, p.Stderr} {
		if f, ok := s.(*os.File); ok {
			f.Close()
		}
	}
}

// closeCopiers stops the copiers (a container being destroyed: whatever
// its program wrote has been copied once its processes are gone).
func (c *container) closeCopiers() {
	for _, f := range c.copyOut {
		f.Close()
	}
	c.copyOut = nil
}

// closeStdin lets the program read EOF once the client is done writing.
func (c *container) closeStdin() {
	if c.stdinHold != nil {
		c.stdinHold.Close()
		c.stdinHold = nil
	}
}

// destroy kills what is left of the container and removes its cgroups,
// state and rootfs mount. It waits for the init to be reaped (bounded).
func (c *container) destroy() error {
	var errs []error
	if c.c != nil {
		if !c.hasExited() {
			c.c.Signal(unix.SIGKILL) // the pid namespace goes with its init
			select {
			case <-c.exited:
			case <-time.After(5 * time.Second):
				errs = append(errs, errors.New("init not reaped 5 s after SIGKILL"))
			}
		}
		if err := c.c.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	c.release()
	return errors.Join(errs...)
}

// release drops what create acquired besides the container itself.
func (c *container) release() {
	c.closeStdin()
	if c.proc != nil {
		closeStdio(c.proc)
	}
	c.drainCopiers()
	if c.rootfs != "" {
		if err := mount.UnmountAll(c.rootfs, unix.MNT_DETACH); err == nil {
			c.rootfs = ""
		}
	}
}

func readSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if s.Process == nil {
		return nil, errors.New("spec has no process")
	}
	return &s, nil
}

// newProcess is the init process of a spec, as runc builds it.
func newProcess(p *specs.Process) (*libcontainer.Process, error) {
	lp := &libcontainer.Process{
		Args:            p.Args,
		Env:             p.Env,
		UID:             int(p.User.UID),
		GID:             int(p.User.GID),
		Cwd:             p.Cwd,
		Label:           p.SelinuxLabel,
		NoNewPrivileges: &p.NoNewPrivileges,
		AppArmorProfile: p.ApparmorProfile,
		Scheduler:       p.Scheduler,
		IOPriority:      p.IOPriority,
		Init:            true,
	}
	if c := p.Capabilities; c != nil {
		lp.Capabilities = &configs.Capabilities{Bounding: c.Bounding, Effective: c.Effective,
			Inheritable: c.Inheritable, Permitted: c.Permitted, Ambient: c.Ambient}
	}
	for _, g := range p.User.AdditionalGids {
		lp.AdditionalGroups = append(lp.AdditionalGroups, int(g))
	}
	for _, rl := range p.Rlimits {
		t, ok := rlimits[rl.Type]
		if !ok {
			return nil, fmt.Errorf("unknown rlimit %s", rl.Type)
		}
		lp.Rlimits = append(lp.Rlimits, configs.Rlimit{Type: t, Hard: rl.Hard, Soft: rl.Soft})
	}
	aff, err := configs.ConvertCPUAffinity(p.ExecCPUAffinity)
	if err != nil {
		return nil, err
	}
	lp.CPUAffinity = aff
	return lp, nil
}

var rlimits = map[string]int{
	"RLIMIT_CPU":        unix.RLIMIT_CPU,
	"RLIMIT_FSIZE":      unix.RLIMIT_FSIZE,
	"RLIMIT_DATA":       unix.RLIMIT_DATA,
	"RLIMIT_STACK":      unix.RLIMIT_STACK,
	"RLIMIT_CORE":       unix.RLIMIT_CORE,
	"RLIMIT_RSS":        unix.RLIMIT_RSS,
	"RLIMIT_NPROC":      unix.RLIMIT_NPROC,
	"RLIMIT_NOFILE":     unix.RLIMIT_NOFILE,
	"RLIMIT_MEMLOCK":    unix.RLIMIT_MEMLOCK,
	"RLIMIT_AS":         unix.RLIMIT_AS,
	"RLIMIT_LOCKS":      unix.RLIMIT_LOCKS,
	"RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
	"RLIMIT_MSGQUEUE":   unix.RLIMIT_MSGQUEUE,
	"RLIMIT_NICE":       unix.RLIMIT_NICE,
	"RLIMIT_RTPRIO":     unix.RLIMIT_RTPRIO,
	"RLIMIT_RTTIME":     unix.RLIMIT_RTTIME,
}

// drainCopiers waits a moment for the output copiers to deliver what the
// program wrote (they end at its pipes' EOF), then stops every copier.
func (c *container) drainCopiers() {
	done := make(chan struct{})
	go func() { c.copiers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	c.closeCopiers()
}
