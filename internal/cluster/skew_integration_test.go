package cluster_test

import (
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
)

// TestLeaseClockSkew: a front door judges a node's Lease by when it saw the
// lease renewed, on its own clock, not by the renewTime the node's clock
// wrote. A node whose clock runs an hour ahead and that died is gone after
// one lease duration (its renewTime would keep it "live" for an hour); a
// node whose clock runs an hour behind and keeps renewing is live (its
// renewTime alone would make it look dead).
func TestLeaseClockSkew(t *testing.T) {
	c := kubetest.Start(t)
	c.Namespace(t, ns)
	c.Apply(t, kubetest.RepoFile(t, "scripts/kubernetes/crd.yaml"), ns)
	kube, _ := clients(t, c.Config)
	ctx := t.Context()
	lease := func(node string, renew time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: cluster.LeasePrefix + node, Labels: map[string]string{cluster.LabelComponent: cluster.ComponentNode},
				Annotations: map[string]string{cluster.AnnotationEndpoint: "https://" + node + ".test:8443"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(int32(3)),
				RenewTime: ptr.To(metav1.NewMicroTime(renew))},
		}
	}
	leases := kube.CoordinationV1().Leases(ns)
	// "ahead": renewed once, by a clock an hour fast, then silent.
	if _, err := leases.Create(ctx, lease("ahead", time.Now().Add(time.Hour)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// "behind": renewed every second by a clock an hour slow.
	behind, err := leases.Create(ctx, lease("behind", time.Now().Add(-time.Hour)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done(): // the test is over (its context ends before cleanups)
				return
			case <-time.After(time.Second):
			}
			behind.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))
			l, err := leases.Update(ctx, behind, metav1.UpdateOptions{})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("renew behind: %v", err)
				}
				return
			}
			behind = l
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	var n atomic.Int32
	p := informedPlacer(t, c.Config, &n)
	start := time.Now()
	live := func(name string) bool {
		nodes, err := p.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node, ok := cluster.FindNode(nodes, name)
		return ok && node.Live(time.Now())
	}
	eventually(t, "ahead gone, behind live", func() bool { return !live("ahead") && live("behind") })
	t.Logf("the silent node with a fast clock was gone after %v (lease 3 s)", time.Since(start).Round(time.Millisecond))
	// Placement follows: a new tenant goes to the renewing node.
	pl, err := p.Place(ctx, "skewed")
	if err != nil || pl.Node != "behind" {
		t.Fatalf("a new tenant: %+v, %v; want on behind, the only node renewing", pl, err)
	}
}
