package cluster_test

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
)

// TestIssueTokenOnARealAPIServer: tokens issued into the Secret authenticate
// as their tenants when a front door reads the Secret's file; a name in
// use is refused without touching the Secret; issuers racing never lose a
// token: each lands (a conflict is retried from a new read); a revoked one
// is gone.
func TestIssueTokenOnARealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	c.Namespace(t, ns)
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	alice, err := cluster.IssueToken(ctx, kube, ns, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.IssueToken(ctx, kube, ns, "alice"); !errors.Is(err, auth.ErrExists) {
		t.Fatalf("alice again: %v, want auth.ErrExists", err)
	}
	if _, err := cluster.IssueToken(ctx, kube, ns, "no spaces"); !errors.Is(err, auth.ErrInvalidName) {
		t.Fatalf("an invalid name: %v, want auth.ErrInvalidName", err)
	}

	// Eight issuers at once: every one that succeeded is in the Secret.
	issued := map[string]string{"alice": alice}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := cluster.IssueToken(ctx, kube, ns, name)
			switch {
			case err != nil:
				t.Errorf("%s: %v", name, err)
			default:
				mu.Lock()
				issued[name] = tok
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(issued) != 9 {
		t.Fatalf("%d issuers of 9 succeeded: a conflict is retried from a new read", len(issued))
	}

	// Revoked: gone from the Secret; again, there is nothing to revoke.
	if err := cluster.RevokeToken(ctx, kube, ns, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.RevokeToken(ctx, kube, ns, "alice"); !errors.Is(err, auth.ErrNotFound) {
		t.Fatalf("revoking alice again: %v, want auth.ErrNotFound", err)
	}
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, cluster.TokensSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(issued, "alice")
	file := filepath.Join(t.TempDir(), cluster.TokensKey)
	if err := os.WriteFile(file, s.Data[cluster.TokensKey], 0o400); err != nil {
		t.Fatal(err)
	}
	front, err := auth.OpenTokensFile(file)
	if err != nil {
		t.Fatal(err)
	}
	list, err := front.List()
	if err != nil || len(list) != len(issued) {
		t.Fatalf("the Secret lists %d tokens (%v), want the %d issued", len(list), err, len(issued))
	}
	for name, tok := range issued {
		r := httptest.NewRequest("POST", "/mcp", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		p, err := front.Authenticate(ctx, r)
		if err != nil || p.Tenant != name {
			t.Errorf("%s's token: %+v, %v", name, p, err)
		}
	}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+alice)
	if p, err := front.Authenticate(ctx, r); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("alice's revoked token: %+v, %v; want ErrInvalidToken", p, err)
	}
}
