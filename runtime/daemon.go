package runtime

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
)

// SystemAddress is where a distribution's containerd listens.
const SystemAddress = "/run/containerd/containerd.sock"

// PrivateDaemon describes the containerd sandpit starts for itself when no
// system daemon answers: its own root, state, sockets and plugin dir, with
// the CRI plugin disabled, so it never collides with another containerd.
// scripts/containerd.sh starts the same daemon from the shell.
type PrivateDaemon struct {
	Dir  string // sockets, state, pid file, log (default /run/sandpit/containerd)
	Root string // persistent data: content, snapshots (default /var/lib/sandpit/containerd)
}

func (d *PrivateDaemon) defaults() {
	if d.Dir == "" {
		d.Dir = "/run/sandpit/containerd"
	}
	if d.Root == "" {
		d.Root = "/var/lib/sandpit/containerd"
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
// system daemon is used when it answers, then the private daemon, which is
// started when start is true.
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
	if !start {
		return priv, &UnavailableError{Address: priv, Err: errors.New("no system containerd answers and the private one is not running")}
	}
	if err := d.Start(ctx, log); err != nil {
		return priv, &UnavailableError{Address: priv, Err: err}
	}
	return priv, nil
}

// Start launches the private daemon in its own session, so that it outlives
// this process and the next sandpit reuses it, and waits until it answers.
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
	// Its state dir only: the log and config stay where they were, on disk.
	if _, err := StateOnTmpfs(d.StateDir(), log); err != nil {
		log.Warn("private containerd: its state stays on disk", "dir", d.StateDir(), "err", err)
	}
	for _, dir := range []string{d.Dir, d.Root} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return err
		}
	}
	sock := d.Address()
	conf := filepath.Join(d.Dir, "config.toml")
	if err := os.WriteFile(conf, []byte(d.Config()), 0o600); err != nil {
		return err
	}
	for _, f := range []string{sock, sock + ".ttrpc", filepath.Join(d.Dir, "debug.sock")} {
		os.Remove(f)
	}
	logf, err := os.OpenFile(filepath.Join(d.Dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
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
	os.WriteFile(filepath.Join(d.Dir, "containerd.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	log.Info("started a private containerd", "address", sock, "pid", pid, "log", filepath.Join(d.Dir, "containerd.log"))
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("containerd exited at start (%v); see %s", err, filepath.Join(d.Dir, "containerd.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if _, err := Answers(ctx, sock, time.Second); err == nil {
			return nil
		}
	}
	return fmt.Errorf("containerd did not answer within 15s; see %s", filepath.Join(d.Dir, "containerd.log"))
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

// PID returns the pid of the running private daemon, from its pid file, or
// 0 when none runs.
func (d PrivateDaemon) PID() int {
	d.defaults()
	b, err := os.ReadFile(filepath.Join(d.Dir, "containerd.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
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
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if syscall.Kill(pid, 0) != nil {
			os.Remove(filepath.Join(d.Dir, "containerd.pid"))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	os.Remove(filepath.Join(d.Dir, "containerd.pid"))
	return nil
}
