package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultAudience is the audience of the service-account tokens front
// doors send nodes (a projected token for this audience is useless
// against the API server, and the API server's are refused here).
const DefaultAudience = "sandpit"

// DefaultFrontAccount is the front doors' service account (rbac.yaml).
const DefaultFrontAccount = "sandpit-front"

// Reviewer checks a front door's service-account token with the API
// server (TokenReview): authenticated, for Audience, and the user of
// service account Account in Namespace. Answers are kept: an accepted
// token for Keep, a refused one for KeepRefused, so a flood of made-up tokens costs the API server one
// review per token and KeepRefused. At most maxReviewCache answers are
// kept (all are forgotten when full).
type Reviewer struct {
	Kube        kubernetes.Interface
	Namespace   string
	Account     string
	Audience    string
	Keep        time.Duration
	KeepRefused time.Duration

	mu    sync.Mutex
	cache map[[sha256.Size]byte]review
	now   func() time.Time
}

type review struct {
	ok   bool
	till time.Time
}

const maxReviewCache = 4096

// User is the name a token of the front doors' account authenticates as.
func (r *Reviewer) User() string {
	return "system:serviceaccount:" + r.Namespace + ":" + r.Account
}

// IsFrontDoor implements auth.Reviewer.
func (r *Reviewer) IsFrontDoor(ctx context.Context, token string) (bool, error) {
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	key := sha256.Sum256([]byte(token))
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	if ok && now.Before(c.till) {
		return c.ok, nil
	}
	tr, err := r.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	accepted := st.Authenticated && st.User.Username == r.User() && slices.Contains(st.Audiences, r.Audience)
	// A review does not say when a token expires: an accepted one is
	// believed for Keep at most, past its expiry too (bounded by Keep).
	keep := r.KeepRefused
	if accepted {
		keep = r.Keep
	}
	r.mu.Lock()
	if r.cache == nil || len(r.cache) >= maxReviewCache {
		r.cache = map[[sha256.Size]byte]review{}
	}
	r.cache[key] = review{ok: accepted, till: now.Add(keep)}
	r.mu.Unlock()
	return accepted, nil
}

// TokenFile is a front door's service-account token as the kubelet keeps
// it in a projected volume: rotated before it expires, so read again
// every minute.
type TokenFile struct {
	Path string

	mu   sync.Mutex
	tok  string
	read time.Time
}

// Token returns the token, re-reading the file at most once a minute.
func (f *TokenFile) Token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tok != "" && time.Since(f.read) < time.Minute {
		return f.tok, nil
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		if f.tok != "" {
			return f.tok, nil // the last one read until the file is back
		}
		return "", fmt.Errorf("the front door's token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("the front door's token %s is empty", f.Path)
	}
	f.tok, f.read = tok, time.Now()
	return tok, nil
}
