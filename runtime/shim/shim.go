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
	"net"
	"os"
	"os/signal"
	"sync"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/namespaces"
	cshim "github.com/containerd/containerd/runtime/v2/shim"
	"github.com/containerd/containerd/sys/reaper"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
)

// Config is how sandpit starts the shim.
type Config struct {
	Namespace    string // containerd namespace of every task it serves
	TTRPCAddress string // containerd's ttrpc socket, where events go
	Root         string // the shim's state: one dir per container
	RuncBinary   string
	// Listener is the task API socket (sandpit creates it, so that it can
	// hand out the address before the shim accepts).
	Listener net.Listener
	// Owner is read until EOF: its end means the owner is gone.
	Owner io.Reader
	// Ready is closed once the shim serves.
	Ready io.Closer
}

// Serve runs the shim until its owner goes away or ctx ends, then kills and
// deletes every container it still holds.
func Serve(ctx context.Context, cfg Config) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a subreaper: %w", err)
	}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGPIPE)
	go func() {
		for s := range sigs {
			if s == unix.SIGCHLD {
				reaper.Reap()
			}
		}
	}()
	ctx = namespaces.WithNamespace(ctx, cfg.Namespace)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	publisher, err := cshim.NewPublisher(cfg.TTRPCAddress)
	if err != nil {
		return fmt.Errorf("event publisher: %w", err)
	}
	defer publisher.Close()

	svc, err := newRuncService(ctx, publisher, cfg)
	if err != nil {
		return err
	}
	server, err := ttrpc.NewServer(ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()))
	if err != nil {
		return err
	}
	taskAPI.RegisterTaskService(server, svc)

	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, cfg.Listener) }()
	if cfg.Ready != nil {
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
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	server.Shutdown(sctx)
	return nil
}

// tracked remembers the ids of the containers the service holds, for the
// clean-up when the owner goes away.
type tracked struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (t *tracked) set(id string, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if on {
		t.ids[id] = true
	} else {
		delete(t.ids, id)
	}
}

func (t *tracked) list() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for id := range t.ids {
		out = append(out, id)
	}
	return out
}
