package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandpit-dev/sandpit"
)

func TestServerRecipe(t *testing.T) {
	r := ServerRecipe()
	if err := r.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if r.Name != "sandpit-server" || r.Ref != ServerRef || r.Suite != "bookworm" {
		t.Errorf("recipe %s %s %s, want sandpit-server %s bookworm", r.Name, r.Ref, r.Suite, ServerRef)
	}
	if !slices.Contains(r.Packages, "ca-certificates") {
		t.Errorf("packages %v lack ca-certificates (a front door calls its OAuth issuer over TLS)", r.Packages)
	}
	if len(r.Languages) != 0 || len(r.Serves) != 0 || len(r.Setup) != 0 {
		t.Errorf("the server image serves no language and runs no setup: %+v", r)
	}
	// The key names the cached rootfs: the same whatever the image is
	// called, and never one of the sandbox images'.
	key := r.Key()
	renamed := ServerRecipe()
	renamed.Ref = "registry.example.com/sandpit:v1"
	if ServerRecipe().Key() != key || renamed.Key() != key {
		t.Errorf("Key() changes between calls or with the ref: %s, %s, %s", key, ServerRecipe().Key(), renamed.Key())
	}
	cat := DefaultCatalog()
	for _, name := range cat.ImageNames() {
		if name == r.Name {
			t.Errorf("the catalog has an image named %s", name)
		}
		c, err := cat.Recipe(name)
		if err != nil {
			t.Fatal(err)
		}
		if c.Key() == key {
			t.Errorf("catalog image %s has the server recipe's key %s", name, key)
		}
	}
}

func TestCheckRef(t *testing.T) {
	tests := []struct {
		ref string
		ok  bool
	}{
		{ServerRef, true},
		{"registry.example.com:5000/team/sandpit:v1.2", true},
		{"docker.io/library/sandpit:dev", true},
		{"sandpit:dev", false},             // Kubernetes looks for docker.io/library/sandpit:dev
		{"sandpit.local/sandpit", false},   // ... and for :latest
		{"example.com/Sandpit:dev", false}, // upper case
		{"sandpit.local/sandpit@sha256:" + strings.Repeat("a", 64), false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			err := checkRef(tt.ref)
			if (err == nil) != tt.ok {
				t.Fatalf("checkRef(%q) = %v, want ok=%v", tt.ref, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidRef) {
				t.Errorf("checkRef(%q) = %v, want ErrInvalidRef", tt.ref, err)
			}
		})
	}
}

// fakeELF is a minimal static ELF executable for machine: a header, one
// loadable segment and payload. It never runs; it is parsed and copied.
func fakeELF(t *testing.T, machine elf.Machine, payload []byte) []byte {
	t.Helper()
	const hdrSize, progSize, base = 64, 56, 0x400000
	var buf bytes.Buffer
	hdr := elf.Header64{
		Ident:     [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:      uint16(elf.ET_EXEC),
		Machine:   uint16(machine),
		Version:   uint32(elf.EV_CURRENT),
		Entry:     base + hdrSize + progSize,
		Phoff:     hdrSize,
		Ehsize:    hdrSize,
		Phentsize: progSize,
		Phnum:     1,
	}
	size := uint64(hdrSize + progSize + len(payload))
	prog := elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Vaddr: base, Paddr: base, Filesz: size, Memsz: size, Align: 0x1000}
	for _, v := range []any{hdr, prog} {
		if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	buf.Write(payload)
	return buf.Bytes()
}

// serverBuilder is a Builder whose debootstrap writes a few files, counted.
func serverBuilder(t *testing.T) (*Builder, *int) {
	calls := 0
	return &Builder{
		CacheDir: t.TempDir(),
		Log:      discardLogger(),
		bootstrap: func(ctx context.Context, r Recipe, mirror, rootfs string, out io.Writer) error {
			calls++
			if !slices.Contains(r.all(), "ca-certificates") {
				t.Errorf("debootstrap asked for %v, not the server recipe", r.all())
			}
			writeTree(t, rootfs, map[string]string{
				"etc/passwd":                         "root:x:0:0:root:/root:/bin/bash\n",
				"etc/group":                          "root:x:0:\n",
				"etc/ssl/certs/ca-certificates.crt":  "-----BEGIN CERTIFICATE-----\n",
				"usr/bin/cat":                        "#!fake\n",
				"usr/local/bin/.keep":                "",
				"bin":                                "->usr/bin",
				"usr/lib/x86_64-linux-gnu/libc.so.6": "fake libc",
			})
			return nil
		},
		probe: func(ctx context.Context, rootfs string, argv []string) (string, error) {
			t.Errorf("the server recipe probed %v; it has nothing to probe", argv)
			return "", errors.New("no probe")
		},
	}, &calls
}

// writeBinary writes a fake sandpit binary for this architecture.
func writeBinary(t *testing.T) (string, []byte) {
	t.Helper()
	payload := bytes.Repeat([]byte("sandpit binary "), 20000) // 300 kB: more than one copy buffer
	bin := fakeELF(t, archs[goruntime.GOARCH].machine, payload)
	p := filepath.Join(t.TempDir(), "sandpit")
	if err := os.WriteFile(p, bin, 0o700); err != nil {
		t.Fatal(err)
	}
	return p, bin
}

// tarFile is one entry of an archive read by readTar.
type tarFile struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, r io.Reader) []tarFile {
	t.Helper()
	var files []tarFile
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, tarFile{h, data})
	}
}

// blob returns an archive's blob by descriptor, checking that its content
// is what the descriptor says.
func blob(t *testing.T, files map[string][]byte, d ocispec.Descriptor) []byte {
	t.Helper()
	data, ok := files["blobs/sha256/"+d.Digest.Encoded()]
	if !ok {
		t.Fatalf("archive lacks blob %s (%s)", d.Digest, d.MediaType)
	}
	if got := digest.FromBytes(data); got != d.Digest || int64(len(data)) != d.Size {
		t.Fatalf("blob %s holds %d bytes of digest %s; the descriptor says %d", d.Digest, len(data), got, d.Size)
	}
	return data
}

func TestExportServer(t *testing.T) {
	b, calls := serverBuilder(t)
	binPath, bin := writeBinary(t)
	var out bytes.Buffer
	if err := b.ExportServer(t.Context(), binPath, ServerRef, &out); err != nil {
		t.Fatalf("ExportServer: %v", err)
	}
	archive := out.Bytes()
	entries := readTar(t, bytes.NewReader(archive))
	files := map[string][]byte{}
	var names []string
	for _, f := range entries {
		names = append(names, f.hdr.Name)
		files[f.hdr.Name] = f.data
		if f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(reproducible) {
			t.Errorf("%s: uid %d gid %d mtime %v; want root and %v", f.hdr.Name, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime, reproducible)
		}
	}

	var layout ocispec.ImageLayout
	if err := json.Unmarshal(files[ocispec.ImageLayoutFile], &layout); err != nil || layout.Version != ocispec.ImageLayoutVersion {
		t.Errorf("oci-layout = %q (%v), want version %s", files[ocispec.ImageLayoutFile], err, ocispec.ImageLayoutVersion)
	}
	var index ocispec.Index
	if err := json.Unmarshal(files[ocispec.ImageIndexFile], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if index.SchemaVersion != 2 || len(index.Manifests) != 1 {
		t.Fatalf("index.json = %s; want schema 2 and one manifest", files[ocispec.ImageIndexFile])
	}
	mDesc := index.Manifests[0]
	if mDesc.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("index names a %s, want a manifest", mDesc.MediaType)
	}
	for _, k := range []string{"io.containerd.image.name", ocispec.AnnotationRefName} {
		if got := mDesc.Annotations[k]; got != ServerRef {
			t.Errorf("index annotation %s = %q, want %q", k, got, ServerRef)
		}
	}
	if p := mDesc.Platform; p == nil || p.OS != "linux" || p.Architecture != goruntime.GOARCH {
		t.Errorf("index platform = %+v, want linux/%s", p, goruntime.GOARCH)
	}

	var m ocispec.Manifest
	if err := json.Unmarshal(blob(t, files, mDesc), &m); err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != 2 || m.MediaType != ocispec.MediaTypeImageManifest || m.Config.MediaType != ocispec.MediaTypeImageConfig || len(m.Layers) != 2 {
		t.Fatalf("manifest = %+v; want schema 2, a config and two layers", m)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(blob(t, files, m.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	var layers [][]byte
	for i, l := range m.Layers {
		if l.MediaType != ocispec.MediaTypeImageLayer {
			t.Errorf("layer %d is %s, want an uncompressed layer", i, l.MediaType)
		}
		layers = append(layers, blob(t, files, l))
	}
	// Uncompressed layers: the diff IDs are the layers' digests.
	if got, want := cfg.RootFS.DiffIDs, []digest.Digest{m.Layers[0].Digest, m.Layers[1].Digest}; cfg.RootFS.Type != "layers" || !slices.Equal(got, want) {
		t.Errorf("config rootfs %s %v, want layers %v", cfg.RootFS.Type, got, want)
	}
	wantBlobs := []string{mDesc.Digest.Encoded(), m.Config.Digest.Encoded(), m.Layers[0].Digest.Encoded(), m.Layers[1].Digest.Encoded()}
	wantNames := []string{"oci-layout", "index.json", "blobs/", "blobs/sha256/"}
	for _, d := range wantBlobs {
		wantNames = append(wantNames, "blobs/sha256/"+d)
	}
	if !slices.Equal(names, wantNames) {
		t.Errorf("archive holds, in order,\n%v\nwant\n%v", names, wantNames)
	}

	r := ServerRecipe()
	e, ok := lookup(b.CacheDir, r.Key())
	if !ok {
		t.Fatal("the server rootfs is not in the cache after an export")
	}
	cached, err := os.ReadFile(e.layerPath())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(layers[0], cached) {
		t.Errorf("first layer (%d bytes) is not the cached rootfs layer (%d bytes)", len(layers[0]), len(cached))
	}

	// The binary's layer: exactly the binary and the directories to it.
	type want struct {
		name string
		typ  byte
	}
	var got []want
	for _, f := range readTar(t, bytes.NewReader(layers[1])) {
		got = append(got, want{f.hdr.Name, f.hdr.Typeflag})
		if f.hdr.Mode != 0o755 || f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(reproducible) {
			t.Errorf("%s: mode %o uid %d gid %d mtime %v; want 0755, root, %v", f.hdr.Name, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime, reproducible)
		}
		if f.hdr.Name == "usr/local/bin/sandpit" && !bytes.Equal(f.data, bin) {
			t.Errorf("usr/local/bin/sandpit holds %d bytes, not the binary's %d", len(f.data), len(bin))
		}
	}
	wantLayer := []want{{"usr/", tar.TypeDir}, {"usr/local/", tar.TypeDir}, {"usr/local/bin/", tar.TypeDir}, {"usr/local/bin/sandpit", tar.TypeReg}}
	if !slices.Equal(got, wantLayer) {
		t.Errorf("binary layer holds %v, want %v", got, wantLayer)
	}

	if cfg.OS != "linux" || cfg.Architecture != goruntime.GOARCH {
		t.Errorf("config platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/sandpit"}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %v cmd %v, want [/usr/local/bin/sandpit] and none", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	for _, env := range []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"} {
		if !slices.Contains(cfg.Config.Env, env) {
			t.Errorf("env %v lacks %s", cfg.Config.Env, env)
		}
	}
	for k, v := range map[string]string{
		LabelRecipe:       r.Key(),
		LabelImage:        "sandpit-server",
		LabelBinaryDigest: digest.FromBytes(bin).String(),
	} {
		if cfg.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Config.Labels[k], v)
		}
	}
	if len(cfg.History) != 2 || cfg.History[0].EmptyLayer || cfg.History[1].EmptyLayer || !strings.Contains(cfg.History[1].CreatedBy, "/usr/local/bin/sandpit") {
		t.Errorf("history %+v; want one entry per layer, the second adding the binary", cfg.History)
	}

	// Again: the same bytes, from the cache.
	var again bytes.Buffer
	if err := b.ExportServer(t.Context(), binPath, ServerRef, &again); err != nil {
		t.Fatalf("second ExportServer: %v", err)
	}
	if !bytes.Equal(again.Bytes(), archive) {
		t.Errorf("a second export differs from the first (%d and %d bytes)", again.Len(), len(archive))
	}
	if *calls != 1 {
		t.Errorf("debootstrap ran %d times; want 1 (the second export uses the cache)", *calls)
	}

	// Another name: only the index (and its annotations) change.
	var renamed bytes.Buffer
	if err := b.ExportServer(t.Context(), binPath, "registry.example.com/sandpit:v1", &renamed); err != nil {
		t.Fatal(err)
	}
	var idx2 ocispec.Index
	for _, f := range readTar(t, &renamed) {
		if f.hdr.Name == ocispec.ImageIndexFile {
			if err := json.Unmarshal(f.data, &idx2); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(idx2.Manifests) != 1 || idx2.Manifests[0].Digest != mDesc.Digest || idx2.Manifests[0].Annotations["io.containerd.image.name"] != "registry.example.com/sandpit:v1" {
		t.Errorf("renamed export's index = %+v; want the same manifest %s under the new name", idx2, mDesc.Digest)
	}
}

// failingWriter accepts n bytes, then fails: a full disk, a closed pipe.
type failingWriter struct{ n int }

var errWrite = errors.New("no space left on device")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		n := w.n
		w.n = 0
		return n, errWrite
	}
	w.n -= len(p)
	return len(p), nil
}

// An export refused before any work says why, writes nothing and, for a
// bad name or binary, runs no debootstrap: that takes minutes.
func TestExportServerRefused(t *testing.T) {
	other := elf.EM_X86_64
	if goruntime.GOARCH == "amd64" {
		other = elf.EM_AARCH64
	}
	tests := []struct {
		name      string
		binary    func(t *testing.T) string
		ref       string
		out       io.Writer
		damage    bool // corrupt the cached rootfs first
		wantErr   error
		wantBuild bool
		wantIn    string // in the error's text
	}{
		{name: "missing binary", binary: func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") },
			wantErr: fs.ErrNotExist, wantIn: "server binary"},
		{name: "binary is a directory", binary: func(t *testing.T) string { return t.TempDir() }, wantErr: ErrServerBinary},
		{name: "binary is a script", binary: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "sandpit")
			if err := os.WriteFile(p, []byte("#!/bin/sh\nexec sandpit \"$@\"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}, wantErr: ErrServerBinary, wantIn: "not an ELF executable"},
		{name: "binary for another architecture", binary: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "sandpit")
			if err := os.WriteFile(p, fakeELF(t, other, []byte("x")), 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}, wantErr: ErrServerBinary, wantIn: "built for " + other.String()},
		{name: "short name", ref: "sandpit:dev", wantErr: ErrInvalidRef, wantIn: "docker.io/library/sandpit:dev"},
		{name: "output fails", out: &failingWriter{n: 4096}, wantErr: errWrite, wantBuild: true},
		{name: "damaged cache", damage: true, wantErr: nil, wantBuild: true, wantIn: "does not match its digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, calls := serverBuilder(t)
			binPath, _ := writeBinary(t)
			if tt.binary != nil {
				binPath = tt.binary(t)
			}
			ref := ServerRef
			if tt.ref != "" {
				ref = tt.ref
			}
			if tt.damage {
				if err := b.ExportServer(t.Context(), binPath, ref, io.Discard); err != nil {
					t.Fatal(err)
				}
				e, _ := lookup(b.CacheDir, ServerRecipe().Key())
				f, err := os.OpenFile(e.layerPath(), os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("X"), 1000); err != nil { // same size: lookup still takes it
					t.Fatal(err)
				}
				f.Close()
			}
			var buf bytes.Buffer
			out := tt.out
			if out == nil {
				out = &buf
			}
			err := b.ExportServer(t.Context(), binPath, ref, out)
			if err == nil {
				t.Fatal("ExportServer succeeded")
			}
			t.Log(sandpit.Describe(err))
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("ExportServer = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("ExportServer = %q, want it to say %q", err, tt.wantIn)
			}
			if tt.damage && sandpit.HintOf(err) == "" {
				t.Errorf("a damaged cache gives no hint: %v", err)
			}
			if !tt.wantBuild && !tt.damage {
				if buf.Len() != 0 {
					t.Errorf("wrote %d bytes before refusing", buf.Len())
				}
				if *calls != 0 {
					t.Errorf("debootstrap ran before the export was refused")
				}
			}
		})
	}
}

func TestLayerIndexResolve(t *testing.T) {
	x := layerIndex{
		"lib":                          {typ: tar.TypeSymlink, link: "usr/lib"},
		"lib64":                        {typ: tar.TypeSymlink, link: "usr/lib64"},
		"usr":                          {typ: tar.TypeDir},
		"usr/lib":                      {typ: tar.TypeDir},
		"usr/lib64":                    {typ: tar.TypeDir},
		"usr/lib64/ld.so":              {typ: tar.TypeSymlink, link: "/lib/x/ld.so"},
		"usr/lib/x":                    {typ: tar.TypeDir},
		"usr/lib/x/ld.so":              {typ: tar.TypeReg},
		"usr/lib/x/libc.so.6":          {typ: tar.TypeReg},
		"usr/lib/x/libz.so.1":          {typ: tar.TypeSymlink, link: "libz.so.1.2"},
		"usr/lib/x/libz.so.1.2":        {typ: tar.TypeLink, link: "usr/lib/x/libz-copy"},
		"usr/lib/x/libz-copy":          {typ: tar.TypeReg},
		"usr/lib/x/escape":             {typ: tar.TypeSymlink, link: "../../../../../usr/lib/x/libc.so.6"},
		"usr/lib/x/loop":               {typ: tar.TypeSymlink, link: "loop"},
		"usr/lib/x/dangling":           {typ: tar.TypeSymlink, link: "gone"},
		"usr/lib/x/dir":                {typ: tar.TypeSymlink, link: "."},
		"usr/lib/x/libc.so.6-unstated": {typ: tar.TypeFifo},
	}
	tests := []struct {
		path, want string
	}{
		{"/lib/x/libc.so.6", "usr/lib/x/libc.so.6"},
		{"/lib64/ld.so", "usr/lib/x/ld.so"},
		{"lib/x/libz.so.1", "usr/lib/x/libz-copy"},
		{"/usr/lib/x/escape", "usr/lib/x/libc.so.6"}, // .. stops at the root, as in a chroot
		{"/usr/lib/x/dir/dir/libc.so.6", "usr/lib/x/libc.so.6"},
		{"/usr/lib/x/loop", ""},
		{"/usr/lib/x/dangling", ""},
		{"/usr/lib/x", ""}, // a directory is no library
		{"/usr/lib/x/libc.so.6-unstated", ""},
		{"/usr/lib/x/libc.so.7", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, ok := x.resolve(tt.path)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("resolve(%q) = %q, %v; want %q", tt.path, got, ok, tt.want)
			}
		})
	}
}

// hostLinkage lists what a dynamic host program needs: its loader and
// the host files of its libraries. It skips when there is none to use.
func hostLinkage(t *testing.T) (prog, interp string, libs map[string]string) {
	t.Helper()
	a, ok := archs[goruntime.GOARCH]
	if !ok {
		t.Skipf("no multiarch directory known for %s", goruntime.GOARCH)
	}
	for _, p := range []string{"/usr/bin/true", "/bin/true"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		interp, err = interpreter(f)
		needed, _ := f.ImportedLibraries()
		if err != nil || interp == "" || len(needed) == 0 {
			continue
		}
		libs = map[string]string{}
		for _, name := range needed {
			for _, dir := range []string{"/lib/" + a.triplet, "/usr/lib/" + a.triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
				if real, err := filepath.EvalSymlinks(filepath.Join(dir, name)); err == nil {
					libs[name] = real
					break
				}
			}
			if libs[name] == "" {
				t.Skipf("%s needs %s, not found on this host", p, name)
			}
		}
		return p, interp, libs
	}
	t.Skip("no dynamically linked true(1) on this host to check against")
	return
}

// checkLinkage against a merged-/usr rootfs holding the host's own
// libraries, and against rootfs that lack one or hold an older one.
func TestCheckLinkage(t *testing.T) {
	prog, interp, libs := hostLinkage(t)
	if _, ok := libs["libc.so.6"]; !ok {
		t.Skipf("%s does not need libc.so.6 (needs %v)", prog, libs)
	}
	triplet := archs[goruntime.GOARCH].triplet
	realInterp, err := filepath.EvalSymlinks(interp)
	if err != nil {
		t.Skipf("host loader %s: %v", interp, err)
	}
	copyFile := func(t *testing.T, src, dst string) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		change  func(t *testing.T, root string)
		wantErr string
	}{
		{"the host's own libraries", func(t *testing.T, root string) {}, ""},
		{"no loader", func(t *testing.T, root string) {
			if err := os.Remove(filepath.Join(root, interp)); err != nil {
				t.Fatal(err)
			}
		}, "loader " + interp},
		{"a library missing", func(t *testing.T, root string) {
			if err := os.Remove(filepath.Join(root, "usr/lib", triplet, "libc.so.6")); err != nil {
				t.Fatal(err)
			}
		}, "needs libc.so.6, which the image does not have"},
		{"a library that defines no version", func(t *testing.T, root string) {
			if err := os.WriteFile(filepath.Join(root, "usr/lib", triplet, "libc.so.6"), []byte("not a library"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "GLIBC_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			// Merged /usr, as Debian's: /lib is a link to usr/lib, and the
			// loader's path goes through it.
			if err := os.MkdirAll(filepath.Join(root, "usr/lib", triplet), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
				t.Fatal(err)
			}
			for name, src := range libs {
				copyFile(t, src, filepath.Join(root, "usr/lib", triplet, name))
			}
			loader := filepath.Join("/usr/lib", triplet, filepath.Base(realInterp))
			copyFile(t, realInterp, filepath.Join(root, loader))
			if _, err := os.Lstat(filepath.Join(root, interp)); err != nil {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, interp)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(loader, filepath.Join(root, interp)); err != nil {
					t.Fatal(err)
				}
			}
			tt.change(t, root)
			layerPath := filepath.Join(t.TempDir(), "layer.tar")
			if _, _, err := writeLayer(t.Context(), root, layerPath); err != nil {
				t.Fatal(err)
			}
			layer, err := os.Open(layerPath)
			if err != nil {
				t.Fatal(err)
			}
			defer layer.Close()
			bin, err := elf.Open(prog)
			if err != nil {
				t.Fatal(err)
			}
			defer bin.Close()
			err = checkLinkage(bin, layer)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("checkLinkage(%s) = %v, want nil", prog, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrServerBinary)):
				t.Errorf("checkLinkage(%s) = %v, want ErrServerBinary saying %q", prog, err, tt.wantErr)
			}
		})
	}
}

// A static binary needs nothing from the rootfs.
func TestCheckLinkageStatic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "static")
	if err := os.WriteFile(p, fakeELF(t, elf.EM_X86_64, nil), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	empty, err := os.Create(filepath.Join(t.TempDir(), "layer.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if err := checkLinkage(bin, empty); err != nil {
		t.Errorf("checkLinkage(static) = %v", err)
	}
}
