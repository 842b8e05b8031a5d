package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// The cluster part of the HTTP bench (http-cluster, issue 26): two node
// agents (`sandpit serve --listen --cluster-node`) and a front door
// (`serve --listen --cluster`) against a Kubernetes API server the caller
// runs, measured in one run:
//
//	latency:    warm run_code through the front door against straight to
//	            the tenant's node (a token of the node's own), interleaved
//	placement:  cluster.Placer.Place in this process, for fresh tenants and
//	            for a placed one
//	throughput: 8 tenants' clients flat out through the front door with two
//	            nodes
//	failover:   the node of a tenant SIGKILLed: from the kill to the first
//	            call through the front door that succeeds (a new session
//	            each try)
//	throughput: the same 8 tenants, new sessions, with the one node left
//
// Nothing here asserts a speed.

// clusterCRD is scripts/kubernetes/crd.yaml (a test keeps them equal): the
// bench applies it itself, so it runs from any directory.
//
//go:embed clustercrd.yaml
var clusterCRD []byte

// ClusterLease is the --cluster-lease of the bench's node agents: a killed
// node's tenants move once it lapsed.
const ClusterLease = 3 * time.Second

// clusterNamespace holds the bench's Leases and SandpitWorkspaces.
const clusterNamespace = "sandpit"

// HTTPCluster is what http-cluster measured.
type HTTPCluster struct {
	// Nodes and FrontDoor are how the servers were started (beyond the
	// runtime's flags); Namespace holds the Leases and placements.
	Nodes     []string `json:"nodes"`
	FrontDoor string   `json:"front_door"`
	Namespace string   `json:"namespace"`
	// LeaseMS is the nodes' --cluster-lease; CacheMS how long a front door
	// reuses a placement (cluster.DefaultCacheFor).
	LeaseMS int64 `json:"lease_ms"`
	CacheMS int64 `json:"placement_cache_ms"`

	// Latency: the same warm run_code through the front door and straight
	// to LatencyNode, the node the tenant was placed on.
	LatencyNode           string    `json:"latency_node,omitempty"`
	Latency               []Latency `json:"latency,omitempty"`
	FrontMinusDirectP50MS *float64  `json:"front_minus_direct_p50_ms,omitempty"`
	FrontMinusDirectP90MS *float64  `json:"front_minus_direct_p90_ms,omitempty"`

	// PlaceNew is Placer.Place of tenants never placed (each a record
	// created) with the bench's gap before each, PlaceNewBurst the same
	// back to back, PlacePlaced of a tenant placed already (reads only).
	PlaceNew      *Latency `json:"place_new,omitempty"`
	PlaceNewBurst *Latency `json:"place_new_back_to_back,omitempty"`
	PlacePlaced   *Latency `json:"place_placed,omitempty"`

	Failover *ClusterFailover `json:"failover,omitempty"`

	// Throughput with two nodes, then with one; Ratio: two ÷ one.
	Throughput []ClusterThroughput `json:"throughput,omitempty"`
	Ratio      *float64            `json:"throughput_ratio,omitempty"`
}

// ClusterFailover is a tenant's node killed, and the wait for the front
// door to serve the tenant again.
type ClusterFailover struct {
	Tenant string `json:"tenant"`
	Killed string `json:"killed"` // the node SIGKILLed
	// MovedTo is the node the tenant's placement names afterwards.
	MovedTo string `json:"moved_to"`
	LeaseMS int64  `json:"lease_ms"`
	// LapsedMS is from the kill to the end of the killed node's Lease
	// (its last renewal plus LeaseMS): the node renews at a third of
	// the lease, so it lapses LeaseMS·⅔ to LeaseMS after a kill.
	LapsedMS float64 `json:"lease_lapsed_after_kill_ms"`
	// Seconds from the kill to the end of the first successful call,
	// whose own time is LastCallMS; 0 with OK false: none within a
	// two-minute limit.
	OK         bool    `json:"ok"`
	Seconds    float64 `json:"seconds"`
	LastCallMS float64 `json:"last_call_ms"`
	Attempts   int     `json:"attempts"` // tries, the successful one included
	FirstError string  `json:"first_error,omitempty"`
}

// ClusterThroughput is Clients clients (one a tenant) running run_code
// back to back through the front door for Seconds.
type ClusterThroughput struct {
	Nodes      int            `json:"nodes"`
	Clients    int            `json:"clients"`
	Spread     map[string]int `json:"tenants_per_node"`
	Runs       int            `json:"runs"`
	Errors     int            `json:"errors"`
	FirstError string         `json:"first_error,omitempty"`
	Seconds    float64        `json:"seconds"`
	RunsPerSec float64        `json:"runs_per_sec"`
	P50MS      float64        `json:"p50_ms"`
	P90MS      float64        `json:"p90_ms"`
}

// clusterBench is one http-cluster: its servers, clients and API objects.
type clusterBench struct {
	b       *suite
	hc      HTTPConfig
	out     *HTTPCluster
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	placer  *cluster.Placer
	base    string // tenant and node names start with it
	tokens  map[string]string
	front   *httpServer
	nodes   map[string]*clusterNode // by node name
	tenants []string                // every tenant the bench placed
}

type clusterNode struct {
	name, state string
	srv         *httpServer
	direct      string // a token in the node's own data dir
}

// k8sName makes s a DNS label's start: lower case letters, digits, '-'.
func k8sName(s string) string {
	s = strings.ToLower(s)
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, s)
	return strings.Trim(s[:min(len(s), 40)], "-")
}

// httpCluster runs http-cluster; its servers and API objects go in the
// suite's closers.
func (b *suite) httpCluster(ctx context.Context, hc HTTPConfig) (*HTTPCluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", hc.ClusterKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--cluster-kubeconfig: %w", err)
	}
	cfg = cluster.Tune(cfg)
	cb := &clusterBench{b: b, hc: hc, base: k8sName(b.prefix), tokens: map[string]string{}, nodes: map[string]*clusterNode{},
		out: &HTTPCluster{Namespace: clusterNamespace, LeaseMS: ClusterLease.Milliseconds(), CacheMS: cluster.DefaultCacheFor.Milliseconds()}}
	if cb.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if cb.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	cb.placer = &cluster.Placer{Kube: cb.kube, Dynamic: cb.dyn, Namespace: clusterNamespace}

	// The namespace and the CRD, as `sandpit cluster apply` would.
	actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNamespace}}
	if _, err := cb.kube.CoreV1().Namespaces().Create(actx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("namespace %s: %w", clusterNamespace, err)
	}
	if _, err := cluster.Apply(actx, cfg, clusterCRD, clusterNamespace); err != nil {
		return nil, fmt.Errorf("apply the SandpitWorkspace CRD: %w", err)
	}
	// Another cluster's live nodes would take the bench's tenants.
	nodes, err := cluster.Nodes(actx, cb.kube, clusterNamespace)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Live(time.Now()) {
			return nil, fmt.Errorf("node %s (%s) is live in namespace %s: the bench's tenants would be placed there too; use a control plane of its own", n.Name, n.Endpoint, clusterNamespace)
		}
	}
	// Registered before anything is made: the bench's records and Leases
	// go at the end, whatever happened (closers run in reverse, so after
	// the servers stopped).
	b.closers = append(b.closers, cb.removeObjects)
	// As a front door runs it: from informers.
	if err := cb.placer.Start(ctx); err != nil {
		return cb.out, err
	}
	if err := cb.start(ctx); err != nil {
		return cb.out, err
	}
	if err := cb.latency(ctx); err != nil {
		b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: "http-cluster latency", Reason: err.Error()})
	}
	if ctx.Err() == nil {
		cb.placement(ctx)
	}
	// Eight tenants, placed one at a time so they spread over both nodes.
	tp := make([]string, hc.ClusterClients)
	for i := range tp {
		tp[i] = cb.tenant(fmt.Sprintf("tp-%02d", i))
	}
	if ctx.Err() == nil {
		cb.out.Throughput = append(cb.out.Throughput, cb.throughput(ctx, tp, 2))
	}
	if ctx.Err() == nil {
		if cb.out.Failover, err = cb.failover(ctx); err != nil {
			b.report.Unavailable = append(b.report.Unavailable, Unavailable{Name: "http-cluster failover", Reason: err.Error()})
		}
	}
	// The same tenants with one node left: those of the killed node move
	// on their next session.
	if ctx.Err() == nil && cb.out.Failover != nil {
		cb.out.Throughput = append(cb.out.Throughput, cb.throughput(ctx, tp, 1))
	}
	if t := cb.out.Throughput; len(t) == 2 {
		cb.out.Ratio = ratio(t[0].RunsPerSec, t[1].RunsPerSec)
	}
	return cb.out, nil
}

// tenant is the bench's name for tenant short; its token is made at start.
func (cb *clusterBench) tenant(short string) string { return cb.base + "-" + short }

// start makes the tokens and the cluster secret, then starts both nodes
// and the front door.
func (cb *clusterBench) start(ctx context.Context) error {
	b := cb.b
	secret := filepath.Join(b.dir, "cluster-secret")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(secret, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return err
	}
	// Tokens first: a server re-reads its token file at most once a second.
	frontData := filepath.Join(b.dir, "cluster-front-data")
	store, err := auth.OpenTokens(frontData)
	if err != nil {
		return err
	}
	names := []string{"lat", "fo"}
	for i := range cb.hc.ClusterClients {
		names = append(names, fmt.Sprintf("tp-%02d", i))
	}
	for _, n := range names {
		if cb.tokens[cb.tenant(n)], err = store.Create(cb.tenant(n)); err != nil {
			return err
		}
	}
	common := []string{"--cluster-secret-file", secret, "--kubeconfig", cb.hc.ClusterKubeconfig, "--cluster-namespace", clusterNamespace}
	nodeArgs := append([]string{"--pool=2", "--no-dashboard", "--cluster-lease", ClusterLease.String(), "--cluster-drain-grace", "1s"}, common...)
	cb.out.Nodes = nil
	for _, short := range []string{"node-a", "node-b"} {
		name := cb.tenant(short)
		data := filepath.Join(b.dir, "cluster-"+short+"-data")
		st, err := auth.OpenTokens(data)
		if err != nil {
			return err
		}
		direct, err := st.Create(cb.tenant("direct"))
		if err != nil {
			return err
		}
		srv, err := b.startHTTP(ctx, "sandpit-"+short, data, append([]string{"--cluster-node", name}, nodeArgs...))
		if err != nil {
			return err
		}
		cb.nodes[name] = &clusterNode{name: name, state: filepath.Join(b.dir, "sandpit-"+short), srv: srv, direct: direct}
	}
	cb.out.Nodes = []string{"sandpit serve --listen 127.0.0.1:0 --cluster-node NAME " + strings.Join(nodeArgs[:len(nodeArgs)-len(common)], " ") +
		" (2 nodes, each with its own --state-dir and --data-dir)"}
	srv, err := b.startHTTP(ctx, "sandpit-front", frontData, append([]string{"--cluster"}, common...))
	if err != nil {
		return err
	}
	cb.front = srv
	cb.out.FrontDoor = "sandpit serve --listen 127.0.0.1:0 --cluster (other limits at their defaults)"
	// Both Leases are taken before a server logs its URL; wait anyway
	// until the API shows them, so the first placement sees both.
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, err := cluster.Nodes(ctx, cb.kube, clusterNamespace)
		live := 0
		for _, n := range nodes {
			if cb.nodes[n.Name] != nil && n.Live(time.Now()) {
				live++
			}
		}
		if err == nil && live == len(cb.nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the nodes' Leases: %d of %d live after 30 s (%v)", live, len(cb.nodes), err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// connect opens a session through the front door as tenant.
func (cb *clusterBench) connect(ctx context.Context, tenant string) (*httpConn, error) {
	c, res, err := cb.front.connect(ctx, cb.tokens[tenant], "", cb.b.cfg.Version)
	if err == nil {
		cb.tenants = appendNew(cb.tenants, tenant)
		if hr := cb.b.report.HTTP; hr.Protocol == "" {
			hr.Protocol = res.ProtocolVersion
		}
	}
	return c, err
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// nodeOf is the node tenant is placed on, as the API server has it.
func (cb *clusterBench) nodeOf(ctx context.Context, tenant string) (string, error) {
	p, err := cb.placer.Place(ctx, tenant)
	return p.Node, err
}

// latency measures warm run_code through the front door and straight to
// the node the tenant was placed on.
func (cb *clusterBench) latency(ctx context.Context) error {
	b, code := cb.b, cb.b.codeSeq()
	tenant := cb.tenant("lat")
	fc, err := cb.connect(ctx, tenant)
	if err != nil {
		return fmt.Errorf("through the front door: %w", err)
	}
	b.closers = append(b.closers, func(context.Context) error { return fc.Close() })
	if err := fc.run(code)(ctx); err != nil { // places the tenant
		return fmt.Errorf("first call through the front door: %w", err)
	}
	name, err := cb.nodeOf(ctx, tenant)
	if err != nil {
		return err
	}
	n := cb.nodes[name]
	if n == nil {
		return fmt.Errorf("tenant %s placed on %q, not one of the bench's nodes", tenant, name)
	}
	cb.out.LatencyNode = name
	dc, _, err := n.srv.connect(ctx, n.direct, "", b.cfg.Version)
	if err != nil {
		return fmt.Errorf("straight to %s: %w", name, err)
	}
	b.closers = append(b.closers, func(context.Context) error { return dc.Close() })
	comps := []Comparator{
		{Name: "run_code through the front door", Group: "cluster", Run: fc.run(code)},
		{Name: "run_code straight to the node", Group: "cluster", Run: dc.run(code)},
	}
	cb.out.Latency = MeasureLatency(ctx, comps, b.cfg.Options)
	if f, d := cb.out.Latency[0], cb.out.Latency[1]; f.N > 0 && d.N > 0 {
		d50, d90 := round3(f.MedianMS-d.MedianMS), round3(f.P90MS-d.P90MS)
		cb.out.FrontMinusDirectP50MS, cb.out.FrontMinusDirectP90MS = &d50, &d90
	}
	return nil
}

// placement times Placer.Place in this process: fresh tenants (a record
// created each) with the bench's gap before each, fresh tenants back to
// back (as a burst of new tenants arrives), then a placed tenant (reads
// only) with the gap. The records are removed after, so later placements
// count only the tenants that run.
func (cb *clusterBench) placement(ctx context.Context) {
	n, gap := max(cb.b.cfg.Options.N, 1), cb.b.cfg.Options.Gap
	var made []string
	place := func(s *sample, tenant string, gap time.Duration) {
		sleep(ctx, gap)
		t0 := time.Now()
		_, err := cb.placer.Place(ctx, tenant)
		d := time.Since(t0)
		if err != nil {
			s.nerr++
			if s.first == nil {
				s.first = err
			}
			return
		}
		s.d = append(s.d, d)
		made = appendNew(made, tenant)
	}
	var fresh, burst, again sample
	for i := range 2 * n {
		t := cb.tenant(fmt.Sprintf("place-%03d", i))
		cb.tenants = appendNew(cb.tenants, t)
		if i < n {
			place(&fresh, t, gap)
		} else {
			place(&burst, t, 0)
		}
	}
	for range n {
		if len(made) == 0 {
			break
		}
		place(&again, made[0], gap)
	}
	pn, pb, pp := fresh.latency("Place: a new tenant"), burst.latency("Place: new tenants back to back"), again.latency("Place: a placed tenant")
	cb.out.PlaceNew, cb.out.PlaceNewBurst, cb.out.PlacePlaced = &pn, &pb, &pp
	if err := cb.deleteRecords(ctx, made); err != nil {
		cb.b.report.Notes = append(cb.b.report.Notes, "http-cluster: removing the placement part's records: "+err.Error())
	}
}

// throughput runs one client a tenant back to back through the front
// door for LoadTime. Each client opens a new session and makes one
// unmeasured call first (which places or moves its tenant), one at a
// time, so new tenants spread over the nodes.
func (cb *clusterBench) throughput(ctx context.Context, tenants []string, nodes int) ClusterThroughput {
	out := ClusterThroughput{Nodes: nodes, Clients: len(tenants), Spread: map[string]int{}}
	code := cb.b.codeSeq()
	var first errOnce
	cs := make([]*httpConn, len(tenants))
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}()
	var nerr atomic.Int64
	for i, t := range tenants {
		c, err := cb.connect(ctx, t)
		if err == nil {
			if err = c.run(code)(ctx); err != nil {
				c.Close()
			}
		}
		if err != nil {
			first.set(fmt.Errorf("%s: %w", t, err))
			nerr.Add(1)
			continue
		}
		cs[i] = c
		node, err := cb.nodeOf(ctx, t)
		if err == nil {
			out.Spread[node]++
			// The Placer counts placements from the API server's watch
			// cache: the next tenant is placed once this one shows there,
			// so the spread is what it would be with tenants arriving
			// apart.
			err = cb.waitCached(ctx, t, node)
		}
		if err != nil {
			first.set(fmt.Errorf("%s: %w", t, err))
		}
	}
	var (
		mu  sync.Mutex
		dur []time.Duration
		wg  sync.WaitGroup
	)
	lctx, cancel := context.WithTimeout(ctx, cb.hc.LoadTime)
	defer cancel()
	t0 := time.Now()
	for _, c := range cs {
		if c == nil {
			continue
		}
		run := c.run(code)
		wg.Go(func() {
			for lctx.Err() == nil {
				s := time.Now()
				err := run(lctx)
				switch {
				case lctx.Err() != nil: // cut by the end: not counted
				case err != nil:
					nerr.Add(1)
					first.set(err)
				default:
					mu.Lock()
					dur = append(dur, time.Since(s))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	out.Runs, out.Errors, out.FirstError = len(dur), int(nerr.Load()), first.String()
	out.Seconds = round3(wall.Seconds())
	out.RunsPerSec = round3(float64(out.Runs) / wall.Seconds())
	out.P50MS, out.P90MS = ms(Percentile(dur, 50)), ms(Percentile(dur, 90))
	return out
}

// waitCached waits, up to 5 s, until the API server's watch cache shows
// tenant placed on node.
func (cb *clusterBench) waitCached(ctx context.Context, tenant, node string) error {
	res := cb.dyn.Resource(cluster.WorkspaceGVR).Namespace(clusterNamespace)
	for deadline := time.Now().Add(5 * time.Second); ; sleep(ctx, 20*time.Millisecond) {
		list, err := res.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err == nil {
			for _, o := range list.Items {
				t, _, _ := unstructured.NestedString(o.Object, "spec", "tenant")
				n, _, _ := unstructured.NestedString(o.Object, "spec", "node")
				if t == tenant && n == node {
					return nil
				}
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("the watch cache did not show %s on %s within 5 s (%v)", tenant, node, err)
		}
	}
}

// failover SIGKILLs the node of a tenant and tries calls through the
// front door (a new session each, 200 ms apart) until one succeeds.
func (cb *clusterBench) failover(ctx context.Context) (*ClusterFailover, error) {
	b, code := cb.b, cb.b.codeSeq()
	tenant := cb.tenant("fo")
	c, err := cb.connect(ctx, tenant)
	if err != nil {
		return nil, err
	}
	err = c.run(code)(ctx)
	c.Close()
	if err != nil {
		return nil, fmt.Errorf("first call: %w", err)
	}
	name, err := cb.nodeOf(ctx, tenant)
	if err != nil {
		return nil, err
	}
	n := cb.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("tenant %s placed on %q, not one of the bench's nodes", tenant, name)
	}
	out := &ClusterFailover{Tenant: tenant, Killed: name, LeaseMS: ClusterLease.Milliseconds()}
	// What a killed node leaves (sandboxes, views) is swept by gc before
	// its state dir goes (closers run in reverse).
	b.closers = append(b.closers, func(ctx context.Context) error { return b.gc(ctx, n.state) })
	n.srv.cmd.Process.Kill()
	killed := time.Now()
	<-n.srv.exited
	delete(cb.nodes, name)
	if nodes, err := cluster.Nodes(ctx, cb.kube, clusterNamespace); err == nil {
		if k, ok := cluster.FindNode(nodes, name); ok {
			out.LapsedMS = ms(k.Expires.Sub(killed))
		}
	}
	var first errOnce
	for {
		out.Attempts++
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		c, err := cb.connect(tctx, tenant)
		if err == nil {
			err = c.run(code)(tctx)
			c.Close()
		}
		cancel()
		if err == nil {
			out.OK, out.Seconds, out.LastCallMS = true, round3(time.Since(killed).Seconds()), ms(time.Since(t0))
			break
		}
		first.set(err)
		if ctx.Err() != nil || time.Since(killed) > 2*time.Minute {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	out.FirstError = first.String()
	if out.OK {
		out.MovedTo, _ = cb.nodeOf(ctx, tenant)
	}
	return out, nil
}

// gc runs `sandpit gc` on a killed server's state dir: its instance is
// dead, so its sandboxes, snapshots and views go.
func (b *suite) gc(ctx context.Context, state string) error {
	args := append([]string{"gc", "--address", b.addr, "--no-start", "--state-dir", state}, b.cfg.ServeArgs...)
	out, err := exec.CommandContext(ctx, b.cfg.ServeBinary, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sandpit gc --state-dir %s: %w: %s", state, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// deleteRecords removes the SandpitWorkspaces of tenants.
func (cb *clusterBench) deleteRecords(ctx context.Context, tenants []string) error {
	res := cb.dyn.Resource(cluster.WorkspaceGVR).Namespace(clusterNamespace)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range list.Items {
		t, _, _ := unstructured.NestedString(o.Object, "spec", "tenant")
		if slices.Contains(tenants, t) {
			if err := res.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeObjects removes what the bench made in the API server: its
// tenants' records and its nodes' Leases (a stopped node releases its
// own; a killed one's stays). The namespace and the CRD stay: they are
// the cluster's, and may have been there before.
func (cb *clusterBench) removeObjects(ctx context.Context) error {
	err := cb.deleteRecords(ctx, cb.tenants)
	for _, short := range []string{"node-a", "node-b"} {
		e := cb.kube.CoordinationV1().Leases(clusterNamespace).Delete(ctx, cluster.LeasePrefix+cb.tenant(short), metav1.DeleteOptions{})
		if e != nil && !apierrors.IsNotFound(e) {
			err = errors.Join(err, e)
		}
	}
	if err != nil {
		return fmt.Errorf("http-cluster's API objects: %w", err)
	}
	return nil
}

// writeTable writes http-cluster's figures.
func (c *HTTPCluster) writeTable(bw *bufio.Writer, warmup int, gapMS int64, latencyRows func(...Latency)) {
	fmt.Fprintf(bw, "\nhttp-cluster: a front door and 2 node agents on this host, Leases and placements in namespace %s of the given API server\n", c.Namespace)
	for _, n := range c.Nodes {
		fmt.Fprintf(bw, "nodes:      %s\n", n)
	}
	fmt.Fprintf(bw, "front door: %s; placement cache %d ms\n", c.FrontDoor, c.CacheMS)
	if len(c.Latency) > 0 {
		fmt.Fprintf(bw, "\nhttp-cluster latency: warm run_code through the front door and straight to the tenant's node %s over HTTP (interleaved rounds in shuffled order, %d warm-up rounds discarded, %d ms untimed gap before each run)\n", c.LatencyNode, warmup, gapMS)
		latencyRows(c.Latency...)
		if c.FrontMinusDirectP50MS != nil {
			fmt.Fprintf(bw, "front door − direct: p50 %+.1f ms, p90 %+.1f ms (target: p50 within +5 ms)\n", *c.FrontMinusDirectP50MS, *c.FrontMinusDirectP90MS)
		}
	}
	if c.PlaceNew != nil {
		fmt.Fprintf(bw, "\nhttp-cluster placement: cluster.Placer.Place in the bench's process against the same API server, %d ms untimed gap before each but the back-to-back ones (target for a new tenant: p50 ≤ 100 ms)\n", gapMS)
		latencyRows(*c.PlaceNew, *c.PlaceNewBurst, *c.PlacePlaced)
	}
	if len(c.Throughput) > 0 {
		fmt.Fprintln(bw, "\nhttp-cluster throughput: one client a tenant running run_code back to back through the front door")
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "nodes\tclients\truns\terrors\tseconds\truns/s\tp50 ms\tp90 ms\ttenants a node\t\n")
		for _, t := range c.Throughput {
			var spread []string
			for _, k := range slices.Sorted(maps.Keys(t.Spread)) {
				spread = append(spread, fmt.Sprintf("%s:%d", k, t.Spread[k]))
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.1f\t%.2f\t%s\t%s\t%s\t\n", t.Nodes, t.Clients, t.Runs, t.Errors, t.Seconds, t.RunsPerSec,
				num(t.P50MS, t.Runs), num(t.P90MS, t.Runs), strings.Join(spread, " "))
		}
		tw.Flush()
		for _, t := range c.Throughput {
			if t.FirstError != "" {
				fmt.Fprintf(bw, "  first error (%d nodes): %s\n", t.Nodes, t.FirstError)
			}
		}
		if c.Ratio != nil {
			fmt.Fprintf(bw, "2 nodes ÷ 1 node: %s (both nodes on this one host: they share its CPUs)\n", rat(c.Ratio))
		}
	}
	if f := c.Failover; f != nil {
		fmt.Fprintf(bw, "\nhttp-cluster failover: node %s (tenant %s's) SIGKILLed; a new session through the front door every 200 ms until a call succeeds (lease %d ms, placement cache %d ms)\n",
			f.Killed, f.Tenant, f.LeaseMS, c.CacheMS)
		if f.OK {
			fmt.Fprintf(bw, "kill → first successful call: %.2f s (that call %.1f ms), %d tries; the tenant is now on %s\n", f.Seconds, f.LastCallMS, f.Attempts, f.MovedTo)
		}
		if f.LapsedMS != 0 {
			fmt.Fprintf(bw, "the killed node's Lease lapsed %.0f ms after the kill (its last renewal + %d ms)\n", f.LapsedMS, f.LeaseMS)
		}
		if !f.OK {
			fmt.Fprintf(bw, "no call succeeded within 2 minutes of the kill (%d tries)\n", f.Attempts)
		}
		if f.FirstError != "" {
			fmt.Fprintf(bw, "  first failed try: %s\n", f.FirstError)
		}
	}
}
