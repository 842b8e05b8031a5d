// Package packages keeps a workspace's package layer: the Python wheels
// and npm packages an agent installed, unpacked into a directory that
// every later run and session of that workspace sees read-only at
// sandpit.EnvDir, on PYTHONPATH and NODE_PATH.
//
// The guarantees:
//
//   - No sandbox gets a network. The server resolves and downloads, from
//     the sources the operator configured and no other (internal/pypi,
//     internal/npm), and keeps only artifacts whose bytes match the hash
//     the source published (the content-addressed internal/artifact
//     cache, shared by every workspace).
//   - No package code runs. Wheels only (an sdist would run setup.py);
//     npm install scripts never run. The artifacts are checked on the
//     host (entry names, links, sizes, bombs) and unpacked by an install
//     step: an ordinary hardened sandbox, cold, with no network, that
//     reads the artifacts read-only and writes only the layer being built
//     and the workspace's lock; neither is on its import path. The host
//     then checks the layer it wrote: regular files and directories only,
//     exactly the entries and sizes the artifacts hold, within the layer's
//     byte bound; then makes it read-only and moves it in place.
//   - The layer is a function of the lock. sandpit.lock in the workspace
//     (exact versions, URLs, hashes; see Lock) names it by digest: a run
//     gets layers/<digest>, built again from the lock when it is missing
//     (a fresh server, a restored snapshot, an undo, an edited lock), with
//     the same policy and checks as an install. The install step writes
//     the lock as a run does, so history, undo and snapshots see it.
//   - The operator's policy (Policy) holds for every package of a
//     resolution, dependencies too, and for every entry of an edited lock.
//   - One install at a time per workspace; a second waits its turn.
//
// Bounds (Config fields): 200 requirement strings a call; 500 packages of
// a language in a layer; 1 GiB unpacked a layer; 4 GiB of layers kept per
// workspace (the oldest unused go first); an install step's 5 minutes.
package packages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/npm"
	"github.com/sandpit-dev/sandpit/internal/pypi"
)

// Languages install_packages serves.
const (
	Python     = "python"
	JavaScript = "javascript"
)

// Defaults of Config's bounds.
const (
	DefaultMaxSpecs         = 200
	DefaultMaxLayerPackages = 500
	DefaultMaxLayerBytes    = 1 << 30
	DefaultMaxWorkspaceDisk = 4 << 30
	DefaultInstallTimeout   = 5 * time.Minute
	keepLayers              = 8
)

// Errors callers branch on.
var (
	// ErrNotConfigured: no source is configured for the language.
	ErrNotConfigured = sandpit.Define(sandpit.ErrUnavailable, "no package source configured")
	// ErrBadLock: sandpit.lock is not one this server can build.
	ErrBadLock = sandpit.Define(sandpit.ErrInvalidArgument, "sandpit.lock refused")
	// ErrRefused: the policy or a check refused a package.
	ErrRefused = sandpit.Define(sandpit.ErrInvalidArgument, "package refused")
	// ErrTooLarge: a bound was reached.
	ErrTooLarge = sandpit.Define(sandpit.ErrResourceExhausted, "package limit reached")
	// ErrInstallFailed: the install step did not end well.
	ErrInstallFailed = sandpit.Define(sandpit.ErrUnavailable, "install step failed")
)

// PythonSource is a PEP 503/691 index and the interpreter its wheels are
// for.
type PythonSource struct {
	Client *pypi.Client
	Target pypi.Target
}

// Config is a Manager's. Dir, Cache and Run are required.
type Config struct {
	// Dir is the workspace's own: Dir/layers/<digest>, Dir/builds.
	Dir string
	// Cache is the artifact cache every workspace shares.
	Cache *pypi.Cache
	// Python and JavaScript are the sources; nil: that language is off.
	Python     *PythonSource
	JavaScript *npm.Client
	Policy     *Policy
	// Owner is the sandbox user's host uid and gid: an install step writes
	// the layer as it.
	Owner struct{ UID, GID uint32 }
	// Run runs a rebuild's install step (not recorded as the agent's run).
	Run func(context.Context, sandpit.Request) (*sandpit.Result, error)

	MaxSpecs         int
	MaxLayerBytes    int64
	MaxWorkspaceDisk int64
	// MaxCacheBytes bounds the shared artifact cache: after an install it
	// is trimmed (least recently used first) to this; 0: never.
	MaxCacheBytes  int64
	InstallTimeout time.Duration
	Logger         *slog.Logger
}

// Manager keeps one workspace's layers.
type Manager struct {
	cfg  Config
	turn chan struct{} // one install or rebuild at a time

	mu     sync.Mutex
	parsed map[string]parsedLock // lock text → parsed, for the run path
	inUse  map[string]int        // layer dir → runs holding it (Layer's release)
}

type parsedLock struct {
	lock   *Lock
	digest string
}

// New returns a Manager; it creates its directories.
func New(cfg Config) (*Manager, error) {
	if cfg.Dir == "" || cfg.Cache == nil || cfg.Run == nil {
		return nil, errors.New("packages: Dir, Cache and Run are required")
	}
	if cfg.MaxSpecs <= 0 {
		cfg.MaxSpecs = DefaultMaxSpecs
	}
	if cfg.MaxLayerBytes <= 0 {
		cfg.MaxLayerBytes = DefaultMaxLayerBytes
	}
	if cfg.MaxWorkspaceDisk <= 0 {
		cfg.MaxWorkspaceDisk = DefaultMaxWorkspaceDisk
	}
	if cfg.InstallTimeout <= 0 {
		cfg.InstallTimeout = DefaultInstallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "layers"), filepath.Join(cfg.Dir, "builds")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("packages: %w", err)
		}
	}
	// The layers dir must be reachable for the bind mount's source only by
	// the host; 0700 keeps other host users out.
	m := &Manager{cfg: cfg, turn: make(chan struct{}, 1), parsed: map[string]parsedLock{}, inUse: map[string]int{}}
	m.sweepBuilds()
	return m, nil
}

// Configured reports whether language has a source.
func (m *Manager) Configured(language string) bool {
	switch language {
	case Python:
		return m.cfg.Python != nil
	case JavaScript:
		return m.cfg.JavaScript != nil
	}
	return false
}

func (m *Manager) notConfigured(language string) error {
	flag := "--package-source python=https://pypi.example/simple/ (a PEP 503/691 index)"
	if language == JavaScript {
		flag = "--package-source javascript=https://registry.npmjs.org/ (an npm registry)"
	}
	return sandpit.WithHint(fmt.Errorf("%w: this server installs no %s packages", ErrNotConfigured, language),
		"the operator enables them by starting the server with "+flag+"; until then use what the image has (list_languages shows it)")
}

func (m *Manager) take(ctx context.Context) error {
	select {
	case m.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for another install in this workspace: %w", context.Cause(ctx))
	}
}

func (m *Manager) give() { <-m.turn }

// lockOf parses lock text, remembering the last few with their digests:
// the run path asks for them before every run.
func (m *Manager) lockOf(text []byte) (*Lock, string, error) {
	if len(text) == 0 {
		return nil, "", nil
	}
	m.mu.Lock()
	p, ok := m.parsed[string(text)]
	m.mu.Unlock()
	if ok {
		return p.lock, p.digest, nil
	}
	l, err := ParseLock(text)
	if err != nil {
		return nil, "", err
	}
	p = parsedLock{lock: l, digest: l.Digest()}
	m.mu.Lock()
	if len(m.parsed) > 16 {
		clear(m.parsed)
	}
	m.parsed[string(text)] = p
	m.mu.Unlock()
	return l, p.digest, nil
}

func (m *Manager) layerDir(digest string) string {
	return filepath.Join(m.cfg.Dir, "layers", digest)
}

// Layer returns the host directory of the layer lock text describes
// ("" when there is no lock or it installs nothing), building it when it
// is missing. A lock that cannot be built is an error whose text says
// what to do. The layer is held until release is called (the run that
// mounts it ended): the layers GC never removes a held one.
func (m *Manager) Layer(ctx context.Context, text []byte) (dir string, release func(), err error) {
	l, digest, err := m.lockOf(text)
	if err != nil || l.Empty() {
		return "", func() {}, err
	}
	dir = m.layerDir(digest)
	if release, ok := m.hold(dir); ok {
		return dir, release, nil
	}
	if err := m.take(ctx); err != nil {
		return "", nil, err
	}
	defer m.give()
	if release, ok := m.hold(dir); ok {
		return dir, release, nil // built while this waited
	}
	if err := m.checkLock(l); err != nil {
		return "", nil, err
	}
	b, err := m.prepare(ctx, l, nil)
	if err != nil {
		return "", nil, fmt.Errorf("build the package layer of %s: %w", LockFile, err)
	}
	defer b.cleanup()
	req := b.request(nil)
	res, err := m.cfg.Run(ctx, req)
	if err != nil {
		return "", nil, fmt.Errorf("build the package layer of %s: %w", LockFile, err)
	}
	if err := m.commit(b, res); err != nil {
		return "", nil, fmt.Errorf("build the package layer of %s: %w", LockFile, err)
	}
	m.cfg.Logger.Info("package layer rebuilt from the lock", "digest", digest, "python", len(l.Python), "javascript", len(l.JavaScript))
	if release, ok := m.hold(dir); ok {
		return dir, release, nil
	}
	return "", nil, fmt.Errorf("package layer %s is gone right after it was built", digest)
}

// hold marks dir in use when it exists, as one step against the GC.
func (m *Manager) hold(dir string) (release func(), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return nil, false
	}
	if now := time.Now(); now.Sub(st.ModTime()) > time.Minute {
		os.Chtimes(dir, now, now) // the layers GC keeps the recently used
	}
	m.inUse[dir]++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.inUse[dir]--; m.inUse[dir] <= 0 {
				delete(m.inUse, dir)
			}
		})
	}, true
}

// checkLock holds an existing lock's entries to the policy and sources.
func (m *Manager) checkLock(l *Lock) error {
	if len(l.Python) > 0 && m.cfg.Python == nil {
		return m.notConfigured(Python)
	}
	if len(l.JavaScript) > 0 && m.cfg.JavaScript == nil {
		return m.notConfigured(JavaScript)
	}
	for _, e := range l.Python {
		if why := m.cfg.Policy.Check(Python, e.Name, e.Version); why != "" {
			return lockErrorf("%s %s: %s", e.Name, e.Version, why)
		}
	}
	for _, e := range l.JavaScript {
		if why := m.cfg.Policy.Check(JavaScript, e.Name, e.Version); why != "" {
			return lockErrorf("%s %s: %s", e.Name, e.Version, why)
		}
	}
	return nil
}

// Package is one entry of a layer, as the tools report it.
type Package struct {
	Language  string `json:"language"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
	Path      string `json:"path,omitempty"` // npm: where in node_modules
	Requested bool   `json:"requested"`      // asked for, not only a dependency
}

// Refusal is a requirement not installed, and why.
type Refusal struct {
	Spec   string `json:"spec"`
	Reason string `json:"reason"`
}

// List is what a lock installs.
func (m *Manager) List(text []byte) ([]Package, error) {
	l, _, err := m.lockOf(text)
	if err != nil || l == nil {
		return nil, err
	}
	return l.Packages(), nil
}

// Packages are what the lock installs, each marked requested or a dependency.
func (l *Lock) Packages() []Package {
	req := map[string]bool{}
	for _, r := range l.Requested.Python {
		if q, err := pypi.ParseRequirement(r); err == nil {
			req[Python+" "+q.Name] = true
		}
	}
	for _, r := range l.Requested.JavaScript {
		if s, err := npm.ParseSpec(r); err == nil {
			req[JavaScript+" "+s.Name] = true
		}
	}
	var out []Package
	for _, e := range l.Python {
		out = append(out, Package{Language: Python, Name: e.Name, Version: e.Version, SHA256: e.SHA256, Size: e.Size, Requested: req[Python+" "+e.Name]})
	}
	for _, e := range l.JavaScript {
		top := e.Path == "node_modules/"+e.Name
		out = append(out, Package{Language: JavaScript, Name: e.Name, Version: e.Version, SHA256: e.SHA256, Size: e.Size, Path: e.Path, Requested: top && req[JavaScript+" "+e.Name]})
	}
	return out
}

// sweepBuilds removes builds a dead server left.
func (m *Manager) sweepBuilds() {
	des, _ := os.ReadDir(filepath.Join(m.cfg.Dir, "builds"))
	for _, de := range des {
		os.RemoveAll(filepath.Join(m.cfg.Dir, "builds", de.Name()))
	}
}

// gcLayers keeps the current layer, the keepLayers most recently used, and
// no more bytes than MaxWorkspaceDisk.
func (m *Manager) gcLayers(current string) {
	root := filepath.Join(m.cfg.Dir, "layers")
	des, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type ent struct {
		name  string
		mtime time.Time
		size  int64
	}
	var ents []ent
	for _, de := range des {
		info, err := de.Info()
		if err != nil || !info.IsDir() {
			continue
		}
		ents = append(ents, ent{de.Name(), info.ModTime(), dirSize(filepath.Join(root, de.Name()))})
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].mtime.After(ents[j].mtime) })
	var total int64
	kept := 0
	for _, e := range ents {
		if e.name == current || (kept < keepLayers && total+e.size <= m.cfg.MaxWorkspaceDisk) {
			kept++
			total += e.size
			continue
		}
		m.removeUnheld(root, e.name)
	}
}

// removeUnheld removes layer name unless a run holds it: moved out of
// layers/ under the lock hold takes, so no run can take it after.
func (m *Manager) removeUnheld(root, name string) {
	dir := filepath.Join(root, name)
	trash := filepath.Join(m.cfg.Dir, "builds", "gc-"+name)
	m.mu.Lock()
	held := m.inUse[dir] > 0
	moved := !held && os.Rename(dir, trash) == nil
	m.mu.Unlock()
	if moved {
		removeLayer(trash)
	}
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// removeLayer removes a read-only layer (its dirs are 0555).
func removeLayer(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}

func names(ss []string) string {
	ss = slices.Clone(ss)
	if len(ss) > 8 {
		ss = append(ss[:8], fmt.Sprintf("and %d more", len(ss)-8))
	}
	return strings.Join(ss, ", ")
}
