package images

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
)

// Store is the images of one containerd namespace. Commands use it so that
// they never hold a containerd client themselves.
type Store struct {
	client *containerd.Client
	ns     string
}

// Connect opens the images of namespace in the containerd at addr. It
// fails when the daemon does not answer within timeout.
func Connect(ctx context.Context, addr, namespace string, timeout time.Duration) (*Store, error) {
	c, err := containerd.New(addr, containerd.WithDefaultNamespace(namespace), containerd.WithTimeout(timeout))
	if err != nil {
		return nil, err
	}
	vctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Version(vctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("containerd at %s: %w", addr, err)
	}
	return &Store{client: c, ns: namespace}, nil
}

// Close releases the connection.
func (s *Store) Close() error { return s.client.Close() }

func (s *Store) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, s.ns)
}

// Builder returns a builder into this store; set its other fields before use.
func (s *Store) Builder() *Builder { return &Builder{Client: s.client, ns: s.ns} }

// List returns every image with its size and language versions.
func (s *Store) List(ctx context.Context) ([]Info, error) { return List(s.ctx(ctx), s.client) }

// Versions returns what the image at ref records of its languages.
func (s *Store) Versions(ctx context.Context, ref string) (map[string]string, error) {
	return Versions(s.ctx(ctx), s.client, ref)
}

// Remove removes the image at ref.
func (s *Store) Remove(ctx context.Context, ref string) error {
	return Remove(s.ctx(ctx), s.client, ref)
}

// Import imports an OCI or Docker archive; see Import.
func (s *Store) Import(ctx context.Context, r io.Reader, ref string) ([]string, error) {
	return Import(s.ctx(ctx), s.client, r, ref)
}

// Pull pulls and unpacks ref from its registry.
func (s *Store) Pull(ctx context.Context, ref string) error { return Pull(s.ctx(ctx), s.client, ref) }
