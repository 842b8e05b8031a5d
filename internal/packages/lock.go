package packages

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/npm"
	"github.com/sandpit-dev/sandpit/internal/pypi"
)

// LockFile is the lock's name in the workspace root.
const LockFile = "sandpit.lock"

// MaxLockBytes bounds the lock file read before every run.
const MaxLockBytes = 1 << 20

// LockVersion is the lock format's version.
const LockVersion = 1

// Lock is sandpit.lock: the exact artifacts of the workspace's layer.
// What the agent asked for is kept apart (Requested) so that removing a
// package can drop the dependencies only it needed.
type Lock struct {
	Version    int       `json:"version"`
	Requested  Requested `json:"requested"`
	Python     []PyEntry `json:"python,omitempty"`
	JavaScript []JSEntry `json:"javascript,omitempty"`
}

// Requested are the agent's own requirement strings, per language.
type Requested struct {
	Python     []string `json:"python,omitempty"`
	JavaScript []string `json:"javascript,omitempty"`
}

// PyEntry is one wheel of the layer.
type PyEntry struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Filename string `json:"filename"`
	URL      string `json:"url"`
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
}

// JSEntry is one npm package of the layer, at Path (node_modules/NAME,
// or nested under its dependent).
type JSEntry struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Path      string `json:"path"`
	URL       string `json:"url"`
	Integrity string `json:"integrity"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
}

// Empty reports whether the lock installs nothing.
func (l *Lock) Empty() bool { return l == nil || len(l.Python)+len(l.JavaScript) == 0 }

// Digest names the layer the lock describes: its artifacts, in order, and
// nothing else (what was requested does not change a byte of the layer).
func (l *Lock) Digest() string {
	b, _ := json.Marshal(struct {
		V  int
		Py []PyEntry
		JS []JSEntry
	}{LockVersion, l.Python, l.JavaScript})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Marshal is the lock's file text: stable, sorted, indented, one trailing
// newline, so that a diff of two locks shows what changed.
func (l *Lock) Marshal() []byte {
	c := *l
	c.Version = LockVersion
	c.Python = slices.Clone(l.Python)
	c.JavaScript = slices.Clone(l.JavaScript)
	c.Requested.Python = slices.Clone(l.Requested.Python)
	c.Requested.JavaScript = slices.Clone(l.Requested.JavaScript)
	c.sort()
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		panic(err) // strings and ints always marshal
	}
	return append(b, '\n')
}

func (l *Lock) sort() {
	slices.SortFunc(l.Python, func(a, b PyEntry) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(l.JavaScript, func(a, b JSEntry) int { return strings.Compare(a.Path, b.Path) })
	slices.Sort(l.Requested.Python)
	slices.Sort(l.Requested.JavaScript)
}

var (
	hexSHA256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	integrityRE = regexp.MustCompile(`^sha512-[A-Za-z0-9+/]{86}==$`)
)

// ParseLock reads a lock file's text. Anything it does not expect is an
// error naming the entry and the field, for an agent that edited it.
func ParseLock(b []byte) (*Lock, error) {
	if len(b) > MaxLockBytes {
		return nil, lockErrorf("it is %d bytes, over the %d-byte limit", len(b), MaxLockBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var l Lock
	if err := dec.Decode(&l); err != nil {
		return nil, lockErrorf("not a sandpit lock (%v)", err)
	}
	// More is false before a stray "}" or "]": only EOF ends a lock.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, lockErrorf("text after the lock's JSON object")
	}
	if l.Version != LockVersion {
		return nil, lockErrorf("version %d: this server reads version %d", l.Version, LockVersion)
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	return &l, nil
}

func (l *Lock) check() error {
	if len(l.Python) > DefaultMaxLayerPackages || len(l.JavaScript) > DefaultMaxLayerPackages {
		return lockErrorf("more than %d packages of one language", DefaultMaxLayerPackages)
	}
	if len(l.Requested.Python) > DefaultMaxLayerPackages || len(l.Requested.JavaScript) > DefaultMaxLayerPackages {
		return lockErrorf("more than %d requested packages of one language", DefaultMaxLayerPackages)
	}
	for _, r := range append(slices.Clone(l.Requested.Python), l.Requested.JavaScript...) {
		if err := plainText(r); err != nil {
			return lockErrorf("requested %q: %v", r, err)
		}
	}
	seen := map[string]bool{}
	for i, e := range l.Python {
		at := fmt.Sprintf("python[%d] (%s)", i, e.Name)
		w, err := pypi.ParseWheelFilename(e.Filename)
		switch {
		case err != nil:
			return lockErrorf("%s: filename: %v", at, err)
		case pypi.Normalize(e.Name) != e.Name || w.Name != e.Name:
			return lockErrorf("%s: name %q does not match its wheel %s", at, e.Name, e.Filename)
		case w.Version.String() != e.Version:
			return lockErrorf("%s: version %q does not match its wheel %s", at, e.Version, e.Filename)
		case !hexSHA256RE.MatchString(e.SHA256):
			return lockErrorf("%s: sha256 must be 64 lowercase hex digits", at)
		case e.Size <= 0:
			return lockErrorf("%s: size must be the wheel's size in bytes", at)
		case seen[e.Name]:
			return lockErrorf("%s: listed twice", at)
		case plainText(e.URL) != nil:
			return lockErrorf("%s: url must be plain text", at)
		case !urlNames(e.URL, e.Filename):
			return lockErrorf("%s: url must be an http(s) URL whose path ends with /%s, without a query", at, e.Filename)
		}
		seen[e.Name] = true
	}
	paths := map[string]bool{}
	for i, e := range l.JavaScript {
		at := fmt.Sprintf("javascript[%d] (%s)", i, e.Name)
		switch {
		case npm.ValidDepName(e.Name) != nil:
			return lockErrorf("%s: not an npm package name", at)
		case !jsPathOK(e.Path, e.Name):
			return lockErrorf("%s: path %q must be node_modules/%s, or nested under its dependent", at, e.Path, e.Name)
		case plainText(e.URL) != nil || !urlNames(e.URL, ""):
			return lockErrorf("%s: url must be a plain http(s) URL without a query", at)
		case !integrityRE.MatchString(e.Integrity):
			return lockErrorf("%s: integrity must be a sha512 SRI string", at)
		case !hexSHA256RE.MatchString(e.SHA256):
			return lockErrorf("%s: sha256 must be 64 lowercase hex digits", at)
		case e.Size <= 0:
			return lockErrorf("%s: size must be the tarball's size in bytes", at)
		case paths[e.Path]:
			return lockErrorf("%s: path %s listed twice", at, e.Path)
		case plainText(e.Version) != nil:
			return lockErrorf("%s: version must be plain text", at)
		}
		paths[e.Path] = true
	}
	return nil
}

// jsPathOK: node_modules/NAME, or nested (node_modules/A/node_modules/B),
// every NAME an npm name, the last one name.
func jsPathOK(p, name string) bool {
	rest, ok := strings.CutPrefix(p, "node_modules/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/node_modules/")
	for _, n := range parts {
		if npm.ValidDepName(n) != nil {
			return false
		}
	}
	return parts[len(parts)-1] == name
}

// urlNames: u is an http(s) URL without a query whose path's last element
// is filename (any, when filename is "").
func urlNames(u, filename string) bool {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.RawQuery != "" || pu.ForceQuery {
		return false
	}
	return filename == "" || path.Base(pu.Path) == filename
}

func plainText(s string) error {
	if len(s) > 2048 {
		return fmt.Errorf("longer than 2048 bytes")
	}
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return fmt.Errorf("contains %q: only printable ASCII", r)
		}
	}
	return nil
}

func lockErrorf(format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s; fix it, restore it (undo_last_run or a snapshot), or delete it and call install_packages again", ErrBadLock, LockFile, fmt.Sprintf(format, a...))
}
