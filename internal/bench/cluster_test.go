package bench

import (
	"bytes"
	"os"
	"testing"
)

// The bench applies its own copy of the CRD: it must be the one
// `sandpit cluster apply` applies.
func TestClusterCRDIsTheRepositorys(t *testing.T) {
	repo, err := os.ReadFile("../../scripts/kubernetes/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(repo, clusterCRD) {
		t.Error("internal/bench/clustercrd.yaml differs from scripts/kubernetes/crd.yaml: copy it again")
	}
}

func TestK8sName(t *testing.T) {
	for in, want := range map[string]string{
		"bench-123":                      "bench-123",
		"test-TestBenchHTTPCluster-99-1": "test-testbenchhttpcluster-99-1",
		"a_b.c":                          "a-b-c",
		"-x-":                            "x",
		"0123456789012345678901234567890123456789xyz": "0123456789012345678901234567890123456789",
	} {
		if got := k8sName(in); got != want {
			t.Errorf("k8sName(%q) = %q, want %q", in, got, want)
		}
	}
}
