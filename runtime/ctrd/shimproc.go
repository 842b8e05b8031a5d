package ctrd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/api/types/runc/options"

	"github.com/sandpit-dev/sandpit"
)

// sandpit's own runtime: a shim of its own (package runtime/shim, binary
// sandpit-shim), one long-lived process per Runtime serving all its
// sandboxes, registered with containerd by the absolute path of
// containerd-shim-sandpit-v1, the runtime binary containerd execs for every
// task (start prints the shim's address from the runtime options; delete
// does nothing). No daemon configuration is involved.

// RuntimeSandpit selects sandpit's own shim (Config.RuntimeName); the
// containerd-style name io.containerd.sandpit.v1 means the same.
const RuntimeSandpit = "sandpit"

// The programs of sandpit's runtime, found in Config.ShimDir. The init
// binary is optional: without it, each sandbox's init is sandpit-shim
// itself, which costs each creation ≈ 1.5 ms and 1-3 ms of CPU more
// (cmd/sandpit-shim-init).
const (
	ShimRuntimeBinary = "containerd-shim-sandpit-v1"
	ShimDaemonBinary  = "sandpit-shim"
	ShimInitBinary    = "sandpit-shim-init"
)

// UsesShim reports whether sandboxes run under sandpit's own shim.
func (c *Config) UsesShim() bool {
	return c.RuntimeName == RuntimeSandpit || c.RuntimeName == "io.containerd.sandpit.v1"
}

// shimDefaults finds the shim's programs: beside this executable unless
// ShimDir says otherwise.
func (c *Config) shimDefaults() {
	if c.ShimDir == "" {
		if self, err := os.Executable(); err == nil {
			c.ShimDir = filepath.Dir(self)
		}
	}
}

// CheckShim says what sandpit's runtime is missing, before anything runs.
func (c *Config) CheckShim() error {
	for _, name := range []string{ShimRuntimeBinary, ShimDaemonBinary} {
		p := filepath.Join(c.ShimDir, name)
		if !isExecutable(p) || !filepath.IsAbs(p) {
			return sandpit.WithHint(fmt.Errorf("runtime %s needs %s: %w", RuntimeSandpit, p, errors.Join(ErrUnavailable, errors.New("not an executable at an absolute path"))),
				"build it with `go build -tags seccomp,runc_nocriu -o bin/ ./cmd/...` (scripts/serve.sh does), or point --shim-dir at it; --runtime io.containerd.runc.v2 runs without it")
		}
	}
	return nil
}

// ShimInit is where sandpit-shim-init is in the shim dir, and whether it is
// there (without it each sandbox's init runs from sandpit-shim itself).
func (c *Config) ShimInit() (string, bool) {
	p := filepath.Join(c.ShimDir, ShimInitBinary)
	return p, isExecutable(p)
}

// isExecutable reports whether path is a file someone may execute.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// shimProc is one running sandpit-shim.
type shimProc struct {
	pid     int
	sock    string   // task API socket
	root    string   // its state dir
	owner   *os.File // the write end of its stdin: closing it stops the shim
	done    chan struct{}
	err     error // how it exited, once done is closed
	started time.Time
	// ready is set once it served; stopping when the runtime closes it on
	// purpose. Both under Runtime.shimMu.
	ready, stopping bool
}

func (s *shimProc) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// exitError describes a shim that died under a run.
func (s *shimProc) exitError(cause error) error {
	how := "exited"
	if s.err != nil {
		how = s.err.Error()
	}
	return sandpit.WithHint(fmt.Errorf("%w: sandpit-shim (pid %d) %s while the sandbox was in use; the run is lost (%v)", ErrShimDied, s.pid, how, cause),
		fmt.Sprintf("run it again: a fresh shim is started; its log is %s", filepath.Join(s.root, "shim.log")))
}

// shimRoot is the state dir of the runtime's shim.
func (e *Engine) shimRoot() string { return filepath.Join(e.cfg.StateDir, "shim") }

// ensureShim returns the running shim, starting one when there is none or
// the last one died. A fresh shim destroys what a dead one left in its root
// before it serves.
func (e *Engine) ensureShim() (*shimProc, error) {
	e.shimMu.Lock()
	defer e.shimMu.Unlock()
	if s := e.shim; s != nil && !s.exited() {
		return s, nil
	}
	select {
	case <-e.closing:
		return nil, fmt.Errorf("%w: the runtime is closing", ErrUnavailable)
	default:
	}
	s, err := e.startShim()
	if err != nil {
		return nil, err
	}
	e.shim = s
	return s, nil
}

func (e *Engine) startShim() (_ *shimProc, retErr error) {
	root := e.shimRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("shim state dir: %w", err)
	}
	sock, err := shimSocket(root)
	if err != nil {
		return nil, err
	}
	os.Remove(sock)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("shim socket: %w", err)
	}
	l.SetUnlinkOnClose(false) // the shim keeps serving on it
	lf, err := l.File()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("shim socket: %w", err)
	}
	defer lf.Close()
	logf, err := os.OpenFile(filepath.Join(root, "shim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shim log: %w", err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	// The shim closes its end of this pipe once it serves, after it
	// destroyed what a dead shim left in root.
	readyR, readyW, err := os.Pipe()
	if err != nil {
		pw.Close()
		return nil, err
	}
	defer readyR.Close()
	args := []string{
		"-namespace", e.cfg.Namespace,
		"-ttrpc-address", e.cfg.Address + ".ttrpc",
		"-root", root,
		"-seccomp-loader", filepath.Join(e.cfg.ShimDir, ShimRuntimeBinary),
	}
	if p, ok := e.cfg.ShimInit(); ok {
		args = append(args, "-init", p)
	} else {
		e.log.Warn("each sandbox's init runs from sandpit-shim itself, ≈ 1.5 ms slower to create: "+ShimInitBinary+" is not in the shim dir (scripts/build.sh builds it)", "shim_dir", e.cfg.ShimDir)
	}
	cmd := exec.Command(filepath.Join(e.cfg.ShimDir, ShimDaemonBinary), args...)
	cmd.Dir = root
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pr, logf, logf
	cmd.ExtraFiles = []*os.File{lf, readyW}
	// Its own session: a ^C to sandpit's process group must not take the
	// shim down before sandpit has removed its sandboxes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", ShimDaemonBinary, err)
	}
	s := &shimProc{pid: cmd.Process.Pid, sock: sock, root: root, owner: pw, done: make(chan struct{}), started: time.Now()}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
		e.shimMu.Lock()
		report := s.ready && !s.stopping
		e.shimMu.Unlock()
		if report {
			e.log.Error("sandpit-shim died; runs in it are lost, a fresh one starts with the next sandbox", "pid", s.pid, "err", s.err, "log", filepath.Join(root, "shim.log"))
			e.shimDied(s)
		}
	}()
	if e.cfg.ShimCgroup != "" {
		if err := moveToCgroup(s.pid, e.cfg.ShimCgroup); err != nil {
			e.log.Warn("sandpit-shim stays in sandpit's cgroup", "err", err)
		}
	}
	// Wait for it to serve: it writes one byte; EOF alone means it died.
	readyR.SetReadDeadline(time.Now().Add(shimStartTimeout))
	var b [1]byte
	if n, err := readyR.Read(b[:]); n != 1 {
		if errors.Is(err, io.EOF) {
			<-s.done
			err = fmt.Errorf("exited at start: %v", s.err)
		}
		syscall.Kill(s.pid, syscall.SIGKILL)
		return nil, fmt.Errorf("%s did not start: %w (see %s)", ShimDaemonBinary, err, filepath.Join(root, "shim.log"))
	}
	s.ready = true // under shimMu, held by ensureShim
	e.log.Debug("started sandpit-shim", "pid", s.pid, "socket", sock)
	return s, nil
}

// shimDied has the orchestration drop the pooled sandboxes the dead shim held and starts a
// fresh shim at once, which destroys what the dead one left (its
// containers still run). A shim that dies right after it started is not
// restarted eagerly: the next sandbox tries again.
func (e *Engine) shimDied(s *shimProc) {
	if time.Since(s.started) > shimStartTimeout {
		e.background(func() {
			if _, err := e.ensureShim(); err != nil {
				e.log.Warn("cannot start a fresh sandpit-shim", "err", err)
			}
		})
	}
	if e.cfg.OnLost != nil {
		e.cfg.OnLost()
	}
}

// shimStartTimeout bounds a shim's start, its clean-up of a dead one's
// leftovers included.
const shimStartTimeout = 20 * time.Second

// stopShim ends the shim once every sandbox is deleted: it kills and
// deletes whatever it still holds when its stdin closes.
func (e *Engine) stopShim() {
	e.shimMu.Lock()
	s := e.shim
	e.shim = nil
	if s != nil {
		s.stopping = true
	}
	e.shimMu.Unlock()
	if s == nil {
		return
	}
	s.owner.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		e.log.Warn("sandpit-shim did not exit 10 s after its owner closed it; killing it", "pid", s.pid)
		syscall.Kill(s.pid, syscall.SIGKILL)
		<-s.done
	}
	os.Remove(s.sock)
}

// runtimeOpts registers the sandbox's runtime with containerd: the runc
// shim by name, or sandpit's shim by the absolute path of its runtime
// binary, with the address of the shim to use.
func (e *Engine) runtimeOpts(ctx context.Context) (containerd.NewContainerOpts, *shimProc, error) {
	if !e.cfg.UsesShim() {
		return e.runcOptions(), nil, nil
	}
	s, err := e.ensureShim()
	if err != nil {
		return nil, nil, err
	}
	return containerd.WithRuntime(filepath.Join(e.cfg.ShimDir, ShimRuntimeBinary), &options.Options{
		BinaryName:     e.cfg.RuncBinary,
		Root:           filepath.Join(s.root, "runc"),
		TaskApiAddress: "unix://" + s.sock,
	}), s, nil
}

// shimSocket is the shim's task API socket: in its root, or, when that path
// is too long for a unix socket (108 bytes with the NUL), under
// /run/sandpit/s named by a hash of the root, as containerd names its
// shims' sockets.
func shimSocket(root string) (string, error) {
	sock := filepath.Join(root, "shim.sock")
	if len(sock) < 100 {
		return sock, nil
	}
	sum := sha256.Sum256([]byte(root))
	dir := "/run/sandpit/s"
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("shim socket dir: %w", err)
	}
	return filepath.Join(dir, hex.EncodeToString(sum[:12])+".sock"), nil
}

// shimLost turns the error of a sandbox whose shim died into ErrShimDied.
// containerd may report the broken connection before our wait on the
// process returns: a moment is allowed for that.
func shimLost(s *shimProc, err error) error {
	if s == nil || err == nil {
		return err
	}
	if s.exited() {
		return s.exitError(err)
	}
	if isUnavailable(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // containerd itself went away, or the caller gave up
	}
	select {
	case <-s.done:
		return s.exitError(err)
	case <-time.After(2 * time.Second):
		return err
	}
}

// removeAfterShimDied removes a sandbox whose shim died: containerd drops
// the task once it has run its dead-shim clean-up (the runtime binary's
// delete), and only then lets the container go. The fresh shim destroys
// the container's processes and state.
func (e *Engine) removeAfterShimDied(ctx context.Context, id string) {
	anyError := func(error) bool { return true }
	if err := e.retryRemoval(ctx, anyError, func() error { return e.removeOnce(ctx, id) }); err != nil {
		e.log.Warn("sandbox of a dead shim not removed; the janitor will", "id", id, "err", err)
	}
}
