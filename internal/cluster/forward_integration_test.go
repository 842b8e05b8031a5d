package cluster_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
)

// TestForwarder: what a node receives from a front door's forwarder — the
// tenant the front door proved and the cluster secret, never what the
// client sent under those names, nor its Origin — and what a client gets
// when its node does not answer.
func TestForwarder(t *testing.T) {
	c := kubetest.Start(t)
	c.Namespace(t, ns)
	c.Apply(t, kubetest.RepoFile(t, "scripts/kubernetes/crd.yaml"), ns)
	got := make(chan http.Header, 1)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		io.WriteString(w, "node answered "+r.URL.Path)
	}))
	defer node.Close()
	kube, _ := clients(t, c.Config)
	a := &cluster.Agent{Client: kube, Namespace: ns, Node: "n1", Endpoint: node.URL, Duration: time.Minute}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	fw := &cluster.Forwarder{Placer: placer(t, c.Config), Secret: "the-cluster-secret"}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What front.Front does before Forward: the principal it proved.
		ctx := auth.WithPrincipal(r.Context(), auth.Principal{Tenant: "alice", Scopes: []string{auth.ScopeRun}, Via: "token"})
		fw.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer front.Close()

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL+"/mcp", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer alices-own-token")
	req.Header.Add(auth.HeaderTenant, "mallory")
	req.Header.Set(auth.HeaderScopes, "sandpit:run sandpit:files sandpit:data")
	req.Header.Set("Origin", "https://sandpit.example.com")
	req.Header.Set("Mcp-Session-Id", "s-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "node answered /mcp" {
		t.Fatalf("through the forwarder: %d %q", resp.StatusCode, body)
	}
	h := <-got
	for name, want := range map[string]string{
		"Authorization":   "Bearer the-cluster-secret",
		auth.HeaderTenant: "alice",
		auth.HeaderScopes: auth.ScopeRun,
		"Origin":          "",
		"Mcp-Session-Id":  "s-1",
	} {
		if vs := h.Values(name); strings.Join(vs, ",") != want {
			t.Errorf("the node got %s %q, want %q", name, vs, want)
		}
	}

	// The node stops answering: a clear 502 saying what to do, and the
	// placement is asked about again on the next call.
	node.Close()
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL+"/mcp", strings.NewReader("{}"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err = http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "n1 did not answer") {
		t.Errorf("node gone: %d %q (Retry-After %q), want 502 naming the node, with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
}
