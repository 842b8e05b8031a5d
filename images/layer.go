package images

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/archive"
	"github.com/containerd/containerd/content"
	"github.com/containerd/containerd/errdefs"
	cimages "github.com/containerd/containerd/images"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// writeLayer writes rootfs as one uncompressed OCI layer to path and
// returns its digest (which, uncompressed, is also its diff ID) and size.
// Owners stay numeric, hardlinks stay links, device nodes and xattrs are
// kept.
func writeLayer(ctx context.Context, rootfs, path string) (digest.Digest, int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", 0, fmt.Errorf("write layer: %w", err)
	}
	defer f.Close()
	digester := digest.SHA256.Digester()
	counter := &countingWriter{}
	buf := bufio.NewWriterSize(io.MultiWriter(f, digester.Hash(), counter), 1<<20)
	if err := archive.WriteDiff(ctx, buf, "", rootfs); err != nil {
		return "", 0, fmt.Errorf("write layer from %s: %w", rootfs, err)
	}
	if err := buf.Flush(); err != nil {
		return "", 0, fmt.Errorf("write layer: %w", err)
	}
	// The cache entry is renamed into place after this: its data must be
	// on disk first, or a crash could leave a complete-looking entry with
	// a truncated layer.
	if err := f.Sync(); err != nil {
		return "", 0, fmt.Errorf("write layer: %w", err)
	}
	return digester.Digest(), counter.n, f.Close()
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// imageConfig is the OCI config of an image built from recipe r whose
// single layer is described by e.
func imageConfig(r Recipe, e entry) ocispec.Image {
	labels := map[string]string{LabelRecipe: e.Key}
	for k, v := range e.Labels {
		labels[k] = v
	}
	if r.Name != "" {
		labels[LabelImage] = r.Name
	}
	if len(r.Extra) > 0 {
		base := r
		base.Extra = nil
		labels[LabelExtraPackages] = strings.Join(r.Extra, ",")
		labels[LabelBase] = base.Key()
	}
	created := e.Created.UTC()
	return ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{Architecture: goruntime.GOARCH, OS: "linux"},
		Config: ocispec.ImageConfig{
			Env:        r.Env,
			Cmd:        r.Cmd,
			WorkingDir: r.WorkingDir,
			Labels:     labels,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{e.DiffID}},
		History: []ocispec.History{{
			Created:   &created,
			CreatedBy: e.Command,
			Comment:   "sandpit recipe " + e.Key,
		}},
	}
}

// manifest is the OCI manifest of a config and its layers.
func manifest(config ocispec.Descriptor, layers ...ocispec.Descriptor) ocispec.Manifest {
	return ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    config,
		Layers:    layers,
	}
}

// gcLabels make the manifest hold on to its config and layers: without
// them containerd's garbage collector removes both once the lease that
// wrote them ends.
func gcLabels(m ocispec.Manifest) map[string]string {
	labels := map[string]string{"containerd.io/gc.ref.content.config": m.Config.Digest.String()}
	for i, l := range m.Layers {
		labels[fmt.Sprintf("containerd.io/gc.ref.content.l.%d", i)] = l.Digest.String()
	}
	return labels
}

// descriptorOf marshals v and describes it with media type mt.
func descriptorOf(mt string, v any) ([]byte, ocispec.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	return b, ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}, nil
}

// importEntry stores a cached rootfs layer as image r.Ref in containerd and
// unpacks it into snapshotter. An existing image of that name is replaced.
func importEntry(ctx context.Context, client *containerd.Client, r Recipe, e entry, snapshotter string, log *slog.Logger) (err error) {
	start := time.Now()
	ctx, done, err := client.WithLease(ctx)
	if err != nil {
		return fmt.Errorf("import %s: lease: %w", r.Ref, err)
	}
	defer func() {
		if derr := done(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = fmt.Errorf("import %s: release lease: %w", r.Ref, derr)
		}
	}()
	cs := client.ContentStore()

	layer, err := os.Open(e.layerPath())
	if err != nil {
		return fmt.Errorf("import %s: %w", r.Ref, err)
	}
	defer layer.Close()
	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: e.DiffID, Size: e.Size}
	// WriteBlob verifies size and digest, so a damaged cache file fails here.
	if err := content.WriteBlob(ctx, cs, "sandpit-layer-"+e.DiffID.Encoded(), layer, layerDesc); err != nil {
		return fmt.Errorf("import %s: layer: %w", r.Ref, err)
	}
	log.Debug("layer stored", "ref", r.Ref, "took", time.Since(start))

	configBytes, configDesc, err := descriptorOf(ocispec.MediaTypeImageConfig, imageConfig(r, e))
	if err != nil {
		return fmt.Errorf("import %s: config: %w", r.Ref, err)
	}
	if err := content.WriteBlob(ctx, cs, "sandpit-config-"+configDesc.Digest.Encoded(), bytes.NewReader(configBytes), configDesc); err != nil {
		return fmt.Errorf("import %s: config: %w", r.Ref, err)
	}

	m := manifest(configDesc, layerDesc)
	manifestBytes, manifestDesc, err := descriptorOf(ocispec.MediaTypeImageManifest, m)
	if err != nil {
		return fmt.Errorf("import %s: manifest: %w", r.Ref, err)
	}
	if err := content.WriteBlob(ctx, cs, "sandpit-manifest-"+manifestDesc.Digest.Encoded(), bytes.NewReader(manifestBytes), manifestDesc,
		content.WithLabels(gcLabels(m))); err != nil {
		return fmt.Errorf("import %s: manifest: %w", r.Ref, err)
	}

	// Unpack before the name moves: unpacking labels the new config with
	// the snapshot, and the config is this lease's until the image holds
	// it. Moved first, the old image's config — until then the only
	// holder of a snapshot the two share — became garbage, and a
	// collection before the label took the snapshot (TestIntegrationReplaceUnderGC).
	img := cimages.Image{Name: r.Ref, Target: manifestDesc}
	start = time.Now()
	if err := containerd.NewImage(client, img).Unpack(ctx, snapshotter); err != nil {
		return fmt.Errorf("unpack %s into %s: %w", r.Ref, snapshotter, err)
	}
	log.Debug("image unpacked", "ref", r.Ref, "snapshotter", snapshotter, "took", time.Since(start))
	if _, err := storeImage(ctx, client, img); err != nil {
		return fmt.Errorf("import %s: %w", r.Ref, err)
	}
	return nil
}

// storeImage creates the image record, or points an existing one at the
// new target.
func storeImage(ctx context.Context, client *containerd.Client, img cimages.Image) (cimages.Image, error) {
	is := client.ImageService()
	created, err := is.Create(ctx, img)
	if err == nil {
		return created, nil
	}
	if !errdefs.IsAlreadyExists(err) {
		return cimages.Image{}, err
	}
	img.UpdatedAt = time.Now()
	return is.Update(ctx, img, "target")
}
