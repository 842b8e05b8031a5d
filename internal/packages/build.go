package packages

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/npm"
	"github.com/sandpit-dev/sandpit/internal/pypi"
)

//go:embed install.py
var installScript []byte

// build is one layer being built: its verified artifacts linked into an
// artifacts dir, an empty staging dir, and what the layer must hold.
type build struct {
	lock      *Lock
	artifacts string // mounted read-only at ArtifactsDir
	staging   string // mounted read-write at EnvBuildDir
	want      map[string]int64
	steps     installSteps
	timeout   time.Duration
}

// installSteps is the install step's stdin.
type installSteps struct {
	Python     []pyStep `json:"python"`
	JavaScript []jsStep `json:"javascript"`
	// Lock is the lock text to write at /workspace/sandpit.lock; nil
	// writes none (a rebuild), "" removes it (nothing left installed).
	Lock *string `json:"lock"`
}

type pyStep struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	File    string `json:"file"`     // under ArtifactsDir
	DataDir string `json:"data_dir"` // "name-version.data/"
}

type jsStep struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	File    string `json:"file"`
	Path    string `json:"path"`
}

// prepare fetches what l needs (verified, from the cache when it holds
// it), checks every artifact and sets up the build's dirs. The caller
// cleans up.
func (m *Manager) prepare(ctx context.Context, l *Lock, have map[string]string) (_ *build, err error) {
	id := fmt.Sprintf("%d-%s", time.Now().UnixNano(), l.Digest()[:12])
	b := &build{
		lock:      l,
		artifacts: filepath.Join(m.cfg.Dir, "builds", id+"-artifacts"),
		staging:   filepath.Join(m.cfg.Dir, "builds", id+"-layer"),
		want:      map[string]int64{},
		timeout:   m.cfg.InstallTimeout,
	}
	defer func() {
		if err != nil {
			b.cleanup()
		}
	}()
	if err := os.Mkdir(b.artifacts, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []string{b.staging, filepath.Join(b.staging, "python"), filepath.Join(b.staging, "node_modules")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
		// The install step writes it as the sandbox user.
		if err := os.Lchown(d, int(m.cfg.Owner.UID), int(m.cfg.Owner.GID)); err != nil && os.Geteuid() == 0 {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(b.artifacts, "install.py"), installScript, 0o444); err != nil {
		return nil, err
	}
	var total int64
	for _, e := range l.Python {
		path, ok := have[e.SHA256]
		if !ok {
			f := pypi.File{Filename: e.Filename, URL: e.URL, SHA256: e.SHA256, Size: e.Size, Kind: pypi.KindWheel}
			if path, err = m.cfg.Cache.Fetch(ctx, m.cfg.Python.Client, f); err != nil {
				return nil, err
			}
		}
		// Named as the entry's wheel: its .dist-info must be that name
		// and version, whatever the lock's URL fetched.
		if err := (pypi.WheelLimits{}).CheckNamed(path, e.Filename); err != nil {
			return nil, err
		}
		n, err := wheelManifest(path, e, b.want)
		if err != nil {
			return nil, err
		}
		if total += n; total > m.cfg.MaxLayerBytes {
			return nil, m.tooLarge(total)
		}
		if err := linkArtifact(path, filepath.Join(b.artifacts, e.SHA256)); err != nil {
			return nil, err
		}
		b.steps.Python = append(b.steps.Python, pyStep{Name: e.Name, Version: e.Version, File: e.SHA256, DataDir: dataDir(e.Filename)})
	}
	for _, e := range l.JavaScript {
		path, ok := have[e.SHA256]
		if !ok {
			var sum string
			p := npm.Planned{Name: e.Name, Version: e.Version, Path: e.Path, TarballURL: e.URL, Integrity: e.Integrity}
			if path, sum, err = npm.FetchTarball(ctx, m.cfg.JavaScript, m.cfg.Cache.Cache, p); err != nil {
				return nil, err
			}
			if sum != e.SHA256 {
				return nil, lockErrorf("%s %s: its tarball's sha256 is %s, the lock says %s", e.Name, e.Version, sum, e.SHA256)
			}
		}
		if err := npm.CheckTarball(path, npm.TarLimits{}); err != nil {
			return nil, err
		}
		// The bytes are the hash's; their package.json must be this
		// entry's, or a lock could install one package under another's
		// name (and past a policy about that name).
		if name, version, err := tarballIdentity(path); err != nil {
			return nil, err
		} else if name != e.Name || version != e.Version {
			return nil, lockErrorf("%s %s: its tarball is %s %s", e.Name, e.Version, name, version)
		}
		n, err := tarballManifest(path, e.Path, b.want)
		if err != nil {
			return nil, err
		}
		if total += n; total > m.cfg.MaxLayerBytes {
			return nil, m.tooLarge(total)
		}
		if err := linkArtifact(path, filepath.Join(b.artifacts, e.SHA256)); err != nil {
			return nil, err
		}
		b.steps.JavaScript = append(b.steps.JavaScript, jsStep{Name: e.Name, Version: e.Version, File: e.SHA256, Path: e.Path})
	}
	return b, nil
}

func (m *Manager) tooLarge(n int64) error {
	return sandpit.WithHint(fmt.Errorf("%w: the layer would unpack to more than %d MiB (%d MiB so far)", ErrTooLarge, m.cfg.MaxLayerBytes>>20, n>>20),
		"install fewer or smaller packages, or ask the operator to raise --package-max-layer")
}

// request is the install step: lockText, when set, is written to the
// workspace.
func (b *build) request(lockText *string) sandpit.Request {
	b.steps.Lock = lockText
	stdin, _ := json.Marshal(b.steps)
	var what []string
	for _, p := range b.steps.Python {
		what = append(what, p.Name+"=="+p.Version)
	}
	for _, p := range b.steps.JavaScript {
		what = append(what, p.Name+"@"+p.Version)
	}
	code := "# sandpit install step: unpack verified artifacts into the package layer; no network, no package code.\n" +
		"# " + truncate(strings.Join(what, " "), 2000) + "\n" +
		"exec(open(\"" + sandpit.ArtifactsDir + "/install.py\").read())\n"
	return sandpit.Request{
		Language: "python",
		Code:     code,
		Stdin:    stdin,
		Timeout:  b.timeout,
		Install:  &sandpit.InstallDirs{Artifacts: b.artifacts, Layer: b.staging},
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + " ..."
}

func (b *build) cleanup() {
	os.RemoveAll(b.artifacts)
	removeLayer(b.staging)
}

// commit checks what the install step wrote and moves it in place as the
// lock's layer.
func (m *Manager) commit(b *build, res *sandpit.Result) error {
	if res == nil || res.Status != sandpit.StatusSuccess {
		status, tail := "no result", ""
		if res != nil {
			status, tail = string(res.Status), lastLines(res.Stderr, 12)
		}
		return fmt.Errorf("%w: status %s: %s", ErrInstallFailed, status, tail)
	}
	if err := verifyLayer(b.staging, b.want, m.cfg.MaxLayerBytes); err != nil {
		return fmt.Errorf("%w: the layer the install step wrote is not what its artifacts hold: %v", ErrInstallFailed, err)
	}
	dst := m.layerDir(b.lock.Digest())
	if err := os.Rename(b.staging, dst); err != nil {
		if _, serr := os.Stat(dst); serr == nil {
			return nil // the same layer, built meanwhile
		}
		return fmt.Errorf("packages: %w", err)
	}
	m.gcLayers(filepath.Base(dst))
	m.trimCache()
	return nil
}

// cacheTrims keeps cache GCs at most one a minute per cache directory,
// whichever workspace's install asks: a GC walks every entry.
var cacheTrims = struct {
	sync.Mutex
	last map[string]time.Time
}{last: map[string]time.Time{}}

// trimCache bounds the shared artifact cache, in the background: an
// entry removed under a later install is fetched again, verified.
func (m *Manager) trimCache() {
	max := m.cfg.MaxCacheBytes
	if max <= 0 {
		return
	}
	dir := m.cfg.Cache.Dir()
	cacheTrims.Lock()
	if time.Since(cacheTrims.last[dir]) < time.Minute {
		cacheTrims.Unlock()
		return
	}
	cacheTrims.last[dir] = time.Now()
	cacheTrims.Unlock()
	go func() {
		if res, err := m.cfg.Cache.GC(max); err != nil {
			m.cfg.Logger.Warn("package cache not trimmed", "err", err)
		} else if res.Removed > 0 {
			m.cfg.Logger.Info("package cache trimmed", "removed", res.Removed, "removed_bytes", res.RemovedBytes, "kept_bytes", res.KeptBytes)
		}
	}()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return truncate(strings.Join(lines, "\n"), 4000)
}

// verifyLayer holds the staging dir to want (path → size) exactly, then
// makes it the host's and read-only: directories and regular files only,
// one link each.
func verifyLayer(dir string, want map[string]int64, max int64) error {
	seen := 0
	var total int64
	owner := os.Geteuid() == 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := info.Sys().(*syscall.Stat_t)
		switch {
		case info.IsDir():
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s is a %s, not a file", rel, info.Mode().Type())
		case st != nil && st.Nlink != 1:
			return fmt.Errorf("%s has %d links", rel, st.Nlink)
		default:
			size, ok := want[filepath.ToSlash(rel)]
			if !ok {
				return fmt.Errorf("%s is in no artifact", rel)
			}
			if size != info.Size() {
				return fmt.Errorf("%s is %d bytes, its artifact says %d", rel, info.Size(), size)
			}
			seen++
			if total += info.Size(); total > max {
				return fmt.Errorf("over %d bytes", max)
			}
		}
		if owner {
			if err := os.Lchown(p, 0, 0); err != nil {
				return err
			}
		}
		mode := fs.FileMode(0o444)
		if info.IsDir() || info.Mode()&0o111 != 0 {
			mode = 0o555
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return err
	}
	if seen != len(want) {
		return fmt.Errorf("%d files, the artifacts hold %d", seen, len(want))
	}
	return nil
}

// dataDir is a wheel's .data directory prefix ("name-1.0.data/").
func dataDir(filename string) string {
	parts := strings.SplitN(strings.TrimSuffix(filename, ".whl"), "-", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "-" + parts[1] + ".data/"
}

// wheelManifest adds what the install step unpacks of a wheel (install.py
// does the same mapping) to want, and returns its bytes.
func wheelManifest(path string, e PyEntry, want map[string]int64) (int64, error) {
	z, err := zip.OpenReader(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", pypi.ErrUnsafeWheel, e.Filename, err)
	}
	defer z.Close()
	prefix := dataDir(e.Filename)
	var n int64
	for _, f := range z.File {
		name := f.Name
		if strings.HasSuffix(name, "/") {
			continue
		}
		if strings.HasPrefix(name, prefix) {
			kind, rest, _ := strings.Cut(strings.TrimPrefix(name, prefix), "/")
			if kind != "purelib" && kind != "platlib" {
				continue
			}
			name = rest
		}
		want["python/"+name] = int64(f.UncompressedSize64)
		n += int64(f.UncompressedSize64)
	}
	return n, nil
}

// tarballManifest adds what the install step unpacks of an npm tarball
// (its top directory stripped, under at) to want.
func tarballManifest(path, at string, want map[string]int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return 0, err
	}
	tr := tar.NewReader(gz)
	var n int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		if !h.FileInfo().Mode().IsRegular() {
			continue // CheckTarball allowed only directories besides
		}
		_, rest, ok := strings.Cut(h.Name, "/")
		if !ok || rest == "" {
			continue
		}
		want[at+"/"+rest] = h.Size
		n += h.Size
	}
}

// tarballIdentity reads the name and version of an npm tarball's
// package.json (a tarball CheckTarball passed).
func tarballIdentity(path string) (name, version string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return "", "", err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", "", fmt.Errorf("%w: %s: no package.json", ErrRefused, filepath.Base(path))
		}
		if _, rest, _ := strings.Cut(h.Name, "/"); rest != "package.json" || !h.FileInfo().Mode().IsRegular() {
			continue
		}
		var pj struct{ Name, Version string }
		if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&pj); err != nil {
			return "", "", fmt.Errorf("%w: %s: package.json: %v", ErrRefused, filepath.Base(path), err)
		}
		return pj.Name, pj.Version, nil
	}
}

// linkArtifact puts a cache entry in a build's artifacts dir: a hard link
// where the two share a filesystem, else a copy.
func linkArtifact(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
