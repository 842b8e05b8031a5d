package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/content"
	cimages "github.com/containerd/containerd/images"
	"github.com/containerd/containerd/leases"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// TestImageWithoutInitRunsDirect: an image without sandpit's python label
// (a pulled one) may have no python3 for the init, so its runs go the
// direct way — the program as the sandbox's first process, C compiled in a
// sandbox of its own — and it gets no pool.
func TestImageWithoutInitRunsDirect(t *testing.T) {
	addr := testenv.Containerd(t)
	c, err := containerd.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // after the copy's removal
	ctx := namespaces.WithNamespace(t.Context(), testenv.Namespace)
	ref := unlabelledCopy(t, ctx, c, testenv.Image())

	r := newRuntime(t, withPool(1, time.Minute), func(cfg *runtime.Config) { cfg.Languages = runtime.DefaultLanguages(ref) })
	tests := []struct {
		name   string
		req    sandpit.Request
		stdout string
	}{
		{"python is PID 1", sandpit.Request{Language: "python", Code: "import os; print(os.getpid())"}, "1\n"},
		{"c compiles and runs", sandpit.Request{Language: "c", Code: "#include <stdio.h>\n#include <unistd.h>\nint main(void) { printf(\"%d\\n\", (int)getpid()); return 0; }"}, "1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, tt.req)
			if res.Status != sandpit.StatusSuccess || res.Stdout != tt.stdout {
				t.Errorf("got %s %q (stderr %q), want success %q", res.Status, res.Stdout, res.Stderr, tt.stdout)
			}
		})
	}
	if st := r.PoolStats()["python"]; st.Created != 0 {
		t.Errorf("a pool ran on an image without the init: %+v", st)
	}
}

// unlabelledCopy stores a copy of ref whose config has no sandpit labels
// (same layers) and returns its name; the test removes it at the end.
func unlabelledCopy(t *testing.T, ctx context.Context, c *containerd.Client, ref string) string {
	t.Helper()
	ctx, done, err := c.WithLease(ctx, leases.WithExpiration(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer done(context.WithoutCancel(ctx))
	img, err := c.GetImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	cs := c.ContentStore()
	m, err := cimages.Manifest(ctx, cs, img.Target(), platforms.Default())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := content.ReadBlob(ctx, cs, m.Config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	for k := range cfg.Config.Labels {
		if strings.HasPrefix(k, "org.sandpit.") {
			delete(cfg.Config.Labels, k)
		}
	}
	if _, ok := cfg.Config.Labels[images.LabelVersionPrefix+"python"]; ok {
		t.Fatal("the copy still has the python label")
	}
	write := func(mediaType string, v any, labels map[string]string) ocispec.Descriptor {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if err := content.WriteBlob(ctx, cs, d.Digest.String(), strings.NewReader(string(b)), d, content.WithLabels(labels)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	m.Config = write(ocispec.MediaTypeImageConfig, cfg, nil)
	gc := map[string]string{"containerd.io/gc.ref.content.config": m.Config.Digest.String()}
	for i, l := range m.Layers {
		gc[fmt.Sprintf("containerd.io/gc.ref.content.l.%d", i)] = l.Digest.String()
	}
	m.MediaType = ocispec.MediaTypeImageManifest
	target := write(ocispec.MediaTypeImageManifest, m, gc)

	name := fmt.Sprintf("sandpit.test/nolabel:%d", time.Now().UnixNano())
	if _, err := c.ImageService().Create(ctx, cimages.Image{Name: name, Target: target}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := images.Remove(namespaces.WithNamespace(context.Background(), testenv.Namespace), c, name); err != nil {
			t.Errorf("remove %s: %v", name, err)
		}
	})
	if err := containerd.NewImage(c, cimages.Image{Name: name, Target: target}).Unpack(ctx, ""); err != nil {
		t.Fatal(err)
	}
	return name
}
