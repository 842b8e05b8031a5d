package runtime_test

// What containerd itself spends per task against per exec in one
// long-lived task (issue 15: could sandboxes be execs of one task?):
//
//	SANDPIT_TEST_CONTAINERD=/run/sandpit/containerd/containerd.sock \
//	  go test -run '^$' -bench ContainerdCPU -benchtime 60x ./runtime/
//
// Each reports containerd's own CPU per operation (the daemon's utime and
// stime from /proc, not its children: the shims' start and delete execs
// are reported apart as child-cpu-ms/op). Both use containerd's runc shim
// with a plain spec on one read-only view of the test image, running
// /bin/true: what differs is only what containerd does.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	coci "github.com/containerd/containerd/oci"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testruntime"
)

// containerdCPU is a process's own CPU and that of the children it reaped.
func containerdCPU(b *testing.B, pid int) (own, children time.Duration) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * 10 * time.Millisecond // USER_HZ 100
	}
	return tick(11) + tick(12), tick(13) + tick(14)
}

// costRig is a client, the daemon's pid and a read-only rootfs.
type costRig struct {
	c      *containerd.Client
	ctx    context.Context
	pid    int
	rootfs string
}

func newCostRig(b *testing.B) *costRig {
	cfg := testruntime.Config(b)
	pid, err := host.PeerPID(cfg.Address)
	if err != nil {
		b.Skipf("containerd's pid: %v", err)
	}
	c, err := containerd.New(cfg.Address)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := namespaces.WithNamespace(context.Background(), testenv.Namespace)
	img, err := c.GetImage(ctx, testenv.Image())
	if err != nil {
		b.Fatal(err)
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		b.Fatal(err)
	}
	key := fmt.Sprintf("costrig-%d", os.Getpid())
	sn := c.SnapshotService("")
	mounts, err := sn.View(ctx, key, identity.ChainID(diffIDs).String())
	if err != nil {
		b.Fatal(err)
	}
	rootfs := b.TempDir()
	os.Chmod(rootfs, 0o755)
	if err := mount.All(mounts, rootfs); err != nil {
		sn.Remove(ctx, key)
		b.Fatal(err)
	}
	b.Cleanup(func() {
		mount.UnmountAll(rootfs, 0)
		sn.Remove(ctx, key)
	})
	return &costRig{c: c, ctx: ctx, pid: pid, rootfs: rootfs}
}

func (r *costRig) container(b *testing.B, id string, args ...string) containerd.Container {
	ctr, err := r.c.NewContainer(r.ctx, id, containerd.WithRuntime("io.containerd.runc.v2", nil),
		containerd.WithNewSpec(coci.WithDefaultSpec(), coci.WithRootFSPath(r.rootfs), coci.WithRootFSReadonly(), coci.WithProcessArgs(args...)))
	if err != nil {
		b.Fatal(err)
	}
	return ctr
}

// runToEnd starts a created task or exec, waits for its exit and deletes
// it: the same calls for both, so only what containerd does differs.
func (r *costRig) runToEnd(b *testing.B, p containerd.Process) {
	st, err := p.Wait(r.ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(r.ctx); err != nil {
		b.Fatal(err)
	}
	<-st
	if _, err := p.Delete(r.ctx); err != nil {
		b.Fatal(err)
	}
}

func (r *costRig) report(b *testing.B, own0, kids0 time.Duration) {
	own, kids := containerdCPU(b, r.pid)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(own-own0), "containerd-cpu-ms/op")
	b.ReportMetric(ms(kids-kids0), "child-cpu-ms/op")
}

func BenchmarkContainerdCPUPerTask(b *testing.B) {
	r := newCostRig(b)
	own0, kids0 := containerdCPU(b, r.pid)
	for i := range b.N {
		ctr := r.container(b, fmt.Sprintf("costrig-%d-t%d", os.Getpid(), i), "/bin/true")
		task, err := ctr.NewTask(r.ctx, cio.NullIO)
		if err != nil {
			b.Fatal(err)
		}
		r.runToEnd(b, task)
		if err := ctr.Delete(r.ctx); err != nil {
			b.Fatal(err)
		}
	}
	r.report(b, own0, kids0)
}

func BenchmarkContainerdCPUPerExec(b *testing.B) {
	r := newCostRig(b)
	ctr := r.container(b, fmt.Sprintf("costrig-%d-long", os.Getpid()), "/bin/sleep", "infinity")
	task, err := ctr.NewTask(r.ctx, cio.NullIO)
	if err != nil {
		ctr.Delete(r.ctx)
		b.Fatal(err)
	}
	b.Cleanup(func() {
		task.Delete(r.ctx, containerd.WithProcessKill)
		ctr.Delete(r.ctx)
	})
	if err := task.Start(r.ctx); err != nil {
		b.Fatal(err)
	}
	proc := &specs.Process{Args: []string{"/bin/true"}, Cwd: "/", Env: []string{"PATH=/usr/bin:/bin"}}
	own0, kids0 := containerdCPU(b, r.pid)
	for i := range b.N {
		p, err := task.Exec(r.ctx, fmt.Sprintf("x%d", i), proc, cio.NullIO)
		if err != nil {
			b.Fatal(err)
		}
		r.runToEnd(b, p)
	}
	r.report(b, own0, kids0)
}
