package cluster_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
)

// BenchmarkPlace: placing a new tenant (list nodes, read, count, create)
// and finding a placed one (list nodes, read), against a real API server
// with two live nodes. go test -run X -bench Place ./internal/cluster
func BenchmarkPlace(b *testing.B) {
	c := kubetest.Start(b)
	c.Namespace(b, ns)
	c.Apply(b, kubetest.RepoFile(b, "scripts/kubernetes/crd.yaml"), ns)
	for _, n := range []string{"node-a", "node-b"} {
		kube, _ := clients(b, c.Config)
		a := &cluster.Agent{Client: kube, Namespace: ns, Node: n, Endpoint: "http://" + n + ":1", Duration: time.Hour}
		if err := a.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	var requests atomic.Int32
	for _, tc := range []struct {
		name string
		p    *cluster.Placer
	}{
		{"listing", placer(b, c.Config)},
		{"informed", informedPlacer(b, c.Config, &requests)},
	} {
		p := tc.p
		if _, err := p.Place(b.Context(), "warm-up"); err != nil { // the CRD's first create waits 2 s
			b.Fatal(err)
		}
		b.Run(tc.name+"/new tenant", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := p.Place(b.Context(), fmt.Sprintf("%s-%d-%d", tc.name, b.N, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(tc.name+"/placed tenant", func(b *testing.B) {
			for b.Loop() {
				if _, err := p.Place(b.Context(), "warm-up"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
