package images

import (
	"archive/tar"
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/distribution/reference"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandpit-dev/sandpit"
)

// ServerRef is the name of sandpit's own image: the one the node agents
// and front doors of scripts/kubernetes run.
const ServerRef = "sandpit.local/sandpit:dev"

// ServerBinary is where the server image holds the sandpit binary; it is
// the image's entrypoint.
const ServerBinary = "/usr/local/bin/sandpit"

// LabelBinaryDigest holds the sha256 digest of the sandpit binary a server
// image carries, so a node's image can be matched to the build it came from.
const LabelBinaryDigest = "org.sandpit.binary.digest"

var (
	// ErrInvalidRef: an image name a runtime would store under another name.
	ErrInvalidRef = sandpit.Define(sandpit.ErrInvalidArgument, "invalid image name")
	// ErrServerBinary: the binary cannot run in the server image.
	ErrServerBinary = sandpit.Define(sandpit.ErrInvalidArgument, "unusable server binary")
)

// ServerRecipe is the rootfs of sandpit's own image. It serves no language,
// so it is not in the catalog (whose images are sandboxes'). Its packages
// are only what the binary needs at run time: sandpit is a cgo binary
// (mattn/go-sqlite3) that ldd shows linked against glibc alone, and it
// execs cat (store/workspace's id map); debootstrap's minbase already has
// libc6, coreutils and bash. ca-certificates is there because a front door
// asks an OAuth issuer for its keys over TLS.
func ServerRecipe() Recipe {
	return Recipe{
		Name:     "sandpit-server",
		Ref:      ServerRef,
		Suite:    "bookworm",
		Packages: []string{"ca-certificates"},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8",
		},
	}
}

// reproducible is the time written into the binary's layer and the
// archive's headers, so that the same binary gives the same bytes whenever
// and wherever it is exported (as SOURCE_DATE_EPOCH=0 would).
var reproducible = time.Unix(0, 0).UTC()

// ExportServer writes sandpit's own image, named ref, to w as an OCI image
// layout tar (oci-layout, index.json, blobs/sha256/...), which `ctr images
// import` reads. The image is ServerRecipe's rootfs, one uncompressed layer
// from the cache (built with debootstrap when missing, as Build does), and
// a second layer holding only binary at ServerBinary. No containerd is
// involved: the Builder needs no Client.
//
// Before writing anything it checks that binary can run there: an ELF
// executable for this architecture whose loader, libraries and symbol
// versions the rootfs has (a binary built against a newer glibc than
// bookworm's would fail only when a Pod starts). The same cached rootfs,
// binary and ref give the same bytes.
func (b *Builder) ExportServer(ctx context.Context, binary, ref string, w io.Writer) error {
	if err := checkRef(ref); err != nil {
		return err
	}
	bin, err := openBinary(binary)
	if err != nil {
		return err
	}
	defer bin.Close()
	r := ServerRecipe()
	r.Ref = ref
	if err := r.Validate(); err != nil {
		return err
	}
	e, err := b.rootfs(ctx, r, false)
	if err != nil {
		return err
	}
	layer, err := os.Open(e.layerPath())
	if err != nil {
		return fmt.Errorf("export %s: cached rootfs: %w", ref, err)
	}
	defer layer.Close()
	if err := checkLinkage(bin.elf, layer); err != nil {
		err = fmt.Errorf("server binary %s cannot run in image %s: %w", binary, ref, err)
		if errors.Is(err, ErrServerBinary) {
			err = sandpit.Hintf(err, "build sandpit on Debian %s, whose libraries the image has", r.Suite)
		}
		return err
	}

	// First pass: the binary's layer is written below in the same bytes,
	// but its digest and size must be in the manifest and the index, which
	// come first.
	binLayer, err := bin.layer(io.Discard)
	if err != nil {
		return fmt.Errorf("export %s: %w", ref, err)
	}
	cfg := serverConfig(r, e, binLayer)
	cfgBytes, cfgDesc, err := descriptorOf(ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		return fmt.Errorf("export %s: config: %w", ref, err)
	}
	rootDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: e.DiffID, Size: e.Size}
	binDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: binLayer.digest, Size: binLayer.size}
	m := manifest(cfgDesc, rootDesc, binDesc)
	mBytes, mDesc, err := descriptorOf(ocispec.MediaTypeImageManifest, m)
	if err != nil {
		return fmt.Errorf("export %s: manifest: %w", ref, err)
	}
	mDesc.Platform = &cfg.Platform
	mDesc.Annotations = map[string]string{
		// containerd names the image it imports after the first; OCI
		// tools read the second. The spec's grammar allows a full name
		// there, and a tag alone (what containerd's own export writes)
		// would leave them without the repository.
		"io.containerd.image.name": ref,
		ocispec.AnnotationRefName:  ref,
	}
	index := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{mDesc},
	}
	indexBytes, err := json.Marshal(index)
	if err != nil {
		return fmt.Errorf("export %s: index: %w", ref, err)
	}
	layoutBytes, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return fmt.Errorf("export %s: %w", ref, err)
	}

	// Small files first, then the layers in the manifest's order: a reader
	// that streams the archive knows what each blob is before it reads it.
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	files := []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layoutBytes},
		{ocispec.ImageIndexFile, indexBytes},
	}
	for _, f := range files {
		if err := writeEntry(tw, f.name, int64(len(f.data)), func(w io.Writer) error {
			_, err := w.Write(f.data)
			return err
		}); err != nil {
			return fmt.Errorf("export %s: %w", ref, err)
		}
	}
	for _, d := range []string{ocispec.ImageBlobsDir + "/", ocispec.ImageBlobsDir + "/sha256/"} {
		if err := tw.WriteHeader(dirHeader(d)); err != nil {
			return fmt.Errorf("export %s: %w", ref, err)
		}
	}
	blobs := []struct {
		desc  ocispec.Descriptor
		write func(w io.Writer) error
	}{
		{mDesc, func(w io.Writer) error { _, err := w.Write(mBytes); return err }},
		{cfgDesc, func(w io.Writer) error { _, err := w.Write(cfgBytes); return err }},
		{rootDesc, func(w io.Writer) error {
			_, err := io.Copy(w, io.NewSectionReader(layer, 0, e.Size))
			return err
		}},
		{binDesc, func(w io.Writer) error { _, err := bin.layer(w); return err }},
	}
	for _, blob := range blobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeBlob(tw, blob.desc, blob.write); err != nil {
			if blob.desc.Digest == e.DiffID {
				return sandpit.Hintf(fmt.Errorf("export %s: cached rootfs %s: %w", ref, e.layerPath(), err), "remove %s and export again to rebuild it", e.dir)
			}
			return fmt.Errorf("export %s: %w", ref, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("export %s: %w", ref, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export %s: %w", ref, err)
	}
	return nil
}

// checkRef accepts ref only in the form a container runtime stores it:
// Kubernetes looks "sandpit:dev" up as docker.io/library/sandpit:dev, so an
// image imported under the short name would never be found.
func checkRef(ref string) error {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %v: %w", ref, err, ErrInvalidRef)
	}
	if _, ok := named.(reference.Digested); ok {
		return sandpit.WithHint(fmt.Errorf("image name %q names a digest, which an archive cannot choose: %w", ref, ErrInvalidRef), "name it by a tag, e.g. "+ServerRef)
	}
	if named.String() != ref {
		return sandpit.Hintf(fmt.Errorf("image name %q is short for %s, the name a runtime stores and Kubernetes looks up: %w", ref, named, ErrInvalidRef), "name it %s", named)
	}
	return nil
}

// serverConfig is the OCI config of the server image: the recipe's config
// with the binary's layer on top and the binary as entrypoint.
func serverConfig(r Recipe, e entry, bin binaryLayer) ocispec.Image {
	cfg := imageConfig(r, e)
	cfg.Config.Entrypoint = []string{ServerBinary}
	cfg.Config.Labels[LabelBinaryDigest] = bin.sum.String()
	cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, bin.digest)
	cfg.History = append(cfg.History, ocispec.History{
		CreatedBy: "sandpit images server: add " + ServerBinary,
		Comment:   "sandpit binary " + bin.sum.String(),
	})
	return cfg
}

// serverBinary is the sandpit binary being exported: open once, so both passes
// over it read the same file even if the path is replaced meanwhile.
type serverBinary struct {
	f    *os.File
	elf  *elf.File
	size int64
}

// binaryLayer describes the layer that holds the binary.
type binaryLayer struct {
	digest digest.Digest // of the layer tar (uncompressed: also its diff ID)
	size   int64
	sum    digest.Digest // of the binary itself
}

// openBinary opens path and checks that it is an ELF executable for the
// architecture the image is built for.
func openBinary(p string) (*serverBinary, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("server binary: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("server binary: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("server binary %s is not a regular file: %w", p, ErrServerBinary)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("server binary %s is not an ELF executable (%v): %w", p, err, ErrServerBinary)
	}
	if err := checkELF(ef); err != nil {
		f.Close()
		return nil, fmt.Errorf("server binary %s: %w", p, err)
	}
	return &serverBinary{f: f, elf: ef, size: st.Size()}, nil
}

func (b *serverBinary) Close() error { return b.f.Close() }

// layer writes the binary's layer to w: the directories down to it, then
// the binary, owned by root, mode 0755, every time stamp the same. It
// returns what the layer's descriptor and labels need.
func (b *serverBinary) layer(w io.Writer) (binaryLayer, error) {
	layerHash, sumHash := digest.SHA256.Digester(), digest.SHA256.Digester()
	counter := &countingWriter{}
	tw := tar.NewWriter(io.MultiWriter(w, layerHash.Hash(), counter))
	dir := path.Dir(ServerBinary)[1:] // usr/local/bin
	var dirs []string
	for d := dir; d != "."; d = path.Dir(d) {
		dirs = append([]string{d + "/"}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(dirHeader(d)); err != nil {
			return binaryLayer{}, err
		}
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: ServerBinary[1:], Size: b.size, Mode: 0o755, ModTime: reproducible, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(h); err != nil {
		return binaryLayer{}, err
	}
	if _, err := io.Copy(tw, io.TeeReader(io.NewSectionReader(b.f, 0, b.size), sumHash.Hash())); err != nil {
		return binaryLayer{}, fmt.Errorf("server binary %s: %w", b.f.Name(), err)
	}
	if err := tw.Close(); err != nil {
		return binaryLayer{}, err
	}
	return binaryLayer{digest: layerHash.Digest(), size: counter.n, sum: sumHash.Digest()}, nil
}

// writeBlob writes blobs/sha256/<digest> with what write writes, and fails
// if that is not what desc describes: a cache file damaged, or a binary
// changed since the first pass.
func writeBlob(tw *tar.Writer, desc ocispec.Descriptor, write func(w io.Writer) error) error {
	name := path.Join(ocispec.ImageBlobsDir, desc.Digest.Algorithm().String(), desc.Digest.Encoded())
	v := desc.Digest.Verifier()
	if err := writeEntry(tw, name, desc.Size, func(w io.Writer) error { return write(io.MultiWriter(w, v)) }); err != nil {
		return fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	if !v.Verified() {
		return fmt.Errorf("blob %s: what was written does not match its digest (the file changed or is damaged)", desc.Digest)
	}
	return nil
}

// writeEntry writes a file of size bytes; write must write exactly that.
func writeEntry(tw *tar.Writer, name string, size int64, write func(w io.Writer) error) error {
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: reproducible, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	sw := &sizeWriter{w: tw, left: size}
	if err := write(sw); err != nil {
		return err
	}
	if sw.left != 0 {
		return fmt.Errorf("%s: %d bytes short of %d", name, sw.left, size)
	}
	return nil
}

// sizeWriter refuses to write past its size, with an error that says so
// rather than tar's.
type sizeWriter struct {
	w    io.Writer
	left int64
}

func (s *sizeWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > s.left {
		return 0, fmt.Errorf("content longer than its recorded size")
	}
	n, err := s.w.Write(p)
	s.left -= int64(n)
	return n, err
}

func dirHeader(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: reproducible, Format: tar.FormatUSTAR}
}
