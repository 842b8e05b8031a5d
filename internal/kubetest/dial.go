package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// DialContext connects from inside the node's network namespace, where
// Pod and Service addresses route (the host has no route to them): a
// client given it (http.Transport.DialContext) reaches a Service's
// ClusterIP as a process on the node would. The socket is made on a
// thread that has entered the namespace and then left it again; the
// connection stays in the namespace it was made in.
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.NetNS == "" {
		return nil, fmt.Errorf("dial %s: no node in this cluster (StartNode)", addr)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	// A goroutine of its own, its thread locked and never unlocked: if
	// leaving the namespace failed, the thread dies with the goroutine
	// instead of serving others inside the node.
	go func() {
		goruntime.LockOSThread()
		conn, err := dialIn(ctx, "/run/netns/"+c.NetNS, network, addr)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

func dialIn(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer home.Close()
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter %s: %w", nsPath, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if serr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); serr != nil {
		// The thread stays locked and goes when its goroutine ends.
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("leave %s: %w", nsPath, serr)
	}
	return conn, err
}
