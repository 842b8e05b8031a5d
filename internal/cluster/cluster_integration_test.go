package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
)

const ns = "sandpit"

// clients are a separate connection each: a node agent, a front door
// replica, as separate processes would have.
func clients(t testing.TB, cfg *rest.Config) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cfg = cluster.Tune(rest.CopyConfig(cfg))
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, dyn
}

func agent(t *testing.T, cfg *rest.Config, node string, d time.Duration) *cluster.Agent {
	t.Helper()
	kube, _ := clients(t, cfg)
	a := &cluster.Agent{Client: kube, Namespace: ns, Node: node, Endpoint: "https://" + node + ".test:8443", Duration: d}
	if err := a.Start(t.Context()); err != nil {
		t.Fatalf("agent %s: %v", node, err)
	}
	return a
}

func placer(t testing.TB, cfg *rest.Config) *cluster.Placer {
	kube, dyn := clients(t, cfg)
	return &cluster.Placer{Kube: kube, Dynamic: dyn, Namespace: ns}
}

// informedPlacer is a started Placer (informers, as a front door runs
// one), on a connection whose requests are counted in requests.
func informedPlacer(t testing.TB, cfg *rest.Config, requests *atomic.Int32) *cluster.Placer {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countAll{rt, requests} }
	kube, dyn := clients(t, cfg)
	p := &cluster.Placer{Kube: kube, Dynamic: dyn, Namespace: ns}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p
}

// countAll counts the requests but watches sent through it.
type countAll struct {
	rt http.RoundTripper
	n  *atomic.Int32
}

func (c countAll) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("watch") != "true" {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// eventually waits for cond, which reads the API server's watch cache
// (Leases and placements are listed from it): a write is there a moment
// after it returned. It is the state a step means, not a speed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cachedNode is node as the watch cache lists it.
func cachedNode(t *testing.T, cfg *rest.Config, node string) (cluster.Node, bool) {
	kube, _ := clients(t, cfg)
	nodes, err := cluster.Nodes(t.Context(), kube, ns)
	if err != nil {
		t.Fatal(err)
	}
	return cluster.FindNode(nodes, node)
}

// placedInCache reports whether tenant's placement is in the watch cache,
// which new placements count from.
func placedInCache(t *testing.T, cfg *rest.Config, tenant string) bool {
	_, dyn := clients(t, cfg)
	list, err := dyn.Resource(cluster.WorkspaceGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Items {
		if o.GetName() == cluster.ObjectName(tenant) {
			return true
		}
	}
	return false
}

// run renews a's Lease until the returned stop is called (a dead agent
// is one whose renewals stopped without a release).
func run(t *testing.T, a *cluster.Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent %s: %v", a.Node, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestPlacementOnARealAPIServer: node agents' Leases, placement records,
// two front doors racing, a lapsed Lease, a drain and a release, against
// a real kube-apiserver and etcd (scripts/k8s.sh) with the CRD from
// scripts/kubernetes/crd.yaml.
func TestPlacementOnARealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	c.Namespace(t, ns)
	c.Apply(t, kubetest.RepoFile(t, "scripts/kubernetes/crd.yaml"), ns)
	ctx := t.Context()

	p := placer(t, c.Config)
	if _, err := p.Place(ctx, "early"); !errors.Is(err, cluster.ErrNoNodes) || !errors.Is(err, sandpit.ErrUnavailable) || !strings.Contains(sandpit.Describe(err), "--cluster-node NAME") {
		t.Fatalf("placing with no node: %v, want cluster.ErrNoNodes (class unavailable) with a hint", err)
	}

	a := agent(t, c.Config, "node-a", 3*time.Second)
	stopA := run(t, a)
	b := agent(t, c.Config, "node-b", time.Minute)
	run(t, b)

	t.Run("one agent per node name", func(t *testing.T) {
		kube, _ := clients(t, c.Config)
		dup := &cluster.Agent{Client: kube, Namespace: ns, Node: "node-b", Endpoint: "https://elsewhere:1"}
		err := dup.Start(ctx)
		if err == nil || !strings.Contains(err.Error(), "held by another agent") {
			t.Fatalf("a second agent for a live node: %v, want refused", err)
		}
	})

	t.Run("spread over live nodes", func(t *testing.T) {
		count := map[string]int{}
		for i := range 6 {
			pl, err := p.Place(ctx, fmt.Sprintf("spread-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "spread placement in the watch cache", func() bool { return placedInCache(t, c.Config, fmt.Sprintf("spread-%d", i)) })
			if pl.Endpoint != "https://"+pl.Node+".test:8443" {
				t.Errorf("placement %+v: endpoint not the node's", pl)
			}
			count[pl.Node]++
		}
		if count["node-a"] != 3 || count["node-b"] != 3 {
			t.Errorf("6 tenants over 2 empty nodes: %v, want 3 each", count)
		}
		// Placed is placed: asking again changes nothing.
		for i := range 6 {
			again, err := p.Place(ctx, fmt.Sprintf("spread-%d", i))
			if err != nil || again.Moved {
				t.Errorf("placing spread-%d again: %+v, %v", i, again, err)
			}
		}
	})

	var informedRequests atomic.Int32
	pi := informedPlacer(t, c.Config, &informedRequests)
	t.Run("two front doors racing place each tenant once", func(t *testing.T) {
		raceTest(t, c, "race", placer(t, c.Config), placer(t, c.Config))
	})
	t.Run("two informed front doors racing place each tenant once", func(t *testing.T) {
		var n atomic.Int32
		raceTest(t, c, "irace", pi, informedPlacer(t, c.Config, &n))
	})
	t.Run("an informed front door finds a placed tenant without a request", func(t *testing.T) {
		if _, err := pi.Place(ctx, "irace-0"); err != nil {
			t.Fatal(err)
		}
		before := informedRequests.Load()
		for range 10 {
			if _, err := pi.Place(ctx, "irace-0"); err != nil {
				t.Fatal(err)
			}
		}
		if n := informedRequests.Load() - before; n != 0 {
			t.Errorf("10 placements of a placed tenant made %d requests, want 0 (the informers have it)", n)
		}
	})

	t.Run("a lapsed lease moves its tenants", func(t *testing.T) {
		before, err := p.Place(ctx, "spread-0")
		if err != nil {
			t.Fatal(err)
		}
		if before.Node != "node-a" {
			t.Fatalf("spread-0 is on %s, want node-a (the first placed)", before.Node)
		}
		stopA() // renewals stop, the Lease stays: a dead node
		died := time.Now()
		var after cluster.Placement
		for {
			after, err = p.Place(ctx, "spread-0")
			if err != nil {
				t.Fatal(err)
			}
			if after.Node != "node-a" {
				break
			}
			if time.Since(died) > 2*time.Minute {
				t.Fatalf("spread-0 still on node-a %v after its agent stopped renewing a 3 s lease", time.Since(died))
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("failover: renewals stopped → placement moved after %v (lease 3 s, renewals every 1 s)", time.Since(died).Round(time.Millisecond))
		if !after.Moved || after.From != "node-a" || after.Node != "node-b" || !strings.Contains(after.Reason, "lapsed") {
			t.Errorf("after node-a died: %+v, want moved from node-a to node-b because its lease lapsed", after)
		}
		// An informed front door whose cache still shows node-a (or
		// the record there) writes at a stale version, and reads again.
		if got, err := pi.Place(ctx, "spread-0"); err != nil || got.Node != "node-b" || got.Moved {
			t.Errorf("an informed front door placing spread-0 after the move: %+v, %v; want node-b, not moved again", got, err)
		}
		// The move is recorded once: the next call just finds it.
		again, err := p.Place(ctx, "spread-0")
		if err != nil || again.Moved || again.Node != "node-b" {
			t.Errorf("placing spread-0 after the move: %+v, %v", again, err)
		}
	})

	t.Run("drain moves tenants and takes no new ones; stop releases", func(t *testing.T) {
		cnode := agent(t, c.Config, "node-c", time.Minute)
		run(t, cnode)
		eventually(t, "node-c in the watch cache", func() bool { _, ok := cachedNode(t, c.Config, "node-c"); return ok })
		if err := b.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, "node-b draining in the watch cache", func() bool { n, _ := cachedNode(t, c.Config, "node-b"); return n.Draining })
		pl, err := p.Place(ctx, "spread-1")
		if err != nil {
			t.Fatal(err)
		}
		if pl.Node != "node-c" || !pl.Moved || !strings.Contains(pl.Reason, "draining") {
			t.Errorf("a tenant of the draining node-b: %+v, want moved to node-c because node-b drains", pl)
		}
		for i := range 3 {
			pl, err := p.Place(ctx, fmt.Sprintf("new-%d", i))
			if err != nil || pl.Node != "node-c" {
				t.Errorf("new tenant while node-b drains: %+v, %v; want node-c", pl, err)
			}
		}
		if err := cnode.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, "node-c gone from the watch cache", func() bool { _, ok := cachedNode(t, c.Config, "node-c"); return !ok })
		kube, _ := clients(t, c.Config)
		nodes, err := cluster.Nodes(ctx, kube, ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.Name == "node-c" {
				t.Errorf("node-c's lease is still there after Stop: %+v", n)
			}
		}
		if _, err := p.Place(ctx, "new-0"); !errors.Is(err, cluster.ErrNoNodes) {
			t.Errorf("node-a dead, node-b draining, node-c stopped: %v, want cluster.ErrNoNodes", err)
		}
	})

	t.Run("a cordoned kubernetes node drains its agent", func(t *testing.T) {
		kube, _ := clients(t, c.Config)
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kn-d"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d := agent(t, c.Config, "node-d", time.Minute)
		d.KubeNode = "kn-d"
		agent(t, c.Config, "node-e", time.Minute)
		for _, n := range []string{"node-d", "node-e"} {
			eventually(t, n+" in the watch cache", func() bool { _, ok := cachedNode(t, c.Config, n); return ok })
		}
		pl, err := p.Place(ctx, "cordon-t")
		if err != nil || pl.Node != "node-d" {
			t.Fatalf("cordon-t: %+v, %v; want node-d (fewest workspaces, first by name)", pl, err)
		}
		setCordon := func(on bool) {
			n, err := kube.CoreV1().Nodes().Get(ctx, "kn-d", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Spec.Unschedulable = on
			if _, err := kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := d.Renew(ctx); err != nil { // what Run does at each tick
				t.Fatal(err)
			}
		}
		draining := func() bool {
			nodes, err := cluster.Nodes(ctx, kube, ns)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := cluster.FindNode(nodes, "node-d")
			return n.Draining
		}
		setCordon(true)
		eventually(t, "kn-d cordoned: node-d's lease marked draining", draining)
		pl, err = p.Place(ctx, "cordon-t")
		if err != nil || pl.Node != "node-e" || !strings.Contains(pl.Reason, "draining") {
			t.Errorf("cordon-t after kn-d was cordoned: %+v, %v; want moved to node-e because node-d drains", pl, err)
		}
		setCordon(false)
		eventually(t, "kn-d uncordoned: node-d no longer draining", func() bool { return !draining() })
	})

	t.Run("a client without rights is refused", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.NobodyKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		kube, dyn := clients(t, cfg)
		err = (&cluster.Agent{Client: kube, Namespace: ns, Node: "intruder", Endpoint: "https://x:1"}).Start(ctx)
		if !apierrors.IsForbidden(errors.Unwrap(err)) {
			t.Errorf("an agent without rights: %v, want Forbidden", err)
		}
		_, err = (&cluster.Placer{Kube: kube, Dynamic: dyn, Namespace: ns}).Place(ctx, "spread-2")
		if !apierrors.IsForbidden(errors.Unwrap(err)) {
			t.Errorf("a front door without rights: %v, want Forbidden", err)
		}
	})
}

// raceTest places 16 tenants named prefix-N through p1 and p2 at once:
// each gets one record, and both front doors name its node.
func raceTest(t *testing.T, c *kubetest.Cluster, prefix string, p1, p2 *cluster.Placer) {
	ctx := t.Context()
	const tenants = 16
	var wg sync.WaitGroup
	got := make([][2]cluster.Placement, tenants)
	errs := make(chan error, 2*tenants)
	for i := range tenants {
		for j, pp := range []*cluster.Placer{p1, p2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pl, err := pp.Place(ctx, fmt.Sprintf("%s-%d", prefix, i))
				if err != nil {
					errs <- err
				}
				got[i][j] = pl
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	_, dyn := clients(t, c.Config)
	for i := range tenants {
		if got[i][0].Node != got[i][1].Node {
			t.Errorf("%s-%d placed on %s by one front door and %s by the other", prefix, i, got[i][0].Node, got[i][1].Node)
		}
		obj, err := dyn.Resource(cluster.WorkspaceGVR).Namespace(ns).Get(ctx, cluster.ObjectName(fmt.Sprintf("%s-%d", prefix, i)), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s-%d: no placement record: %v", prefix, i, err)
		}
		if node := obj.Object["spec"].(map[string]any)["node"]; node != got[i][0].Node {
			t.Errorf("%s-%d: record says %v, the front doors %s", prefix, i, node, got[i][0].Node)
		}
	}
}
