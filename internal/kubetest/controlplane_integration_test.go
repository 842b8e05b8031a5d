package kubetest

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// TestControlPlane starts a real control plane and checks what sandpit's
// cluster parts will rely on: optimistic concurrency on a Lease (a node
// agent's registration), a watch from "now" (what etcd 3.4 breaks), a CRD that becomes Established and serves (the
// front door's placement records), that a request without a client
// certificate or with one that RBAC grants nothing is refused — and that
// after the test's cleanup none of its processes is left.
func TestControlPlane(t *testing.T) {
	var procs []Process
	ok := t.Run("cluster", func(t *testing.T) {
		c := Start(t)
		procs = c.Processes
		t.Run("lease", func(t *testing.T) { testLease(t, c) })
		t.Run("watch", func(t *testing.T) { testWatch(t, c) })
		t.Run("crd", func(t *testing.T) { testCRD(t, c) })
		t.Run("unauthenticated", func(t *testing.T) { testRefused(t, c) })
	})
	switch {
	case !ok:
		return // failed, and said why
	case procs == nil:
		t.Skip("no cluster started (skipped, see above)")
	}
	if len(procs) != 3 {
		t.Fatalf("up recorded %d processes, want etcd, kube-apiserver, watcher: %+v", len(procs), procs)
	}
	for _, p := range procs {
		if p.Running() {
			t.Errorf("%s (pid %d) still runs after the cluster's cleanup", p.Name, p.PID)
		}
	}
}

func testLease(t *testing.T, c *Cluster) {
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	leases := cs.CoordinationV1().Leases(metav1.NamespaceDefault)
	holder, secs := "node-a", int32(15)
	created, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "sandpit-node-a"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &secs,
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the Lease: %v", err)
	}

	read, err := leases.Get(ctx, created.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the Lease: %v", err)
	}
	if read.ResourceVersion != created.ResourceVersion {
		t.Fatalf("read resourceVersion %q, created %q", read.ResourceVersion, created.ResourceVersion)
	}
	stale := read.DeepCopy()

	// A renewal with the resourceVersion just read: accepted, and it
	// makes a new one.
	read.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(time.Second)}
	renewed, err := leases.Update(ctx, read, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("renew the Lease with the resourceVersion read: %v", err)
	}
	if renewed.ResourceVersion == stale.ResourceVersion {
		t.Fatalf("a renewal left resourceVersion %q unchanged", renewed.ResourceVersion)
	}

	// A takeover written from the copy read before the renewal: refused
	// with a Conflict, and the Lease keeps its holder.
	other := "node-b"
	stale.Spec.HolderIdentity = &other
	_, err = leases.Update(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("an update with stale resourceVersion %s: got %v, want a Conflict", stale.ResourceVersion, err)
	}
	now, err := leases.Get(ctx, created.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := now.Spec.HolderIdentity; h == nil || *h != holder || now.ResourceVersion != renewed.ResourceVersion {
		t.Fatalf("after the refused update the Lease is held by %v at %s, want %s at %s",
			h, now.ResourceVersion, holder, renewed.ResourceVersion)
	}
}

// testWatch watches Leases without a resourceVersion ("from now") after
// another kind of object changed, and sees a Lease created after the watch
// started. With etcd 3.4 such a watch fails ("Timeout: Too large resource
// version: 210, current: 64"): the apiserver waits for its Lease cache to
// catch up with etcd's latest revision, which without etcd's progress
// notifications it never does while no Lease changes.
func testWatch(t *testing.T, c *Cluster) {
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "not-a-lease"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a ConfigMap: %v", err)
	}
	leases := cs.CoordinationV1().Leases(metav1.NamespaceDefault)
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=sandpit-node-w"})
	if err != nil {
		t.Fatalf("watch Leases: %v", err)
	}
	defer w.Stop()
	holder := "node-w"
	if _, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "sandpit-node-w"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the Lease: %v", err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the Lease's ADDED event")
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if ev.Type == watch.Added && isLease && l.Name == "sandpit-node-w" {
				return
			}
			if ev.Type == watch.Error {
				t.Fatalf("the watch failed: %v", apierrors.FromObject(ev.Object))
			}
		case <-timeout:
			t.Fatal("no ADDED event for the Lease within 30s")
		}
	}
}

var (
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	wsGVR  = schema.GroupVersionResource{Group: "test.sandpit.dev", Version: "v1alpha1", Resource: "workspaces"}
)

func testCRD(t *testing.T, c *Cluster) {
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": wsGVR.Resource + "." + wsGVR.Group},
		"spec": map[string]any{
			"group": wsGVR.Group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": wsGVR.Resource, "singular": "workspace", "kind": "Workspace", "listKind": "WorkspaceList"},
			"versions": []any{map[string]any{
				"name": wsGVR.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{"spec": map[string]any{
						"type":     "object",
						"required": []any{"node"},
						"properties": map[string]any{
							"node": map[string]any{"type": "string", "minLength": int64(1)},
						},
					}},
				}},
			}},
		},
	}}
	crds := dyn.Resource(crdGVR)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the CRD: %v", err)
	}
	start := time.Now()
	for {
		got, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get the CRD: %v", err)
		}
		if cluster.Established(got) {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the CRD is not Established after %v: status %v", time.Since(start), got.Object["status"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("CRD Established %v after its creation", time.Since(start).Round(time.Millisecond))

	// It serves, and its schema holds: a placement record is stored, one
	// without a node is refused. (A create within 2 s of Established
	// sleeps 2 s in the apiserver, by design — for HA apiservers that have
	// not seen the CRD yet — so this first one takes 2 s.)
	ws := dyn.Resource(wsGVR).Namespace(metav1.NamespaceDefault)
	obj := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wsGVR.GroupVersion().String(),
			"kind":       "Workspace",
			"metadata":   map[string]any{"name": name},
			"spec":       spec,
		}}
	}
	if _, err := ws.Create(ctx, obj("ws-1", map[string]any{"node": "node-a"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a Workspace: %v", err)
	}
	_, err = ws.Create(ctx, obj("ws-2", map[string]any{}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("a Workspace without spec.node: got %v, want Invalid", err)
	}
}

func testRefused(t *testing.T, c *Cluster) {
	ca, err := os.ReadFile(filepath.Join(c.Dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no certificate in pki/ca.crt")
	}
	// Trusts the server, presents no certificate.
	anon := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	url := c.APIServer + "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	resp, err := anon.Get(url)
	if err != nil {
		t.Fatalf("GET %s without a client certificate: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET %s without a client certificate: %s, want 401 or 403", url, resp.Status)
	}

	// A valid certificate of a user RBAC grants nothing: Forbidden.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.NobodyKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoordinationV1().Leases(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("list Leases as a user with no role: got %v, want Forbidden", err)
	}

	// And the admin may: the refusals above are about who asks.
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("list Leases as admin: %v", err)
	}
}
