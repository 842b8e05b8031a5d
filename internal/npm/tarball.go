package npm

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/artifact"
)

// TarLimits bound CheckTarball and ExtractTarball. Zero fields take the
// defaults.
type TarLimits struct {
	MaxEntries int   // entries in the archive; default 50,000
	MaxBytes   int64 // bytes of all files once unpacked; default 512 MiB
	// MaxRatio is the largest decompressed:compressed ratio of the whole
	// tar stream once it is over RatioFloor bytes; default 200 (gzip bombs
	// reach 1000:1).
	MaxRatio   int64
	RatioFloor int64 // default 1 MiB: a small package may compress as it likes
	// MaxFileBytes bounds the .tgz file itself; default 512 MiB.
	MaxFileBytes int64
}

func (l TarLimits) entries() int    { return orDefault(l.MaxEntries, 50_000) }
func (l TarLimits) bytes() int64    { return orDefault(l.MaxBytes, 512<<20) }
func (l TarLimits) ratio() int64    { return orDefault(l.MaxRatio, 200) }
func (l TarLimits) floor() int64    { return orDefault(l.RatioFloor, 1<<20) }
func (l TarLimits) fileSize() int64 { return orDefault(l.MaxFileBytes, DefaultMaxArtifactBytes) }

// streamBytes bounds the decompressed stream: the files, plus a header
// and padding per entry, plus the end blocks.
func (l TarLimits) streamBytes() int64 { return l.bytes() + int64(l.entries()+2)*1024 + 10240 }

// CheckTarball refuses the tarball at file (ErrUnsafeTarball, or
// ErrTooLarge for a bound) unless it is a gzip'd tar that is safe to
// unpack with its top directory stripped:
//
//   - every entry is under one top directory ("package/" as npm packs,
//     or another name), which is stripped; there is a package.json in it;
//   - names (after any PAX or GNU long-name header, as the reader applies
//     them) are relative, clean UTF-8 paths: no leading "/", no "." or
//     ".." or empty components, no backslash, no control characters, at
//     most 1,024 bytes;
//   - every entry is a regular file or a directory: no symbolic or hard
//     links, devices, FIFOs or sparse files; a global PAX header may carry
//     a comment (git archive writes one) and nothing else;
//   - no name repeats, and no file is also a directory of another entry;
//   - entries, unpacked bytes and the decompressed stream are within the
//     limits, counted while reading, not as declared, and the stream's
//     compression ratio stays under MaxRatio.
func CheckTarball(file string, limits TarLimits) error {
	return limits.walk(file, func(string, *tar.Header, io.Reader) error { return nil })
}

// bombReader counts decompressed bytes and stops a gzip bomb as it
// inflates, not after.
type bombReader struct {
	r          io.Reader
	n, max     int64
	compressed int64
	l          TarLimits
	name       string
}

func (b *bombReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		return n, limitf("", "%s decompresses to over %d bytes", b.name, b.max)
	}
	if b.n > b.l.floor() && b.n/max(b.compressed, 1) > b.l.ratio() {
		return n, fmt.Errorf("%w: %s: it decompresses over %d:1 (%d bytes from %d; a gzip bomb?)", ErrUnsafeTarball, b.name, b.l.ratio(), b.n, b.compressed)
	}
	return n, err
}

// walk checks every entry and hands it to visit, its name stripped of the
// top directory, with its bytes (nil for a directory). A name visit sees
// has passed every check but those that need later entries: Extract runs
// walk twice.
func (l TarLimits) walk(file string, visit func(name string, h *tar.Header, r io.Reader) error) error {
	name := filepath.Base(file)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrUnsafeTarball, name, fmt.Sprintf(format, a...))
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("tarball check: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("tarball check: %w", err)
	}
	if st.Size() > l.fileSize() {
		return limitf("", "%s is %d bytes, over the %d-byte limit", name, st.Size(), l.fileSize())
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		return bad("not a gzip stream: %v", err)
	}
	br := &bombReader{r: zr, max: l.streamBytes(), compressed: st.Size(), l: l, name: name}
	tr := tar.NewReader(br)
	top := ""
	files := map[string]bool{} // stripped names of files
	dirs := map[string]bool{}  // stripped names of directories, named or implied
	namedDirs := map[string]bool{}
	var entries int
	var total int64
	hasManifest := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if isClassed(err) {
				return err
			}
			return bad("not a readable tar archive: %v", err)
		}
		entries++
		if entries > l.entries() {
			return limitf("", "%s has over %d entries", name, l.entries())
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeXGlobalHeader:
			for k := range h.PAXRecords {
				if k != "comment" {
					return bad("a global PAX header sets %q; only a comment is accepted", k)
				}
			}
			continue
		case tar.TypeSymlink:
			return bad("entry %q is a symbolic link", h.Name)
		case tar.TypeLink:
			return bad("entry %q is a hard link", h.Name)
		default:
			return bad("entry %q is not a regular file or directory (type %q)", h.Name, h.Typeflag)
		}
		if h.Linkname != "" {
			return bad("entry %q names a link target", h.Name)
		}
		if err := artifact.CheckEntryName(h.Name); err != nil {
			return bad("entry %q: %v", h.Name, err)
		}
		clean := strings.TrimSuffix(h.Name, "/")
		first, rest, _ := strings.Cut(clean, "/")
		if top == "" {
			top = first
		}
		if first != top {
			return bad("entry %q is outside the top directory %q", h.Name, top)
		}
		isDir := h.Typeflag == tar.TypeDir
		if rest == "" {
			if !isDir {
				return bad("entry %q is a file where the top directory should be", h.Name)
			}
			continue
		}
		switch {
		case isDir && files[rest] || !isDir && dirs[rest]:
			return bad("%q is both a file and a directory", h.Name)
		case files[rest] || isDir && namedDirs[rest]:
			return bad("entry %q appears twice", h.Name)
		}
		for d := path.Dir(rest); d != "."; d = path.Dir(d) {
			if files[d] {
				return bad("%q is both a file and a directory", top+"/"+d)
			}
			dirs[d] = true
		}
		if isDir {
			namedDirs[rest], dirs[rest] = true, true
			if err := visit(rest, h, nil); err != nil {
				return err
			}
			continue
		}
		files[rest] = true
		if rest == "package.json" {
			hasManifest = true
		}
		if h.Size < 0 || total+h.Size > l.bytes() {
			return limitf("", "%s unpacks to over %d bytes", name, l.bytes())
		}
		total += h.Size
		cr := &countReader{r: tr}
		if err := visit(rest, h, cr); err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, cr); err != nil { // what visit left
			if isClassed(err) {
				return err
			}
			return bad("entry %q: %v", h.Name, err)
		}
		if cr.n != h.Size {
			return bad("entry %q holds %d bytes, its header says %d", h.Name, cr.n, h.Size)
		}
	}
	if top == "" {
		return bad("the archive is empty")
	}
	if !hasManifest {
		return bad("there is no %s/package.json: it is not an npm package", top)
	}
	return nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ExtractTarball checks the tarball at file as CheckTarball does and
// unpacks it, its top directory stripped, into dir, which must be empty.
// It writes through an os.Root of dir, so no name, whatever it holds,
// reaches outside; files are created new (never through an existing one),
// 0644, or 0755 when the archive marks them executable by their owner;
// directories 0755. No owner, time or special bit is kept. On any failure
// dir is emptied again. It is the reference for the sandbox's unpacking.
func ExtractTarball(file, dir string, limits TarLimits) (err error) {
	if err := CheckTarball(file, limits); err != nil {
		return err
	}
	name := filepath.Base(file)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("unpacking %s: %w", name, err)
	}
	defer root.Close()
	if ents, err := fs.ReadDir(root.FS(), "."); err != nil || len(ents) > 0 {
		return sandpit.Newf(sandpit.ErrInvalidArgument, "unpacking %s: the target directory is not empty", name)
	}
	defer func() {
		if err == nil {
			return
		}
		ents, _ := fs.ReadDir(root.FS(), ".")
		for _, e := range ents {
			root.RemoveAll(e.Name())
		}
	}()
	return limits.walk(file, func(rest string, h *tar.Header, r io.Reader) error {
		if r == nil {
			if err := root.MkdirAll(rest, 0o755); err != nil {
				return fmt.Errorf("unpacking %s: %w", name, err)
			}
			return nil
		}
		if d := path.Dir(rest); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("unpacking %s: %w", name, err)
			}
		}
		perm := fs.FileMode(0o644)
		if h.Mode&0o100 != 0 {
			perm = 0o755
		}
		out, err := root.OpenFile(rest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return fmt.Errorf("unpacking %s: %w", name, err)
		}
		_, err = io.Copy(out, r)
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil && !isClassed(err) {
			return fmt.Errorf("unpacking %s: %w", name, err)
		}
		return err
	})
}
