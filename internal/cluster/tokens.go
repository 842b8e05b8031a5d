package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/sandpit-dev/sandpit/internal/auth"
)

// TokensSecretName is the Secret holding the front doors' sandpit tokens
// (key TokensKey: the token file `sandpit token` keeps, hashes only). Every
// front door replica mounts it and reads it with --tokens-file, so a
// token works whichever replica a client reaches.
const (
	TokensSecretName = "sandpit-tokens"
	TokensKey        = "tokens.json"
)

// ErrTokensChanged: the Secret changed between IssueToken's read and its
// write (another issuer at the same moment); nothing was written.
var ErrTokensChanged = errors.New("the tokens Secret changed meanwhile")

// IssueToken adds a token for tenant name to the tokens Secret of
// namespace (creating the Secret when there is none) and returns it: the
// only time it is seen; the Secret holds its hash. The write carries the
// resourceVersion read, so two issuers at once never drop each other's
// token: the loser reads again and retries (ErrTokensChanged after 20
// tries). A front door sees the new token
// once the kubelet refreshes its Secret volume (up to about a minute).
func IssueToken(ctx context.Context, kube kubernetes.Interface, namespace, name string) (string, error) {
	var tok string
	err := updateTokens(ctx, kube, namespace, "issue token "+name, true, func(store *auth.Tokens) (err error) {
		tok, err = store.Create(name)
		return err
	})
	return tok, err
}

// RevokeToken removes tenant name's token from the tokens Secret
// (auth.ErrNotFound when it holds none): front doors refuse it once the
// kubelet refreshes their Secret volume.
func RevokeToken(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	return updateTokens(ctx, kube, namespace, "revoke token "+name, false, func(store *auth.Tokens) error {
		return store.Revoke(name)
	})
}

// updateTokens applies change to the token file the Secret holds, with
// the token store's own code (the format, checks and limits of `sandpit
// token`), and writes it back at the resourceVersion read, again from the
// read when another writer came first. create makes the Secret when there
// is none.
func updateTokens(ctx context.Context, kube kubernetes.Interface, namespace, what string, create bool, change func(*auth.Tokens) error) error {
	// Another writer between our read and write: nothing was written, so
	// read again and redo the change (a new token, if one is made).
	backoff := wait.Backoff{Steps: 20, Duration: 20 * time.Millisecond, Factor: 1.3, Jitter: 1, Cap: time.Second}
	return retry.OnError(backoff, func(err error) bool { return errors.Is(err, ErrTokensChanged) }, func() error {
		return updateTokensOnce(ctx, kube, namespace, what, create, change)
	})
}

func updateTokensOnce(ctx context.Context, kube kubernetes.Interface, namespace, what string, create bool, change func(*auth.Tokens) error) error {
	secrets := kube.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, TokensSecretName, metav1.GetOptions{})
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read secret %s: %w", TokensSecretName, err)
	}
	dir, err := os.MkdirTemp("", "sandpit-tokens-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := auth.OpenTokens(dir)
	if err != nil {
		return err
	}
	if exists {
		if err := os.WriteFile(store.Path(), s.Data[TokensKey], 0o600); err != nil {
			return err
		}
		if store, err = auth.OpenTokens(dir); err != nil {
			return fmt.Errorf("secret %s holds no valid token file: %w", TokensSecretName, err)
		}
	}
	if err := change(store); err != nil {
		return err
	}
	data, err := os.ReadFile(store.Path())
	if err != nil {
		return err
	}
	switch {
	case !exists && !create:
		return fmt.Errorf("%s: %w", what, auth.ErrNotFound)
	case !exists:
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: TokensSecretName, Labels: map[string]string{"app.kubernetes.io/name": "sandpit"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{TokensKey: data},
		}
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	default:
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[TokensKey] = data
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: %w (nothing was written; try again)", what, ErrTokensChanged)
	}
	if err != nil {
		return fmt.Errorf("write secret %s: %w", TokensSecretName, err)
	}
	return nil
}
