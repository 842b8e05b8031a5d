package kubetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// RepoFile is path (slash-separated, from the checkout's root) in the
// sandpit checkout the test runs in.
func RepoFile(t testing.TB, path string) string {
	t.Helper()
	script, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(filepath.Dir(script)), filepath.FromSlash(path))
}

// Apply creates every object of the YAML manifest file (documents
// separated by ---), in namespace where an object is namespaced and names
// none, and waits until each CustomResourceDefinition is Established.
func (c *Cluster) Apply(t testing.TB, file, namespace string) []*unstructured.Unstructured {
	t.Helper()
	ctx := t.Context()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var made []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset() // a CRD applied above: discover again
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				t.Fatalf("%s: %s %s: %v", file, gvk, obj.GetName(), err)
			}
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(namespace)
			}
			res = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		got, err := res.Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: create %s %s: %v", file, gvk.Kind, obj.GetName(), err)
		}
		if gvk.Kind == "CustomResourceDefinition" {
			waitEstablished(ctx, t, res, got.GetName())
		}
		made = append(made, got)
	}
	return made
}

var crdGroup = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

func waitEstablished(ctx context.Context, t testing.TB, res dynamic.ResourceInterface, name string) {
	t.Helper()
	start := time.Now()
	for {
		got, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("get %s %s: %v", crdGroup, name, err)
		}
		if err == nil && isEstablished(got) {
			return
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("%s %s is not Established after %v", crdGroup, name, time.Since(start))
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func isEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// Namespace creates namespace name.
func (c *Cluster) Namespace(t testing.TB, name string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(t.Context(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}
