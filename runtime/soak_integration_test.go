package runtime_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd"
	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/typeurl/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// envSoakRuns sets how many runs TestPoolSoak makes; the full check
// is 1000. envSoakWarm=1 makes every run wait for a ready pooled sandbox
// (one client at a time), so that all of them are served by the pool.
const (
	envSoakRuns = "SANDPIT_SOAK_RUNS"
	envSoakWarm = "SANDPIT_SOAK_WARM"
)

// TestPoolSoak pushes many runs through a small warm pool from a few
// goroutines, so runs are served both warm and cold (pool exhausted), and
// then checks that nothing of any sandbox is left: in containerd, in the
// kernel (cgroups, mounts), in runc's and the shims' state, or on disk.
// The full check of the performance issue (minutes on a 2-core host), all
// runs pooled:
//
//	SANDPIT_SOAK_RUNS=1000 SANDPIT_SOAK_WARM=1 SANDPIT_TEST_CONTAINERD=/run/sandpit/containerd/containerd.sock \
//	  go test -count=1 -timeout 30m -run TestPoolSoak -v ./runtime
func TestPoolSoak(t *testing.T) {
	n := 200
	if s := os.Getenv(envSoakRuns); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want a positive number of runs", envSoakRuns, s)
		}
		n = v
	}
	addr := testenv.Containerd(t)
	c, err := containerd.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	// A cleanup, not a defer: it must run after watchTaskCreates' cleanup
	// has ended the subscription, or closing reads as a subscription error.
	t.Cleanup(func() { c.Close() })
	ctx := namespaces.WithNamespace(t.Context(), testenv.Namespace)

	// Watch task creation from before the runtime exists: its pool starts
	// sandboxes at once. Tasks of parallel tests in the namespace are told
	// apart later by their FIFOs, which live under this runtime's StateDir.
	created := watchTaskCreates(t, ctx, c)
	r := newRuntime(t, withPool(2, time.Minute))
	cfg := r.Config()
	waitReady(t, r, "python", 2)
	checkProbesSeeLive(t, ctx, c, cfg, created)

	start := time.Now()
	allWarm := os.Getenv(envSoakWarm) == "1"
	results := soak(t, r, n, allWarm)
	t.Logf("%d runs in %s; pool before close: %+v", n, time.Since(start).Round(time.Millisecond), r.PoolStats()["python"])

	r.Close() // drains the pool and waits for background cleanup
	st := r.PoolStats()["python"]
	t.Logf("pool after close: %+v", st)
	if st.Created != st.Claimed+st.Expired+st.Discarded || st.Ready != 0 {
		t.Errorf("accounting: created %d != claimed %d + expired %d + discarded %d (ready %d)", st.Created, st.Claimed, st.Expired, st.Discarded, st.Ready)
	}

	// Every sandbox this runtime had a task for, pooled or cold.
	ids := map[string]bool{}
	bundles := map[string]string{}
	warm, cold := 0, 0
	for _, tc := range created.of(cfg.StateDir) {
		ids[tc.ContainerID] = true
		bundles[tc.ContainerID] = tc.Bundle
		if strings.HasPrefix(tc.ContainerID, "warm-") {
			warm++
		} else {
			cold++
		}
	}
	for _, res := range results {
		ids[res.ID] = true // a warm run's id names no container: harmless
	}
	// The pool was both used and exhausted, and the id set is complete:
	// every pooled sandbox created, and at least every run not served warm.
	switch {
	case allWarm && st.Claimed < int64(n):
		t.Errorf("want every run served by the pool: claimed %d of %d", st.Claimed, n)
	case !allWarm && (st.Claimed == 0 || cold == 0):
		t.Errorf("want runs both warm and cold: claimed %d, cold sandboxes %d", st.Claimed, cold)
	}
	if int64(warm) < st.Created || int64(cold) < int64(n)-st.Claimed {
		t.Errorf("saw tasks of %d pooled and %d cold sandboxes; the pool created %d and served at most %d of %d runs: the leak check would miss some",
			warm, cold, st.Created, st.Claimed, n)
	}
	assertNoLeaks(t, ctx, c, cfg, ids, bundles)
}

// soak makes n runs from a few goroutines and checks each result. Most print
// a computed value; every 25 runs one of each slow or failing kind.
func soak(t *testing.T, r *runtime.Runtime, n int, allWarm bool) []*sandpit.Result {
	workers := 4
	if allWarm {
		workers = 1
	}
	var (
		mu      sync.Mutex
		results []*sandpit.Result
		next    atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				req, check := soakCase(i)
				for allWarm && r.PoolStats()["python"].Ready == 0 && !stop.Load() {
					time.Sleep(10 * time.Millisecond)
				}
				// Not the run helper: t.Fatal must not be called off the test goroutine.
				res, err := r.Run(t.Context(), req)
				if err != nil {
					t.Errorf("run %d: %v", i, err)
					stop.Store(true) // one broken host is enough to report
					return
				}
				if msg := check(res); msg != "" {
					t.Errorf("run %d (%q): %s", i, req.Code, msg)
				}
				mu.Lock()
				results = append(results, res)
				if len(results)%100 == 0 {
					t.Logf("%d runs done; pool %+v", len(results), r.PoolStats()["python"])
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return results
}

// soakCase returns run i's request and a check of its result ("" if fine).
func soakCase(i int) (sandpit.Request, func(*sandpit.Result) string) {
	expect := func(status sandpit.Status, exit int, stdout string) func(*sandpit.Result) string {
		return func(res *sandpit.Result) string {
			switch {
			case res.Status != status || res.ExitCode != exit:
				return fmt.Sprintf("status, exit = %s, %d; want %s, %d (stderr %q)", res.Status, res.ExitCode, status, exit, res.Stderr)
			case res.Stdout != stdout:
				return fmt.Sprintf("stdout = %q, want %q", res.Stdout, stdout)
			case res.Stderr != "":
				return fmt.Sprintf("stderr = %q, want none", res.Stderr)
			}
			return ""
		}
	}
	req := sandpit.Request{Language: "python", Timeout: time.Minute} // as run's: a loaded host is slow, not broken
	switch i % 25 {
	case 6:
		code := 1 + i%250
		req.Code = fmt.Sprintf("import sys\nprint(%d)\nsys.exit(%d)", i, code)
		return req, expect(sandpit.StatusError, code, fmt.Sprintf("%d\n", i))
	case 12:
		req.Stdin = []byte(strings.Repeat(fmt.Sprintf("line %d\n", i), 2000))
		req.Code = "import hashlib, sys\nprint(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
		sum := sha256.Sum256(req.Stdin)
		return req, expect(sandpit.StatusSuccess, 0, hex.EncodeToString(sum[:])+"\n")
	case 18:
		req.Code, req.Timeout = "while True: pass", time.Second
		return req, func(res *sandpit.Result) string {
			if res.Status != sandpit.StatusTimeout {
				return fmt.Sprintf("status %s, want timeout", res.Status)
			}
			return ""
		}
	case 24:
		// The timeout only bounds a broken run: a loaded host can take long to reclaim and kill.
		req.Code, req.Timeout = "x = []\nwhile True: x.append(bytearray(32 << 20))", time.Minute // as in TestPoolBehavesLikeCold
		return req, func(res *sandpit.Result) string {
			if res.Status != sandpit.StatusOOM {
				return fmt.Sprintf("status %s, want oom", res.Status)
			}
			return ""
		}
	}
	req.Code = fmt.Sprintf("print(%d ** 2)", i)
	return req, expect(sandpit.StatusSuccess, 0, fmt.Sprintf("%d\n", i*i))
}

// taskCreates collects /tasks/create events of the test namespace.
type taskCreates struct {
	mu  sync.Mutex
	evs []*apievents.TaskCreate
}

// of returns the tasks whose stdio FIFOs lie under stateDir.
func (tc *taskCreates) of(stateDir string) []*apievents.TaskCreate {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var out []*apievents.TaskCreate
	for _, ev := range tc.evs {
		if io := ev.GetIO(); io != nil && strings.HasPrefix(io.Stdout, stateDir+string(filepath.Separator)) {
			out = append(out, ev)
		}
	}
	return out
}

// watchTaskCreates subscribes to task creation and returns once the
// subscription is known to be live (a marker event came through).
func watchTaskCreates(t *testing.T, ctx context.Context, c *containerd.Client) *taskCreates {
	t.Helper()
	const markerTopic = "/sandpit-test/soak-subscribed"
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	evs, errs := c.Subscribe(ctx,
		fmt.Sprintf(`topic==%q,namespace==%q`, "/tasks/create", testenv.Namespace),
		fmt.Sprintf(`topic==%q`, markerTopic))
	tc := &taskCreates{}
	live := make(chan struct{})
	var liveOnce sync.Once
	go func() {
		for {
			select {
			case env := <-evs:
				if env.Topic == markerTopic {
					liveOnce.Do(func() { close(live) }) // more than one marker may come
					continue
				}
				v, err := typeurl.UnmarshalAny(env.Event)
				if ev, ok := v.(*apievents.TaskCreate); ok && err == nil {
					tc.mu.Lock()
					tc.evs = append(tc.evs, ev)
					tc.mu.Unlock()
				}
			case err := <-errs:
				if err != nil && ctx.Err() == nil {
					t.Errorf("event subscription: %v", err)
				}
				return
			}
		}
	}()
	// Publish until the marker is seen: the subscription is set up
	// asynchronously and an event before that would be lost.
	for {
		if err := c.EventService().Publish(ctx, markerTopic, &apievents.ContainerCreate{ID: t.Name()}); err != nil {
			t.Fatalf("publish marker event: %v", err)
		}
		select {
		case <-live:
			return tc
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

// leftover is one trace of a sandbox found on the host.
type leftover struct{ id, kind, detail string }

// leftoverKinds are the traces findLeftovers looks for: under containerd's
// runc shim, a shim process per sandbox; under sandpit's own shim, which
// serves them all, any process left in the sandbox's cgroup. Sandboxes
// have no snapshot of their own (they share a root per image, which
// assertNothingLeft finds by label).
func leftoverKinds(cfg runtime.Config) []string {
	if cfg.UsesShim() {
		return []string{"task", "runc state", "bundle", "cgroup", "process", "mount"}
	}
	return []string{"task", "runc state", "bundle", "cgroup", "shim", "mount"}
}

// runcState is where the OCI runtime keeps a sandbox's state: runc's root,
// or sandpit-shim's libcontainer state dir.
func runcState(cfg runtime.Config, id string) string {
	if cfg.UsesShim() {
		return filepath.Join(cfg.StateDir, "shim", "containers", id)
	}
	return filepath.Join(cfg.RuncRoot, testenv.Namespace, id)
}

// findLeftovers returns every trace of the sandboxes ids (bundle dirs as
// reported by their task-create events, where known): containerd's snapshot
// and task, runc's state dir, the shim's bundle dir and process, cgroup
// directories in every hierarchy, and mounts (their rootfs, and anything
// under the runtime's StateDir).
func findLeftovers(t *testing.T, ctx context.Context, c *containerd.Client, cfg runtime.Config, ids map[string]bool, bundles map[string]string) []leftover {
	t.Helper()
	var out []leftover
	sn := c.SnapshotService(cfg.Snapshotter)
	for id := range ids {
		if _, err := sn.Stat(ctx, id); err == nil {
			out = append(out, leftover{id, "snapshot", id})
		} else if !errdefs.IsNotFound(err) {
			t.Fatalf("stat snapshot %s: %v", id, err)
		}
	}
	ts, err := c.TaskService().List(ctx, &tasks.ListTasksRequest{})
	if err != nil {
		t.Fatalf("list tasks: %v", err)
	}
	for _, p := range ts.Tasks {
		if ids[p.ID] {
			out = append(out, leftover{p.ID, "task", fmt.Sprintf("pid %d, %s", p.Pid, p.Status)})
		}
	}
	cgroups, mounts := hostMounts(t)
	for id := range ids {
		if d := runcState(cfg, id); exists(d) {
			out = append(out, leftover{id, "runc state", d})
		}
		if b := bundles[id]; b != "" && exists(b) {
			out = append(out, leftover{id, "bundle", b})
		}
		// containerd's default spec puts a sandbox at /<namespace>/<id>
		// (checkProbesSeeLive confirms it against a live one).
		for _, root := range cgroups {
			if d := filepath.Join(root, testenv.Namespace, id); exists(d) {
				out = append(out, leftover{id, "cgroup", d})
			}
		}
	}
	runs := filepath.Join(cfg.StateDir, "runs") + string(filepath.Separator)
	for _, m := range mounts {
		if rest, ok := strings.CutPrefix(m, runs); ok {
			out = append(out, leftover{strings.Split(rest, string(filepath.Separator))[0], "mount", m})
			continue
		}
		for id, b := range bundles {
			if ids[id] && (m == b || strings.HasPrefix(m, b+string(filepath.Separator))) {
				out = append(out, leftover{id, "mount", m})
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if cfg.UsesShim() {
			// A process of the sandbox: its cgroup is /<namespace>/<id>.
			b, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				_, path, _ := strings.Cut(line, ":")
				_, path, _ = strings.Cut(path, ":")
				if rest, ok := strings.CutPrefix(path, "/"+testenv.Namespace+"/"); ok && ids[rest] {
					out = append(out, leftover{rest, "process", filepath.Dir(p)})
					break
				}
			}
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		argv := strings.Split(string(b), "\x00")
		if !strings.Contains(filepath.Base(argv[0]), "containerd-shim") {
			continue
		}
		if i := slices.Index(argv, "-id"); i >= 0 && i+1 < len(argv) && ids[argv[i+1]] {
			out = append(out, leftover{argv[i+1], "shim", filepath.Dir(p) + ": " + strings.Join(argv, " ")})
		}
	}
	return out
}

// hostMounts returns the roots of the mounted cgroup hierarchies (v1
// controllers, a hybrid host's cgroup2, or a pure v2 root) and every mount
// point.
func hostMounts(t *testing.T) (cgroupRoots, points []string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		point := unescapeMountinfo(fields[4])
		points = append(points, point)
		if fs := fields[sep+1]; (fs == "cgroup" || fs == "cgroup2") && fields[3] == "/" {
			cgroupRoots = append(cgroupRoots, point)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return cgroupRoots, points
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// checkProbesSeeLive points findLeftovers at the pool's live sandboxes and
// expects every kind of trace: a probe looking in the wrong place would
// otherwise report "nothing left" forever. It also checks that the
// task-create events name those sandboxes, as the final check relies on them.
func checkProbesSeeLive(t *testing.T, ctx context.Context, c *containerd.Client, cfg runtime.Config, created *taskCreates) {
	t.Helper()
	ctrs, err := c.Containers(ctx, fmt.Sprintf("labels.%q==%q", runtime.LabelInstance, cfg.Instance))
	if err != nil || len(ctrs) == 0 {
		t.Fatalf("want the pool's live sandboxes, got %d (%v)", len(ctrs), err)
	}
	ids := map[string]bool{}
	for _, ctr := range ctrs {
		ids[ctr.ID()] = true
		spec, err := ctr.Spec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := "/" + testenv.Namespace + "/" + ctr.ID(); spec.Linux == nil || spec.Linux.CgroupsPath != want {
			t.Fatalf("cgroups path of %s is not %s: the cgroup probe looks in the wrong place", ctr.ID(), want)
		}
	}
	bundles := map[string]string{}
	for _, tc := range created.of(cfg.StateDir) {
		bundles[tc.ContainerID] = tc.Bundle
	}
	found := map[string]map[string]bool{}
	for _, l := range findLeftovers(t, ctx, c, cfg, ids, bundles) {
		if found[l.id] == nil {
			found[l.id] = map[string]bool{}
		}
		found[l.id][l.kind] = true
	}
	for id := range ids {
		if bundles[id] == "" {
			t.Errorf("live sandbox %s: no task-create event seen", id)
		}
		for _, kind := range leftoverKinds(cfg) {
			if !found[id][kind] {
				t.Errorf("live sandbox %s: no %s found: the leak probe for it cannot see anything", id, kind)
			}
		}
	}
}

// assertNoLeaks checks that nothing of the sandboxes ids is left, and that
// the runtime's StateDir holds no run directory or mount.
func assertNoLeaks(t *testing.T, ctx context.Context, c *containerd.Client, cfg runtime.Config, ids map[string]bool, bundles map[string]string) {
	t.Helper()
	assertNothingLeft(t, cfg.Address, cfg.Instance)
	// A shim process exits after its task delete returns, not with it:
	// give leftovers a bounded while to go. A real leak stays.
	left := findLeftovers(t, ctx, c, cfg, ids, bundles)
	if len(left) > 0 {
		t.Logf("%d traces right after Close (first: %s %s), waiting for them to go", len(left), left[0].kind, left[0].detail)
		testenv.Poll(testenv.Patience, func() bool {
			left = findLeftovers(t, ctx, c, cfg, ids, bundles)
			return len(left) == 0
		})
	}
	for i, l := range left {
		if i == 20 {
			t.Errorf("... and %d more", len(left)-i)
			break
		}
		t.Errorf("sandbox %s: %s left: %s", l.id, l.kind, l.detail)
	}
	entries, err := os.ReadDir(filepath.Join(cfg.StateDir, "runs"))
	if err != nil {
		t.Errorf("read runs/: %v", err)
	}
	for i, e := range entries {
		if i == 20 {
			t.Errorf("... and %d more", len(entries)-i)
			break
		}
		t.Errorf("run dir left: %s", e.Name())
	}
	_, mounts := hostMounts(t)
	for _, m := range mounts {
		if m == cfg.StateDir || strings.HasPrefix(m, cfg.StateDir+string(filepath.Separator)) {
			t.Errorf("mount left under the state dir: %s", m)
		}
	}
	t.Logf("checked %d sandbox ids for %v", len(ids), leftoverKinds(cfg))
}
