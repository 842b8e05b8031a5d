package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// DefaultLeaseDuration is how long a node counts as live after its last
// renewal; the agent renews at a third of it.
const DefaultLeaseDuration = 15 * time.Second

// Agent keeps a node's Lease: it takes it at Start (refusing one another
// live agent holds), renews it, and releases it at Stop. Its identity is
// the node name and a random instance id, so a restarted agent takes over
// its own node's Lease only once the old one lapsed or was released.
type Agent struct {
	Client    kubernetes.Interface
	Namespace string
	Node      string
	Endpoint  string
	// Duration is the Lease's duration (DefaultLeaseDuration when zero).
	Duration time.Duration
	// KubeNode, when set, is the Kubernetes Node this agent runs on: while
	// it is cordoned (kubectl cordon, kubectl drain — which leaves a
	// DaemonSet's Pods running) the agent marks itself draining, so its
	// tenants move before the node goes away; uncordoned, it takes tenants
	// again.
	KubeNode string
	Logger   *slog.Logger

	holder   string
	mu       sync.Mutex // guards lease and draining: Run renews while Drain or Stop runs
	lease    *coordinationv1.Lease
	draining bool
}

// Start takes the Lease. It fails when another agent's Lease for this node
// is live, naming it and when it lapses.
func (a *Agent) Start(ctx context.Context) error {
	if a.Duration <= 0 {
		a.Duration = DefaultLeaseDuration
	}
	if a.Logger == nil {
		a.Logger = slog.Default()
	}
	if a.Node == "" || a.Endpoint == "" {
		return errors.New("cluster agent: a node name and an endpoint are required")
	}
	b := make([]byte, 6)
	rand.Read(b)
	a.holder = a.Node + "/" + hex.EncodeToString(b)
	leases := a.Client.CoordinationV1().Leases(a.Namespace)
	now := metav1.NewMicroTime(time.Now())
	for range 5 {
		cur, err := leases.Get(ctx, LeasePrefix+a.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: LeasePrefix + a.Node, Labels: map[string]string{LabelComponent: ComponentNode},
					Annotations: map[string]string{AnnotationEndpoint: a.Endpoint}},
				Spec: a.spec(now, now),
			}
			made, err := leases.Create(ctx, l, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("cluster agent: create lease: %w", err)
			}
			a.lease = made
			return nil
		}
		if err != nil {
			return fmt.Errorf("cluster agent: read lease: %w", err)
		}
		if n := nodeOf(cur); n.Live(time.Now()) {
			return fmt.Errorf("cluster agent: node %s is held by another agent (%s) until %s at least: one agent per node name",
				a.Node, n.Holder, n.Expires.Format(time.RFC3339))
		}
		next := cur.DeepCopy()
		next.Labels = map[string]string{LabelComponent: ComponentNode}
		next.Annotations = map[string]string{AnnotationEndpoint: a.Endpoint}
		next.Spec = a.spec(now, now)
		if cur.Spec.LeaseTransitions != nil {
			next.Spec.LeaseTransitions = ptr.To(*cur.Spec.LeaseTransitions + 1)
		}
		made, err := leases.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cluster agent: take over lease: %w", err)
		}
		a.lease = made
		return nil
	}
	return fmt.Errorf("cluster agent: lease of node %s: %w", a.Node, errConflict)
}

func (a *Agent) spec(acquired, renewed metav1.MicroTime) coordinationv1.LeaseSpec {
	return coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(a.holder),
		LeaseDurationSeconds: ptr.To(int32((a.Duration + time.Second - 1) / time.Second)),
		AcquireTime:          &acquired,
		RenewTime:            &renewed,
	}
}

// Run renews the Lease until ctx ends. It returns an error when the Lease
// was lost (another agent took it after it lapsed): the node must stop
// serving as this node.
func (a *Agent) Run(ctx context.Context) error {
	t := time.NewTicker(a.Duration / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := a.Renew(ctx); err != nil {
			if errors.Is(err, errLost) {
				return err
			}
			// The API server may be away for a moment: the Lease lapses
			// only after Duration, and the next tick tries again.
			a.Logger.Warn("cluster agent: lease not renewed", "node", a.Node, "err", err)
		}
	}
}

var errLost = errors.New("the lease is held by another agent")

// Renew renews the Lease once, marking or clearing draining as the
// Kubernetes Node's cordon says (KubeNode).
func (a *Agent) Renew(ctx context.Context) error {
	cordoned, known := a.cordoned(ctx)
	return a.update(ctx, func(l *coordinationv1.Lease) {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		if !known || a.draining {
			return // Drain was called: only Stop ends it
		}
		_, marked := l.Annotations[AnnotationDraining]
		switch {
		case cordoned && !marked:
			a.Logger.Info("cluster agent: node cordoned; draining: tenants move at their next call", "node", a.Node, "kube_node", a.KubeNode)
			l.Annotations[AnnotationDraining] = time.Now().UTC().Format(time.RFC3339)
		case !cordoned && marked:
			a.Logger.Info("cluster agent: node uncordoned; taking tenants again", "node", a.Node)
			delete(l.Annotations, AnnotationDraining)
		}
	})
}

// cordoned reads whether KubeNode is unschedulable; known is false
// without a KubeNode or when it cannot be read (nothing changes then).
func (a *Agent) cordoned(ctx context.Context) (cordoned, known bool) {
	if a.KubeNode == "" {
		return false, false
	}
	n, err := a.Client.CoreV1().Nodes().Get(ctx, a.KubeNode, metav1.GetOptions{})
	if err != nil {
		a.Logger.Warn("cluster agent: cannot read the Kubernetes node", "kube_node", a.KubeNode, "err", err)
		return false, false
	}
	return n.Spec.Unschedulable, true
}

// Drain marks the node as draining: front doors place nothing new on it,
// and move each of its tenants at their next call. The Lease is kept, so
// the node still counts as present until Stop.
func (a *Agent) Drain(ctx context.Context) error {
	return a.update(ctx, func(l *coordinationv1.Lease) {
		a.draining = true
		l.Annotations[AnnotationDraining] = time.Now().UTC().Format(time.RFC3339)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	})
}

// update changes the Lease at the resourceVersion last seen, re-reading it
// after a conflict while it is still this agent's.
func (a *Agent) update(ctx context.Context, change func(*coordinationv1.Lease)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	leases := a.Client.CoordinationV1().Leases(a.Namespace)
	for range 5 {
		next := a.lease.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		change(next)
		made, err := leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			a.lease = made
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		cur, err := leases.Get(ctx, a.lease.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != a.holder {
			return fmt.Errorf("node %s: %w (%s)", a.Node, errLost, ptr.Deref(cur.Spec.HolderIdentity, ""))
		}
		a.lease = cur
	}
	return errConflict
}

// Stop releases the Lease (deletes it, if it is still this agent's): the
// node is gone at once rather than when its Lease lapses.
func (a *Agent) Stop(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease == nil {
		return nil
	}
	err := a.Client.CoordinationV1().Leases(a.Namespace).Delete(ctx, a.lease.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &a.lease.UID, ResourceVersion: &a.lease.ResourceVersion},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or renewed by someone else since: not ours to delete
	}
	return err
}

// nodeOf reads a node from its Lease.
func nodeOf(l *coordinationv1.Lease) Node {
	n := Node{Name: l.Name[len(LeasePrefix):], Endpoint: l.Annotations[AnnotationEndpoint], Holder: ptr.Deref(l.Spec.HolderIdentity, "")}
	_, n.Draining = l.Annotations[AnnotationDraining]
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		n.Renewed = l.Spec.RenewTime.Time
		n.Expires = n.Renewed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	}
	return n
}

// Nodes lists the node agents' Leases in namespace, live or not.
func Nodes(ctx context.Context, c kubernetes.Interface, namespace string) ([]Node, error) {
	return listNodes(ctx, c, namespace, true)
}

// listNodes lists the Leases; cached reads them from the API server's
// watch cache (ResourceVersion "0"), without a consistent read's wait for
// etcd's progress notification (≈ 90 ms a list here): a lease is judged by
// seconds, and a few milliseconds stale is nothing — but a node that just
// started may not be there yet (Placer reads again, consistently, before
// it says there is none).
func listNodes(ctx context.Context, c kubernetes.Interface, namespace string, cached bool) ([]Node, error) {
	opts := metav1.ListOptions{LabelSelector: LabelComponent + "=" + ComponentNode}
	if cached {
		opts.ResourceVersion = "0"
	}
	list, err := c.CoordinationV1().Leases(namespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list sandpit nodes: %w", err)
	}
	out := make([]Node, 0, len(list.Items))
	for i := range list.Items {
		if len(list.Items[i].Name) > len(LeasePrefix) {
			out = append(out, nodeOf(&list.Items[i]))
		}
	}
	return out, nil
}
