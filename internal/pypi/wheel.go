package pypi

import (
	"archive/zip"
	"cmp"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/csv"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/artifact"
)

// WheelLimits bound CheckWheel. Zero fields take the defaults.
type WheelLimits struct {
	MaxEntries int   // entries in the archive; default 50,000
	MaxBytes   int64 // uncompressed bytes of all entries; default 2 GiB
	// MaxRatio is the largest uncompressed:compressed ratio of an entry
	// over RatioFloor bytes; default 200 (zip bombs reach thousands).
	MaxRatio   int64
	RatioFloor int64 // default 1 MiB: small files may compress as they like
	// MaxFileBytes bounds the archive file itself; default 512 MiB.
	MaxFileBytes int64
}

const (
	maxRecordBytes = 16 << 20
)

func (l WheelLimits) entries() int    { return orDefault(l.MaxEntries, 50_000) }
func (l WheelLimits) bytes() int64    { return orDefault(l.MaxBytes, 2<<30) }
func (l WheelLimits) ratio() int64    { return orDefault(l.MaxRatio, 200) }
func (l WheelLimits) floor() int64    { return orDefault(l.RatioFloor, 1<<20) }
func (l WheelLimits) fileSize() int64 { return orDefault(l.MaxFileBytes, DefaultMaxArtifactBytes) }

// CheckWheel is WheelLimits{}.Check.
func CheckWheel(path string) error { return WheelLimits{}.Check(path) }

// Check refuses the wheel at file (ErrUnsafeWheel, or ErrTooLarge for a
// bound) unless every entry is safe to unpack and matches RECORD:
//
//   - names are relative, clean UTF-8 paths: no leading "/", no drive
//     letter, no "." or ".." or empty components, no backslash, no control
//     characters, at most 1,024 bytes;
//   - every entry is a regular file or a directory (no symlinks, devices,
//     FIFOs, whatever the external attributes say);
//   - no name repeats, and no file is also a directory of another entry;
//   - entries' data do not overlap (an overlapping-entry zip bomb);
//   - entry count, total uncompressed bytes and per-entry compression
//     ratio are within the limits, counted while reading, not as declared;
//   - exactly one top-level {name}-{version}.dist-info holds METADATA,
//     WHEEL and RECORD; when the file is named as a wheel, they agree;
//   - RECORD lists every file but itself (and its signatures) once, with
//     a sha256, sha384 or sha512 hash and, when given, the size that the
//     file's bytes have, and lists nothing the archive lacks.
func (l WheelLimits) Check(file string) error { return l.CheckNamed(file, filepath.Base(file)) }

// CheckNamed is Check of a wheel stored under another name (a cache entry
// named by its hash) that must be the wheel filename: its .dist-info must
// then be that wheel's name and version.
func (l WheelLimits) CheckNamed(file, filename string) error {
	w, err := l.inspect(file, filename)
	if err != nil {
		return err
	}
	defer w.zr.Close()
	return w.each(l.bytes(), func(string, *zip.File) (io.Writer, error) { return io.Discard, nil })
}

// inspected is a wheel whose structure passed the checks; its contents
// are verified against RECORD by each.
type inspected struct {
	name     string
	zr       *zip.ReadCloser
	files    map[string]*zip.File
	dirs     []string // explicit directory entries
	rows     map[string]recordRow
	unlisted map[string]bool // RECORD and its signatures
}

func (w *inspected) bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrUnsafeWheel, w.name, fmt.Sprintf(format, a...))
}

// inspect runs every check that needs no file contents but RECORD's.
func (l WheelLimits) inspect(file, filename string) (_ *inspected, err error) {
	w := &inspected{name: filename, files: map[string]*zip.File{}}
	bad := w.bad
	st, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("wheel check: %w", err)
	}
	if st.Size() > l.fileSize() {
		return nil, limitf("", "%s is %d bytes, over the %d-byte limit", w.name, st.Size(), l.fileSize())
	}
	zr, err := zip.OpenReader(file)
	if err != nil {
		return nil, bad("not a readable zip archive: %v", err)
	}
	defer func() {
		if err != nil {
			zr.Close()
		}
	}()
	w.zr = zr
	if len(zr.File) > l.entries() {
		return nil, limitf("", "%s has %d entries, over the %d-entry limit", w.name, len(zr.File), l.entries())
	}

	files := w.files
	dirs := map[string]bool{}       // every directory, named or implied
	dirEntries := map[string]bool{} // directories the archive names
	var declared uint64
	for _, f := range zr.File {
		if err := artifact.CheckEntryName(f.Name); err != nil {
			return nil, bad("entry %q: %v", f.Name, err)
		}
		mode := f.Mode()
		unixType := (f.ExternalAttrs >> 16) & 0o170000
		isDir := strings.HasSuffix(f.Name, "/")
		switch {
		case mode&fs.ModeSymlink != 0 || unixType == 0o120000:
			return nil, bad("entry %q is a symbolic link", f.Name)
		case unixType != 0 && unixType != 0o100000 && unixType != 0o040000,
			mode.Type()&^fs.ModeDir != 0:
			return nil, bad("entry %q is not a regular file or directory (mode %o)", f.Name, f.ExternalAttrs>>16)
		}
		clean := strings.TrimSuffix(f.Name, "/")
		if _, dup := files[clean]; dup || dirEntries[clean] {
			return nil, bad("entry %q appears twice", f.Name)
		}
		for d := path.Dir(clean); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		if isDir || mode.IsDir() {
			dirs[clean], dirEntries[clean] = true, true
			w.dirs = append(w.dirs, clean)
			continue
		}
		files[clean] = f
		declared += f.UncompressedSize64
		if declared > uint64(l.bytes()) {
			return nil, limitf("", "%s unpacks to over %d bytes", w.name, l.bytes())
		}
		if f.UncompressedSize64 > uint64(l.floor()) && f.UncompressedSize64/max(f.CompressedSize64, 1) > uint64(l.ratio()) {
			return nil, bad("entry %q compresses %d bytes to %d, a ratio over %d:1 (a zip bomb?)", f.Name, f.UncompressedSize64, f.CompressedSize64, l.ratio())
		}
	}
	for f := range files {
		if dirs[f] {
			return nil, bad("%q is both a file and a directory", f)
		}
	}
	if err := checkOverlap(zr.File); err != nil {
		return nil, bad("%v", err)
	}

	distInfo, err := findDistInfo(files, dirs, w.name)
	if err != nil {
		return nil, bad("%v", err)
	}
	record := distInfo + "/RECORD"
	w.rows, err = readRecord(files[record])
	if err != nil {
		return nil, bad("%s: %v", record, err)
	}
	w.unlisted = map[string]bool{record: true, distInfo + "/RECORD.jws": true, distInfo + "/RECORD.p7s": true}
	for p := range files {
		if _, ok := w.rows[p]; !ok && !w.unlisted[p] {
			return nil, bad("%q is not listed in RECORD", p)
		}
	}
	var missing []string
	for p := range w.rows {
		if files[p] == nil && !w.unlisted[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, bad("RECORD lists %q, which the archive lacks", missing[0])
	}
	return w, nil
}

// each reads every file in name order into the writer open returns,
// checking it against its RECORD row; budget bounds the bytes read.
func (w *inspected) each(budget int64, open func(name string, f *zip.File) (io.Writer, error)) error {
	names := make([]string, 0, len(w.files))
	for p := range w.files {
		names = append(names, p)
	}
	slices.Sort(names)
	var total int64
	for _, p := range names {
		f := w.files[p]
		dst, err := open(p, f)
		if err != nil {
			return err
		}
		var n int64
		if w.unlisted[p] {
			n, err = copyEntry(f, dst, budget-total)
		} else {
			n, err = checkEntryHash(f, w.rows[p], budget-total, dst)
		}
		total += n
		if c, ok := dst.(io.Closer); ok {
			if cerr := c.Close(); err == nil && cerr != nil {
				return fmt.Errorf("unpacking %s: %w", w.name, cerr)
			}
		}
		if err != nil {
			if isClassed(err) {
				return err
			}
			return w.bad("%q: %v", p, err)
		}
	}
	return nil
}

// Extract checks the wheel at file as Check does and unpacks it, as it
// is, into dir, which must be empty. It writes through an os.Root of dir,
// so no name, whatever it holds, reaches outside; files are created new
// (never through an existing one), 0644 or 0755 when the archive marks
// them executable, and each is hashed while written and compared with
// RECORD. On any failure dir is emptied again.
func (l WheelLimits) Extract(file, dir string) (err error) {
	w, err := l.inspect(file, filepath.Base(file))
	if err != nil {
		return err
	}
	defer w.zr.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("unpacking %s: %w", w.name, err)
	}
	defer root.Close()
	if ents, err := fs.ReadDir(root.FS(), "."); err != nil || len(ents) > 0 {
		return sandpit.Newf(sandpit.ErrInvalidArgument, "unpacking %s: the target directory is not empty", w.name)
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
	for _, d := range w.dirs {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("unpacking %s: %w", w.name, err)
		}
	}
	return w.each(l.bytes(), func(name string, f *zip.File) (io.Writer, error) {
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("unpacking %s: %w", w.name, err)
			}
		}
		perm := fs.FileMode(0o644)
		if f.Mode()&0o111 != 0 {
			perm = 0o755
		}
		out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return nil, fmt.Errorf("unpacking %s: %w", w.name, err)
		}
		return out, nil
	})
}

// ExtractWheel is WheelLimits{}.Extract.
func ExtractWheel(file, dir string) error { return WheelLimits{}.Extract(file, dir) }

// checkOverlap refuses entries whose compressed data overlap: a normal
// archive stores each entry's data once, after its own local header.
func checkOverlap(fs []*zip.File) error {
	type span struct {
		start, end int64
		name       string
	}
	spans := make([]span, 0, len(fs))
	for _, f := range fs {
		off, err := f.DataOffset()
		if err != nil {
			return fmt.Errorf("entry %q: %v", f.Name, err)
		}
		spans = append(spans, span{off, off + int64(f.CompressedSize64), f.Name})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end || spans[i].start == spans[i-1].start {
			return fmt.Errorf("entries %q and %q overlap", spans[i-1].name, spans[i].name)
		}
	}
	return nil
}

// findDistInfo finds the one top-level .dist-info directory holding
// METADATA, WHEEL and RECORD; when wheelName parses as a wheel filename,
// the directory's name and version must be the wheel's.
func findDistInfo(files map[string]*zip.File, dirs map[string]bool, wheelName string) (string, error) {
	var found []string
	for d := range dirs {
		if !strings.Contains(d, "/") && strings.HasSuffix(d, ".dist-info") {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%d top-level .dist-info directories, not one", len(found))
	}
	d := found[0]
	for _, f := range []string{"METADATA", "WHEEL", "RECORD"} {
		if files[d+"/"+f] == nil {
			return "", fmt.Errorf("%s has no %s", d, f)
		}
	}
	if w, err := ParseWheelFilename(wheelName); err == nil {
		stem := strings.TrimSuffix(d, ".dist-info")
		i := strings.LastIndexByte(stem, '-')
		if i <= 0 {
			return "", fmt.Errorf("%s is not {name}-{version}.dist-info", d)
		}
		v, err := ParseVersion(stem[i+1:])
		if err != nil || Normalize(stem[:i]) != w.Name || !v.Equal(w.Version) {
			return "", fmt.Errorf("%s does not belong to %s %s", d, w.Name, w.Version)
		}
	}
	return d, nil
}

type recordRow struct {
	algo, digest string
	size         int64 // -1 when not given
}

func readRecord(f *zip.File) (map[string]recordRow, error) {
	if f.UncompressedSize64 > maxRecordBytes {
		return nil, fmt.Errorf("over %d bytes", maxRecordBytes)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxRecordBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRecordBytes {
		return nil, fmt.Errorf("over %d bytes", maxRecordBytes)
	}
	cr := csv.NewReader(strings.NewReader(string(b)))
	cr.FieldsPerRecord = -1
	rows := map[string]recordRow{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(rec) == 0 || (len(rec) == 1 && rec[0] == "") {
			continue
		}
		if len(rec) != 3 {
			return nil, fmt.Errorf("a row of %d fields, not 3 (path,hash,size)", len(rec))
		}
		p := rec[0]
		if err := artifact.CheckEntryName(p); err != nil {
			return nil, fmt.Errorf("row %q: %v", p, err)
		}
		if _, dup := rows[p]; dup {
			return nil, fmt.Errorf("%q is listed twice", p)
		}
		row := recordRow{size: -1}
		if rec[1] != "" {
			algo, digest, ok := strings.Cut(rec[1], "=")
			if !ok {
				return nil, fmt.Errorf("row %q: hash %q is not algorithm=digest", p, rec[1])
			}
			row.algo, row.digest = algo, digest
		}
		if rec[2] != "" {
			n, err := strconv.ParseInt(rec[2], 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("row %q: size %q is not a number", p, rec[2])
			}
			row.size = n
		}
		rows[p] = row
	}
	return rows, nil
}

// checkEntryHash copies f (at most budget bytes) to dst, comparing it
// with its RECORD row; it returns the bytes read.
func checkEntryHash(f *zip.File, row recordRow, budget int64, dst io.Writer) (int64, error) {
	var h hash.Hash
	switch row.algo {
	case "sha256":
		h = sha256.New()
	case "sha384":
		h = sha512.New384()
	case "sha512":
		h = sha512.New()
	case "":
		return 0, fmt.Errorf("RECORD gives no hash for it")
	default:
		return 0, fmt.Errorf("RECORD hashes it with %q; only sha256, sha384 and sha512 are accepted", row.algo)
	}
	rc, err := f.Open()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.Copy(io.MultiWriter(h, dst), io.LimitReader(rc, budget+1))
	if err != nil {
		return n, err
	}
	if n > budget {
		return n, limitf("", "the wheel unpacks to more bytes than allowed")
	}
	if row.size >= 0 && n != row.size {
		return n, fmt.Errorf("RECORD says %d bytes, it has %d", row.size, n)
	}
	if got := base64.RawURLEncoding.EncodeToString(h.Sum(nil)); got != strings.TrimRight(row.digest, "=") {
		return n, fmt.Errorf("RECORD says %s=%s, its bytes hash to %s", row.algo, row.digest, got)
	}
	return n, nil
}

// copyEntry copies a file RECORD does not hash (RECORD itself).
func copyEntry(f *zip.File, dst io.Writer, budget int64) (int64, error) {
	rc, err := f.Open()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.Copy(dst, io.LimitReader(rc, budget+1))
	if err == nil && n > budget {
		err = limitf("", "the wheel unpacks to more bytes than allowed")
	}
	return n, err
}
