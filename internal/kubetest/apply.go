package kubetest

import (
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sandpit-dev/sandpit/internal/cluster"
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

// Apply applies every object of the YAML manifest file with
// cluster.Apply (server-side apply; unknown fields refused; CRDs waited
// for), in namespace where an object names none.
func (c *Cluster) Apply(t testing.TB, file, namespace string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	made, err := cluster.Apply(t.Context(), c.Config, data, namespace)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return made
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
