package cluster_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
)

// countingTransport counts the TokenReviews sent through it.
type countingTransport struct {
	rt      http.RoundTripper
	reviews *atomic.Int32
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
		c.reviews.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// TestReviewerOnARealAPIServer: a node agent, with exactly the rights
// rbac.yaml gives its service account, asks the API server about a
// caller's token: only a token of the front doors' account for audience
// "sandpit" is a front door's — not the node's own account's, not the
// front doors' token for the API server, not a made-up one. Answers are
// kept: the same token is reviewed once.
func TestReviewerOnARealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	c.Namespace(t, ns)
	c.Apply(t, kubetest.RepoFile(t, "scripts/kubernetes/rbac.yaml"), ns)
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(account string, audiences ...string) string {
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), account,
			&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", account, err)
		}
		return tr.Status.Token
	}
	// The node agent's client: the admin acting as sandpit-node.
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":sandpit-node"}
	var reviews atomic.Int32
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &reviews} }
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &cluster.Reviewer{Kube: kube, Namespace: ns, Account: cluster.DefaultFrontAccount, Audience: cluster.DefaultAudience,
		Keep: time.Minute, KeepRefused: time.Minute}
	front := token("sandpit-front", "sandpit")
	for _, tt := range []struct {
		name, token string
		want        bool
	}{
		{"the front doors' token for sandpit", front, true},
		{"the node's own account's", token("sandpit-node", "sandpit"), false},
		{"the front doors' token for the API server", token("sandpit-front"), false},
		{"another audience", token("sandpit-front", "something-else"), false},
		{"made up", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", false},
	} {
		ok, err := r.IsFrontDoor(t.Context(), tt.token)
		if err != nil || ok != tt.want {
			t.Errorf("%s: %v, %v; want %v", tt.name, ok, err, tt.want)
		}
	}
	n := reviews.Load()
	if n != 5 {
		t.Errorf("%d reviews for 5 tokens", n)
	}
	if ok, err := r.IsFrontDoor(t.Context(), front); !ok || err != nil || reviews.Load() != n {
		t.Errorf("the front token again: %v, %v, %d more reviews; want true from what was kept", ok, err, reviews.Load()-n)
	}
	// Without the right to review (the front doors' account has none):
	// an error, which the node answers as unavailable, never a yes.
	fcfg := rest.CopyConfig(c.Config)
	fcfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":sandpit-front"}
	fkube, err := kubernetes.NewForConfig(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	denied := &cluster.Reviewer{Kube: fkube, Namespace: ns, Account: cluster.DefaultFrontAccount, Audience: cluster.DefaultAudience}
	if ok, err := denied.IsFrontDoor(t.Context(), front); ok || err == nil {
		t.Errorf("a reviewer without the right: %v, %v; want an error", ok, err)
	}
}
