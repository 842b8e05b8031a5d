// Package shim is sandpit's containerd shim: one long-lived process per
// sandpit instance that serves the task API (containerd.task.v2, over ttrpc,
// as containerd's v1.7 shim library speaks it) for all of that instance's
// sandboxes. containerd still execs a runtime binary for every task
// (containerd-shim-sandpit-v1 start and delete); those execs only point
// containerd at this process, which is started by sandpit (runtime.Runtime)
// and not by containerd.
//
// The guarantees: a task is served only to connections from the shim's own
// uid; when its owner (the sandpit process holding its stdin) goes away, the
// shim kills and deletes every container it holds and exits; and a fresh
// shim first destroys whatever a dead one left in the same root, so a crash
// never leaves a sandbox running.
package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	cshim "github.com/containerd/containerd/runtime/v2/shim"
	"github.com/containerd/ttrpc"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Config is how sandpit starts the shim.
type Config struct {
	Namespace    string // containerd namespace of every task it serves
	TTRPCAddress string // containerd's ttrpc socket, where events go
	Root         string // the shim's state: one dir per container
	// Listener is the task API socket (sandpit creates it, so that it can
	// hand out the address before the shim accepts).
	Listener net.Listener
	// Owner is read until EOF: its end means the owner is gone.
	Owner io.Reader
	// Loader is the seccomp loader (containerd-shim-sandpit-v1); empty:
	// libcontainer compiles each sandbox's profile (see seccomp.go).
	Loader string
	// Init is sandpit-shim-init, each sandbox's init in place of this
	// binary (see cmd/sandpit-shim-init); it needs Loader. Empty: this
	// binary is the init.
	Init string
	// Ready gets one byte, and is closed, once the shim serves.
	Ready io.WriteCloser
	Log   *slog.Logger
}

// Serve runs the shim until its owner goes away or ctx ends, then kills and
// deletes every container it still holds. Before it serves, it destroys
// what a dead shim left in its root.
func Serve(ctx context.Context, cfg Config) error {
	if !seccomp.Enabled {
		return errors.New("built without seccomp support (go build -tags seccomp, with libseccomp-dev): it would refuse every sandbox's filter")
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	// libcontainer logs through logrus: warnings and errors to our log.
	logrus.SetOutput(os.Stderr)
	logrus.SetLevel(logrus.WarnLevel)

	state := filepath.Join(cfg.Root, "containers")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	if err := destroyLeftovers(state, nil, log); err != nil {
		log.Warn("leftovers of a dead shim not all destroyed", "err", err)
	}

	ctx = namespaces.WithNamespace(ctx, cfg.Namespace)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	publisher, err := cshim.NewPublisher(cfg.TTRPCAddress)
	if err != nil {
		return fmt.Errorf("event publisher: %w", err)
	}
	defer publisher.Close()

	flt, err := newFilters(cfg.Loader, cfg.Init, cfg.Root, log)
	if err != nil {
		return err
	}
	svc := newService(ctx, state, publisher, flt, log)
	server, err := ttrpc.NewServer(ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()))
	if err != nil {
		return err
	}
	taskAPI.RegisterTaskService(server, svc)

	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, cfg.Listener) }()
	if cfg.Ready != nil {
		cfg.Ready.Write([]byte{'R'})
		cfg.Ready.Close()
	}
	go func() {
		io.Copy(io.Discard, cfg.Owner)
		cancel()
	}()
	select {
	case <-ctx.Done():
	case err := <-served:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	svc.killAll(context.WithoutCancel(ctx))
	// Whatever of ours still has state on disk (a create killAll could not
	// wait for) goes the way a dead shim's leftovers go: an init parked on
	// its exec FIFO watches nothing and would outlive us. Only ours: the
	// next shim of this instance may already be serving from this root.
	if err := destroyLeftovers(state, svc.madeHere, log); err != nil {
		log.Warn("containers left at exit not all destroyed", "err", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	server.Shutdown(sctx)
	return nil
}

// unmountLeftover detaches a dead container's rootfs, if the shim mounted
// it (a bundle's rootfs/, for a task created with rootfs mounts) and
// containerd has not already: a root the client made and passed by path
// (sandpit's shared roots) is the client's.
func unmountLeftover(rootfs string) {
	if rootfs == "" || filepath.Base(rootfs) != "rootfs" {
		return
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(rootfs), "config.json")); err == nil {
		mount.UnmountAll(rootfs, unix.MNT_DETACH)
	}
}
