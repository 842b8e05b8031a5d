package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestWriteLayer(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"etc/passwd":  "root:x:0:0::/root:/bin/sh\n",
		"bin/tool":    "#!/bin/sh\necho hi\n",
		"bin/sh-link": "->tool",
	})
	if err := os.Link(filepath.Join(root, "bin/tool"), filepath.Join(root, "bin/tool-hard")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantUID := os.Getuid()
	if os.Geteuid() == 0 {
		wantUID = 1000
		if err := os.Lchown(filepath.Join(root, "workspace"), 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}

	path := filepath.Join(t.TempDir(), "layer.tar")
	diffID, size, err := writeLayer(t.Context(), root, path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := digest.FromBytes(data); got != diffID {
		t.Errorf("diffID = %s, file digest %s", diffID, got)
	}
	if int64(len(data)) != size {
		t.Errorf("size = %d, file has %d bytes", size, len(data))
	}
	if _, _, err := writeLayer(t.Context(), root, path); err == nil {
		t.Errorf("writeLayer over an existing file succeeded; want an error rather than a silent overwrite")
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name] = h
	}
	tests := []struct {
		name     string
		typeflag byte
		linkname string
		uid      int
	}{
		{"etc/passwd", tar.TypeReg, "", os.Getuid()},
		{"bin/tool", tar.TypeReg, "", os.Getuid()},
		{"bin/sh-link", tar.TypeSymlink, "tool", os.Getuid()},
		{"workspace/", tar.TypeDir, "", wantUID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := headers[tt.name]
			if !ok {
				t.Fatalf("layer lacks %s; has %v", tt.name, keys(headers))
			}
			if h.Typeflag != tt.typeflag || h.Linkname != tt.linkname || h.Uid != tt.uid {
				t.Errorf("%s: type %c link %q uid %d; want type %c link %q uid %d",
					tt.name, h.Typeflag, h.Linkname, h.Uid, tt.typeflag, tt.linkname, tt.uid)
			}
		})
	}
	// One of the two names of the hardlinked file is stored as a link to
	// the other, not as a second copy.
	a, b := headers["bin/tool"], headers["bin/tool-hard"]
	if b == nil || !(a.Typeflag == tar.TypeLink && a.Linkname == "bin/tool-hard" || b.Typeflag == tar.TypeLink && b.Linkname == "bin/tool") {
		t.Errorf("hardlink not kept: tool %+v, tool-hard %+v", a, b)
	}
}

func keys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}

func TestImageConfigAndManifest(t *testing.T) {
	r := DefaultRecipe()
	e := entry{
		Key:     r.Key(),
		DiffID:  digest.FromString("layer"),
		Size:    5,
		Labels:  map[string]string{LabelVersionPrefix + "python": "3.11.2", LabelVersionPrefix + "c": "gcc 12.2.0"},
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Command: r.describe(),
	}
	cfg := imageConfig(r, e)

	// Round-trip through JSON, as containerd and runtimes read it.
	cfgBytes, cfgDesc, err := descriptorOf(ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfgDesc.Digest != digest.FromBytes(cfgBytes) || cfgDesc.Size != int64(len(cfgBytes)) {
		t.Errorf("config descriptor %+v does not describe its bytes", cfgDesc)
	}
	var got ocispec.Image
	if err := json.Unmarshal(cfgBytes, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.RootFS.DiffIDs) != 1 || got.RootFS.DiffIDs[0] != e.DiffID || got.RootFS.Type != "layers" {
		t.Errorf("rootfs = %+v, want one layer %s", got.RootFS, e.DiffID)
	}
	wantLabels := map[string]string{
		LabelRecipe:                   e.Key,
		LabelVersionPrefix + "python": "3.11.2",
		LabelVersionPrefix + "c":      "gcc 12.2.0",
	}
	for k, v := range wantLabels {
		if got.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, got.Config.Labels[k], v)
		}
	}
	if got.Config.User != "" {
		t.Errorf("config user = %q; the runtime picks the user, the image must not", got.Config.User)
	}
	if len(got.Config.Env) == 0 || got.Config.Env[0] != r.Env[0] {
		t.Errorf("config env = %v, want %v", got.Config.Env, r.Env)
	}
	if got.OS != "linux" || got.Architecture == "" || got.Created == nil || !got.Created.Equal(e.Created) {
		t.Errorf("platform/created = %s/%s %v", got.OS, got.Architecture, got.Created)
	}
	if got := versions(got.Config.Labels); got["python"] != "3.11.2" || got["c"] != "gcc 12.2.0" || len(got) != 2 {
		t.Errorf("versions() = %v", got)
	}

	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: e.DiffID, Size: e.Size}
	m := manifest(cfgDesc, layerDesc)
	if m.SchemaVersion != 2 || m.MediaType != ocispec.MediaTypeImageManifest || m.Config.Digest != cfgDesc.Digest {
		t.Errorf("manifest = %+v", m)
	}
	labels := gcLabels(m)
	for k, v := range map[string]string{
		"containerd.io/gc.ref.content.config": cfgDesc.Digest.String(),
		"containerd.io/gc.ref.content.l.0":    e.DiffID.String(),
	} {
		if labels[k] != v {
			t.Errorf("gc label %s = %q, want %q", k, labels[k], v)
		}
	}
}
