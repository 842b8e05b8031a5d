package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandpit-dev/sandpit"
)

// Placer places tenants' workspaces on nodes. Any number of Placers (front
// door replicas) may place at once: each placement is one SandpitWorkspace
// object, created or updated at the resourceVersion the Placer read, so
// concurrent placements of one tenant converge on the record the API
// server accepted.
//
// After Start, the Placer reads Leases and placements from informers (its
// own watches of the API server, in memory): finding a placed tenant
// costs no request, and choosing a node for a new one counts placements
// in memory instead of listing them all. What a cache has not seen yet
// only costs a conflict and a read from the API server.
type Placer struct {
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
	Namespace string
	// Now is the clock Leases are judged by (time.Now when nil).
	Now func() time.Time

	leases     cache.Indexer // informed Leases, after Start
	workspaces cache.Indexer // informed SandpitWorkspaces, after Start

	mu       sync.Mutex
	observed map[string]observation // by Lease name
}

// observation is when this Placer saw a Lease's renewTime change, by its
// own clock: a node's clock may be off by any amount (client-go's leader
// election judges leases the same way).
type observation struct {
	renew time.Time // the renewTime seen
	at    time.Time // when, here
}

// syncPatience bounds Start's wait for the first lists (an API server that
// does not answer).
const syncPatience = 2 * time.Minute

// Start runs the Placer's informers until ctx ends and returns once they
// have synced, or with an error when they have not within two minutes.
func (p *Placer) Start(ctx context.Context) error {
	kf := informers.NewSharedInformerFactoryWithOptions(p.Kube, 0, informers.WithNamespace(p.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelComponent + "=" + ComponentNode }))
	li := kf.Coordination().V1().Leases().Informer()
	p.observed = map[string]observation{}
	observe := func(o any, first bool) {
		l, ok := o.(*coordinationv1.Lease)
		if !ok || l.Spec.RenewTime == nil {
			return
		}
		now, renew := time.Now(), l.Spec.RenewTime.Time
		p.mu.Lock()
		defer p.mu.Unlock()
		if prev, ok := p.observed[l.Name]; ok && prev.renew.Equal(renew) {
			return // not renewed: an update of something else
		}
		at := now
		if first && renew.Before(now) {
			// Seen first: renewed at most now, maybe earlier (a node's
			// clock is trusted to make a renewal older, never newer).
			at = renew
		}
		p.observed[l.Name] = observation{renew: renew, at: at}
	}
	if _, err := li.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { observe(o, true) },
		UpdateFunc: func(_, o any) { observe(o, false) },
		DeleteFunc: func(o any) {
			if l, ok := o.(*coordinationv1.Lease); ok {
				p.mu.Lock()
				delete(p.observed, l.Name)
				p.mu.Unlock()
			}
		},
	}); err != nil {
		return fmt.Errorf("placement informers: %w", err)
	}
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(p.Dynamic, 0, p.Namespace, nil)
	wi := df.ForResource(WorkspaceGVR).Informer()
	kf.Start(ctx.Done())
	df.Start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, syncPatience)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), li.HasSynced, wi.HasSynced) {
		return fmt.Errorf("placement informers: no Leases and SandpitWorkspaces listed: %w", context.Cause(wctx))
	}
	p.leases, p.workspaces = li.GetIndexer(), wi.GetIndexer()
	return nil
}

// Nodes lists the node agents: after Start from the informer, each live
// for a lease duration after this Placer saw it renewed.
func (p *Placer) Nodes(ctx context.Context) ([]Node, error) {
	if p.leases == nil {
		return Nodes(ctx, p.Kube, p.Namespace)
	}
	var ls []*coordinationv1.Lease
	for _, o := range p.leases.List() {
		if l, ok := o.(*coordinationv1.Lease); ok {
			ls = append(ls, l)
		}
	}
	return p.judge(ls), nil
}

// freshNodes lists the Leases as they are (a node that just started may
// not be in the informer yet), judged as Nodes judges them.
func (p *Placer) freshNodes(ctx context.Context) ([]Node, error) {
	if p.leases == nil {
		return listNodes(ctx, p.Kube, p.Namespace, false)
	}
	list, err := p.Kube.CoordinationV1().Leases(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelComponent + "=" + ComponentNode})
	if err != nil {
		return nil, fmt.Errorf("list sandpit nodes: %w", err)
	}
	ls := make([]*coordinationv1.Lease, 0, len(list.Items))
	for i := range list.Items {
		ls = append(ls, &list.Items[i])
	}
	return p.judge(ls), nil
}

// judge makes Nodes of Leases: each live for a lease duration after this
// Placer saw its last renewal, whatever the node's clock says; one never
// seen before as renewed at its renewTime or now, whichever is earlier
// (observe's rule for a first sight).
func (p *Placer) judge(ls []*coordinationv1.Lease) []Node {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Node, 0, len(ls))
	for _, l := range ls {
		if len(l.Name) <= len(LeasePrefix) {
			continue
		}
		n := nodeOf(l)
		if n.Renewed.IsZero() {
			out = append(out, n)
			continue
		}
		ob, seen := p.observed[l.Name]
		var at time.Time
		switch {
		case seen && ob.renew.Equal(n.Renewed):
			at = ob.at
		case seen: // renewed since observe last ran: seen now
			at = now
		case n.Renewed.Before(now):
			at = n.Renewed
		default:
			at = now
		}
		n.Expires = at.Add(n.Expires.Sub(n.Renewed))
		out = append(out, n)
	}
	return out
}

// placement reads a tenant's record: from the informer after Start,
// unless fresh (a write just showed the cache behind).
func (p *Placer) placement(ctx context.Context, name string, fresh bool) (*unstructured.Unstructured, bool, error) {
	if p.workspaces != nil && !fresh {
		o, ok, err := p.workspaces.GetByKey(p.Namespace + "/" + name)
		if err != nil || !ok {
			return nil, false, err
		}
		u, ok := o.(*unstructured.Unstructured)
		return u, ok, nil
	}
	cur, err := p.Dynamic.Resource(WorkspaceGVR).Namespace(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return cur, err == nil, err
}

// Placement is where a tenant's workspace lives.
type Placement struct {
	Tenant   string
	Node     string
	Endpoint string
	// Moved is set when this call moved the workspace: From is the node it
	// left and Reason why (its Lease lapsed, it drains).
	Moved  bool
	From   string
	Reason string
}

// maxAttempts bounds the re-reads after conflicts: each one means another
// writer made progress.
const maxAttempts = 8

// Place returns the tenant's node, placing the workspace on the live node
// with the fewest workspaces when it has none, or when its node's Lease
// lapsed or the node drains.
func (p *Placer) Place(ctx context.Context, tenant string) (Placement, error) {
	if tenant == "" {
		return Placement{}, fmt.Errorf("%w: no tenant to place", sandpit.ErrInvalidArgument)
	}
	objs := p.Dynamic.Resource(WorkspaceGVR).Namespace(p.Namespace)
	name := objectName(tenant)
	fresh := false // after a conflict: read past the informer
	for range maxAttempts {
		nodes, err := p.Nodes(ctx)
		if err != nil {
			return Placement{}, err
		}
		now := p.now()
		cur, found, err := p.placement(ctx, name, fresh)
		if err != nil {
			return Placement{}, fmt.Errorf("read placement of %q: %w", tenant, err)
		}
		fresh = true
		if found {
			at, _, _ := unstructured.NestedString(cur.Object, "spec", "node")
			if n, ok := FindNode(nodes, at); ok && n.Live(now) && !n.Draining {
				return Placement{Tenant: tenant, Node: n.Name, Endpoint: n.Endpoint}, nil
			}
		}
		target, err := p.choose(ctx, nodes, now)
		if errors.Is(err, ErrNoNodes) {
			// The cache may not have a node that just started: read the
			// Leases as they are before saying there is none.
			if nodes, err = p.freshNodes(ctx); err != nil {
				return Placement{}, err
			}
			target, err = p.choose(ctx, nodes, now)
		}
		if err != nil {
			return Placement{}, err
		}
		if !found {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": WorkspaceGVR.GroupVersion().String(),
				"kind":       WorkspaceKind,
				"metadata":   map[string]any{"name": name},
				"spec": map[string]any{
					"tenant": tenant, "node": target.Name, "placedAt": now.UTC().Format(time.RFC3339),
				},
			}}
			_, err := objs.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another front door placed it: read theirs
			}
			if err != nil {
				return Placement{}, fmt.Errorf("record placement of %q: %w", tenant, err)
			}
			return Placement{Tenant: tenant, Node: target.Name, Endpoint: target.Endpoint}, nil
		}
		from, _, _ := unstructured.NestedString(cur.Object, "spec", "node")
		reason := movedWhy(nodes, from, now)
		next := cur.DeepCopy()
		spec := map[string]any{
			"tenant": tenant, "node": target.Name, "placedAt": now.UTC().Format(time.RFC3339),
			"previousNode": from, "reason": reason,
		}
		if err := unstructured.SetNestedMap(next.Object, spec, "spec"); err != nil {
			return Placement{}, err
		}
		_, err = objs.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue // another front door moved (or removed) it: read again
		}
		if err != nil {
			return Placement{}, fmt.Errorf("record placement of %q: %w", tenant, err)
		}
		return Placement{Tenant: tenant, Node: target.Name, Endpoint: target.Endpoint, Moved: true, From: from, Reason: reason}, nil
	}
	return Placement{}, fmt.Errorf("place %q: %w after %d attempts", tenant, errConflict, maxAttempts)
}

// choose is the live, not draining node with the fewest workspaces (ties:
// the first by name).
func (p *Placer) choose(ctx context.Context, nodes []Node, now time.Time) (Node, error) {
	var live []Node
	for _, n := range nodes {
		if n.Live(now) && !n.Draining {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return Node{}, sandpit.WithHint(fmt.Errorf("%w: %d node agents registered, none live and not draining", ErrNoNodes, len(nodes)),
			"start a node agent, `sandpit serve --listen HOST:PORT --cluster-node NAME`, on a host (the DaemonSet in scripts/kubernetes/node.yaml), or wait for a restarting one")
	}
	// From the informer, or else the API server's watch cache
	// (ResourceVersion "0"): a count a moment old only makes the spread a
	// little less even.
	var items []*unstructured.Unstructured
	if p.workspaces != nil {
		for _, o := range p.workspaces.List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				items = append(items, u)
			}
		}
	} else {
		list, err := p.Dynamic.Resource(WorkspaceGVR).Namespace(p.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return Node{}, fmt.Errorf("count placements: %w", err)
		}
		for i := range list.Items {
			items = append(items, &list.Items[i])
		}
	}
	count := map[string]int{}
	for _, o := range items {
		n, _, _ := unstructured.NestedString(o.Object, "spec", "node")
		count[n]++
	}
	slices.SortFunc(live, func(a, b Node) int {
		if d := count[a.Name] - count[b.Name]; d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	return live[0], nil
}

// movedWhy says why a workspace leaves node from.
func movedWhy(nodes []Node, from string, now time.Time) string {
	n, ok := FindNode(nodes, from)
	switch {
	case from == "":
		return "it had no node"
	case !ok:
		return fmt.Sprintf("node %s is gone (its lease was released)", from)
	case n.Draining:
		return fmt.Sprintf("node %s is draining", from)
	default:
		return fmt.Sprintf("node %s's lease lapsed at %s", from, n.Expires.UTC().Format(time.RFC3339))
	}
}

// FindNode returns the node named name in nodes.
func FindNode(nodes []Node, name string) (Node, bool) {
	for _, n := range nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

func (p *Placer) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}
