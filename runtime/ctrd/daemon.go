package ctrd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// SystemAddress is where a distribution's containerd listens.
const SystemAddress = "/run/containerd/containerd.sock"

// PrivateDaemon describes the containerd sandpit starts for itself when no
// system daemon answers: its own root, state, sockets and plugin dir, with
// the CRI plugin disabled, so it never collides with another containerd.
// scripts/containerd.sh starts the same daemon from the shell.
//
// At most one runs per Dir: a daemon that lives (found by its process or by
// its socket) is waited for, never started again, and nothing of its dir
// (sockets, state, pid file) is touched while it lives.
type PrivateDaemon struct {
	Dir  string // sockets, state, pid file, log (default /run/sandpit/containerd)
	Root string // persistent data: content, snapshots (default /var/lib/sandpit/containerd)
	// Patience is how long a live daemon that does not answer is waited
	// for, and how long a started one may take to answer (default 30 s).
	Patience time.Duration
}

func (d *PrivateDaemon) defaults() {
	if d.Dir == "" {
		d.Dir = "/run/sandpit/containerd"
	}
	if d.Root == "" {
		d.Root = "/var/lib/sandpit/containerd"
	}
	if d.Patience <= 0 {
		d.Patience = 30 * time.Second
	}
}

// StateDir is the daemon's state: a bundle, FIFOs and a task socket per task.
func (d PrivateDaemon) StateDir() string {
	d.defaults()
	return filepath.Join(d.Dir, "state")
}

// Address is the private daemon's gRPC socket.
func (d PrivateDaemon) Address() string {
	d.defaults()
	return filepath.Join(d.Dir, "containerd.sock")
}

// Answers reports whether a containerd serves at addr, within timeout.
func Answers(ctx context.Context, addr string, timeout time.Duration) (string, error) {
	if _, err := os.Stat(addr); err != nil {
		return "", err
	}
	c, err := containerd.New(addr, containerd.WithTimeout(timeout))
	if err != nil {
		return "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := c.Version(ctx)
	if err != nil {
		return "", err
	}
	return v.Version, nil
}

// Resolve picks the containerd to use. An explicit address is used as given
// (and reported unavailable later if nothing answers there). Otherwise the
// system daemon is used when it answers, then the private daemon: waited
// for when it lives, started when none does and start is true.
func Resolve(ctx context.Context, explicit string, d PrivateDaemon, start bool, log *slog.Logger) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if _, err := Answers(ctx, SystemAddress, 2*time.Second); err == nil {
		log.Info("using the system containerd", "address", SystemAddress)
		return SystemAddress, nil
	}
	priv := d.Address()
	if _, err := Answers(ctx, priv, 2*time.Second); err == nil {
		log.Info("using sandpit's private containerd", "address", priv)
		return priv, nil
	}
	if pid, alive := d.running(); alive || !start {
		if !alive {
			return priv, &engine.UnavailableError{Address: priv, Err: errors.New("no system containerd answers and the private one is not running")}
		}
		// Slow (a loaded host, a GC or I/O stall), not gone: starting
		// another would only fight it for its root and sockets.
		if err := d.await(ctx, pid, log); err != nil {
			return priv, unavailable(priv, err)
		}
		log.Info("using sandpit's private containerd", "address", priv)
		return priv, nil
	}
	if err := d.Start(ctx, log); err != nil {
		return priv, unavailable(priv, err)
	}
	return priv, nil
}

// unavailable wraps err in an UnavailableError, keeping err's own hint (a
// stuck daemon's pid, a missing binary) in front of the generic one.
func unavailable(addr string, err error) error {
	var u error = &engine.UnavailableError{Address: addr, Err: err}
	if hint := sandpit.HintOf(err); hint != "" {
		u = sandpit.WithHint(u, hint)
	}
	return u
}

// Start launches the private daemon in its own session, so that it outlives
// this process and the next sandpit reuses it, and waits until it answers.
// When one lives already (started by another process, or by hand with this
// config) it waits for that one to answer instead, failing with its pid
// when it does not within Patience. Starters serialise on a lock in Dir; a
// daemon that does not answer within Patience of its start is killed.
func (d PrivateDaemon) Start(ctx context.Context, log *slog.Logger) error {
	d.defaults()
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return sandpit.WithHint(fmt.Errorf("containerd is not installed: %w", errors.Join(ErrUnavailable, err)), "`sudo apt-get install containerd runc`, or scripts/install-deps.sh")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return sandpit.WithHint(fmt.Errorf("runc is not installed: %w", errors.Join(ErrUnavailable, err)), "`sudo apt-get install runc`")
	}
	if os.Geteuid() != 0 {
		return sandpit.WithHint(fmt.Errorf("starting a private containerd needs root: %w", ErrUnavailable), "run as root, or see `sandpit doctor` for rootless mode")
	}
	if err := os.MkdirAll(d.Dir, 0o711); err != nil {
		return err
	}
	unlock, err := d.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	// Under the lock: a daemon found now was started by someone else (or
	// by a starter that held the lock before us).
	if pid, alive := d.running(); alive {
		return d.await(ctx, pid, log)
	}
	// Its state dir only: the log and config stay where they were, on disk.
	if _, err := StateOnTmpfs(d.StateDir(), log); err != nil {
		log.Warn("private containerd: its state stays on disk", "dir", d.StateDir(), "err", err)
	}
	if err := os.MkdirAll(d.Root, 0o711); err != nil {
		return err
	}
	sock := d.Address()
	conf := filepath.Join(d.Dir, "config.toml")
	if err := os.WriteFile(conf, []byte(d.Config()), 0o600); err != nil {
		return err
	}
	// Left by a daemon that died: no process listens on them (running).
	for _, f := range []string{sock, sock + ".ttrpc", filepath.Join(d.Dir, "debug.sock")} {
		os.Remove(f)
	}
	logPath := filepath.Join(d.Dir, "containerd.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	pid := cmd.Process.Pid
	pidFile := filepath.Join(d.Dir, "containerd.pid")
	os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	log.Info("started a private containerd", "address", sock, "pid", pid, "log", logPath)
	// A daemon that never answered is of no use to anyone and would block
	// every later start: kill it rather than leave it behind.
	abandon := func(why error) error {
		cmd.Process.Kill()
		<-exited
		os.Remove(pidFile)
		return fmt.Errorf("containerd (pid %d, killed): %w; see %s", pid, why, logPath)
	}
	deadline := time.Now().Add(d.Patience)
	for {
		select {
		case err := <-exited:
			os.Remove(pidFile)
			return fmt.Errorf("containerd exited at start (%v); see %s", err, logPath)
		case <-ctx.Done():
			return abandon(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if _, err := Answers(ctx, sock, time.Second); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return abandon(fmt.Errorf("it did not answer within %s", d.Patience))
		}
	}
}

// lock takes the starters' lock of d.Dir, waiting (bounded) for another
// starter to finish.
func (d PrivateDaemon) lock(ctx context.Context) (unlock func(), err error) {
	path := filepath.Join(d.Dir, "containerd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("private containerd lock: %w", err)
	}
	// A starter holds it at most Patience, plus the time to look around.
	deadline := time.Now().Add(2*d.Patience + 10*time.Second)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("private containerd lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// running finds a live daemon of d: a containerd process whose state dir
// is d's, or any process listening on d's socket (its pid then, when
// visible). A stopped or stalled daemon counts: it still holds its root
// and its sockets.
func (d PrivateDaemon) running() (pid int, alive bool) {
	d.defaults()
	state, err := filepath.Abs(d.StateDir())
	if err == nil {
		if pids := ContainerdsUsing(state); len(pids) > 0 {
			return pids[0], true
		}
	}
	// A connect succeeds while the listener lives, even stopped (the
	// kernel queues it); a socket file whose process died refuses it.
	if pid, err := host.PeerPID(d.Address()); err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist)) {
		return pid, true
	}
	return 0, false
}

// await waits, with backoff, up to Patience for the live daemon pid (0:
// not visible) to answer.
func (d PrivateDaemon) await(ctx context.Context, pid int, log *slog.Logger) error {
	d.defaults()
	who := "its process not visible"
	if pid > 0 {
		who = fmt.Sprintf("pid %d", pid)
	}
	deadline := time.Now().Add(d.Patience)
	var err error
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 4*time.Second) {
		if _, err = Answers(ctx, d.Address(), 2*time.Second); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().Add(wait).After(deadline) {
			break
		}
		if wait == 250*time.Millisecond {
			log.Info("private containerd is alive but does not answer yet; waiting", "address", d.Address(), "pid", pid, "patience", d.Patience)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return sandpit.WithHint(
		fmt.Errorf("the private containerd at %s is alive, %s, but did not answer within %s; sandpit does not start a second one beside it (%w: %v)", d.Address(), who, d.Patience, ErrUnavailable, err),
		fmt.Sprintf("it may be stopped or stuck (see %s); `sandpit containerd stop` ends it", filepath.Join(d.Dir, "containerd.log")))
}

// Config is the daemon's config.toml: its own root, state, sockets and
// plugin dir. Disabled: CRI, and two plugins that work on every task for
// features sandpit does not use: the cgroups monitor (containerd's OOM
// events; sandpit reads OOM kills from each sandbox's cgroup) and the
// restart monitor (restarts containers labelled for it). `sandpit
// containerd config` prints it for scripts that start a containerd
// themselves (rootless.sh), so the file is written in one place.
func (d PrivateDaemon) Config() string {
	d.defaults()
	q := strconv.Quote
	sock := d.Address()
	return strings.Join([]string{
		`version = 2`,
		`root = ` + q(filepath.Join(d.Root, "root")),
		`state = ` + q(d.StateDir()),
		`disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.monitor.v1.cgroups", "io.containerd.internal.v1.restart"]`,
		``,
		`[grpc]`,
		`  address = ` + q(sock),
		``,
		`[ttrpc]`,
		`  address = ` + q(sock+".ttrpc"),
		``,
		`[debug]`,
		`  address = ` + q(filepath.Join(d.Dir, "debug.sock")),
		``,
		`[plugins."io.containerd.internal.v1.opt"]`,
		`  path = ` + q(filepath.Join(d.Root, "opt")),
		``,
	}, "\n")
}

// PID returns the pid of the running private daemon, 0 when none runs: the
// pid file's when that process is a containerd, else that of a containerd
// found using the daemon's state dir (one started by hand with its config).
func (d PrivateDaemon) PID() int {
	d.defaults()
	if b, err := os.ReadFile(filepath.Join(d.Dir, "containerd.pid")); err == nil {
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && pid > 0 && d.isOurs(pid) {
			return pid
		}
	}
	if state, err := filepath.Abs(d.StateDir()); err == nil {
		if pids := ContainerdsUsing(state); len(pids) > 0 {
			return pids[0]
		}
	}
	return 0
}

// isOurs says whether pid is a live containerd with this daemon's state
// dir. A pid file can name a pid reused since by anything — another
// private containerd among them, on a host where pids wrap at 32768 and
// tests start dozens: "a containerd" is not enough (a Stop of a dead
// daemon once continued and ended another test's stopped one).
func (d PrivateDaemon) isOurs(pid int) bool {
	procDir := fmt.Sprintf("/proc/%d", pid)
	b, err := os.ReadFile(procDir + "/cmdline")
	if err != nil || len(b) == 0 { // gone, or a zombie
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if filepath.Base(args[0]) != "containerd" {
		return false
	}
	want, err := filepath.Abs(d.StateDir())
	if err != nil {
		return false
	}
	state := containerdState(args[1:], procDir)
	return state != "" && filepath.Clean(state) == filepath.Clean(want)
}

// Stop ends the private daemon: SIGTERM, then SIGKILL after 5 s. Its
// sandboxes' shims keep running (containerd's design); the janitor of the
// next server removes what they hold.
func (d PrivateDaemon) Stop(ctx context.Context) error {
	d.defaults()
	pid := d.PID()
	if pid == 0 {
		return nil
	}
	syscall.Kill(pid, syscall.SIGTERM)
	syscall.Kill(pid, syscall.SIGCONT) // a stopped daemon acts on SIGTERM only once continued
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if !d.isOurs(pid) { // gone (or a zombie)
			os.Remove(filepath.Join(d.Dir, "containerd.pid"))
			d.releaseState()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if d.isOurs(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	os.Remove(filepath.Join(d.Dir, "containerd.pid"))
	for deadline := time.Now().Add(5 * time.Second); d.isOurs(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	d.releaseState()
	return nil
}

// releaseState unmounts the state tmpfs Start mounted, when the stopped
// daemon left nothing in it.
func (d PrivateDaemon) releaseState() {
	log := slog.Default()
	if _, err := ReleaseStateTmpfs(d.StateDir(), log); err != nil {
		log.Warn("the private containerd's state tmpfs stays mounted", "dir", d.StateDir(), "err", err)
	}
}
