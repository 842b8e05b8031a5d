package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
// token: the loser gets ErrTokensChanged. A front door sees the new token
// once the kubelet refreshes its Secret volume (up to about a minute).
func IssueToken(ctx context.Context, kube kubernetes.Interface, namespace, name string) (string, error) {
	secrets := kube.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, TokensSecretName, metav1.GetOptions{})
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("read secret %s: %w", TokensSecretName, err)
	}
	// The token store's own code makes the token and its file: the same
	// format, checks and limits as `sandpit token create`.
	dir, err := os.MkdirTemp("", "sandpit-tokens-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	store, err := auth.OpenTokens(dir)
	if err != nil {
		return "", err
	}
	if exists {
		if err := os.WriteFile(store.Path(), s.Data[TokensKey], 0o600); err != nil {
			return "", err
		}
		if store, err = auth.OpenTokens(dir); err != nil {
			return "", fmt.Errorf("secret %s holds no valid token file: %w", TokensSecretName, err)
		}
	}
	tok, err := store.Create(name)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(store.Path())
	if err != nil {
		return "", err
	}
	if !exists {
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: TokensSecretName, Labels: map[string]string{"app.kubernetes.io/name": "sandpit"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{TokensKey: data},
		}
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	} else {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[TokensKey] = data
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("issue token %s: %w (nothing was written; try again)", name, ErrTokensChanged)
	}
	if err != nil {
		return "", fmt.Errorf("write secret %s: %w", TokensSecretName, err)
	}
	return tok, nil
}
