package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TokenPrefix starts every sandpit token, so a leaked one is recognisable
// (secret scanners, logs) and the front door can tell it from a JWT
// without trying either.
const TokenPrefix = "spt_"

// Token store bounds.
const (
	// MaxTokens is how many tokens a store holds: every request compares
	// against all of them, so the number bounds a request's work.
	MaxTokens = 1000
	// maxTokensFile bounds what is read of the token file (MaxTokens
	// entries take about 150 KiB).
	maxTokensFile = 1 << 20
	// tokenRandomBytes is a token's entropy: 256 bits.
	tokenRandomBytes = 32
	// checkEvery is how often Authenticate looks whether another process
	// changed the token file.
	checkEvery = time.Second
)

// tokenLen is the length of every token this store issues; any other
// length is refused before it is hashed.
var tokenLen = len(TokenPrefix) + base64.RawURLEncoding.EncodedLen(tokenRandomBytes)

// Token store error classes.
var (
	// ErrExists: a token of that name exists already (revoke it first).
	ErrExists = errors.New("token exists")
	// ErrNotFound: no token of that name.
	ErrNotFound = errors.New("no such token")
	// ErrInvalidName: the name cannot name a tenant.
	ErrInvalidName = errors.New("invalid token name")
	// ErrFull: the store holds MaxTokens already.
	ErrFull = errors.New("token store full")
)

// TokenInfo is what the store tells about a token: never the token.
type TokenInfo struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// storedToken is one entry of the token file. Hash is the hex SHA-256 of
// the whole token: the token itself is shown once, at creation, and kept
// nowhere. A plain SHA-256 is right here, where a password would need a
// slow hash (bcrypt, argon2): those exist to make guessing a low-entropy
// secret from its hash expensive, but a token is 256 random bits, which
// no number of fast guesses finds, and a fast hash keeps each request
// cheap.
type storedToken struct {
	Name    string    `json:"name"`
	Hash    string    `json:"sha256"`
	Created time.Time `json:"created"`
}

type tokenFile struct {
	Version int           `json:"version"`
	Tokens  []storedToken `json:"tokens"`
}

// Tokens is the store of sandpit-issued bearer tokens of one data
// directory: DIR/auth/tokens.json (0600, in a 0700 directory). Several
// processes may share it — `sandpit token` commands change it while a
// server reads it — and each sees the others' changes: writers serialise
// on an flock and replace the file atomically, readers notice a new file
// within a second. Tokens is an Authenticator: a valid token's principal
// is the tenant the token is named after, with every scope.
type Tokens struct {
	dir  string // DIR/auth
	file string // DIR/auth/tokens.json

	snap      atomic.Pointer[tokenSnapshot]
	checked   atomic.Int64 // unix nanos of the last look at the file
	reloading sync.Mutex   // one reload at a time; others use the snapshot they have
	now       func() time.Time
}

// tokenSnapshot is the file as last read, with what identifies that
// version of it.
type tokenSnapshot struct {
	hashes []tokenHash
	err    error // the file could not be read: refuse every token
	ino    uint64
	size   int64
	mtime  time.Time
	exists bool
}

type tokenHash struct {
	name string
	sum  [sha256.Size]byte
}

// OpenTokens opens the token store of dataDir, creating dataDir/auth
// (0700) if needed. A store with no file holds no tokens.
func OpenTokens(dataDir string) (*Tokens, error) {
	// The data dir holds other state too (workspaces, snapshots) and keeps
	// the mode it has or that the rest of sandpit gives it; only auth/ is
	// private.
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	dir := filepath.Join(dataDir, "auth")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("token store: %w", err)
	}
	// MkdirAll leaves an existing directory's mode alone: tighten it, since
	// the file's hashes are all that stands between a reader and a guess.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	t := &Tokens{dir: dir, file: filepath.Join(dir, "tokens.json"), now: time.Now}
	s := t.load()
	if s.err != nil {
		return nil, s.err
	}
	t.snap.Store(s)
	t.checked.Store(t.now().UnixNano())
	return t, nil
}

// OpenTokensFile opens the token file at path, which another tool writes
// (`sandpit cluster token` into a Kubernetes Secret mounted there): the
// server only reads it, re-reading it when it changes, as OpenTokens's. A
// missing file holds no tokens.
func OpenTokensFile(path string) (*Tokens, error) {
	t := &Tokens{dir: filepath.Dir(path), file: path, now: time.Now}
	s := t.load()
	if s.err != nil {
		return nil, s.err
	}
	t.snap.Store(s)
	t.checked.Store(t.now().UnixNano())
	return t, nil
}

// Path is the token file's path.
func (t *Tokens) Path() string { return t.file }

// Create issues a new token named name and returns it: the only time it
// is ever seen. The name must be a valid tenant name and not in use.
func (t *Tokens) Create(name string) (string, error) {
	if !ValidTenant(name) {
		return "", fmt.Errorf("%w %q: use 1-128 letters, digits, '_', '.', '@' or '-', starting with a letter or digit", ErrInvalidName, name)
	}
	var raw [tokenRandomBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("token: random: %w", err)
	}
	tok := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(tok))
	err := t.update(func(f *tokenFile) error {
		for _, e := range f.Tokens {
			if e.Name == name {
				return fmt.Errorf("%w: %q (revoke it first: sandpit token revoke %s)", ErrExists, name, name)
			}
		}
		if len(f.Tokens) >= MaxTokens {
			return fmt.Errorf("%w: it holds %d tokens, the most it may", ErrFull, MaxTokens)
		}
		f.Tokens = append(f.Tokens, storedToken{Name: name, Hash: hex.EncodeToString(sum[:]), Created: t.now().UTC().Truncate(time.Second)})
		return nil
	})
	if err != nil {
		return "", err
	}
	return tok, nil
}

// Revoke deletes the token named name: from the next request on (within a
// second in other processes) it authenticates nobody.
func (t *Tokens) Revoke(name string) error {
	return t.update(func(f *tokenFile) error {
		for i, e := range f.Tokens {
			if e.Name == name {
				f.Tokens = append(f.Tokens[:i], f.Tokens[i+1:]...)
				return nil
			}
		}
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	})
}

// List returns the tokens' names and creation times, by name.
func (t *Tokens) List() ([]TokenInfo, error) {
	f, _, err := t.read()
	if err != nil {
		return nil, err
	}
	out := make([]TokenInfo, 0, len(f.Tokens))
	for _, e := range f.Tokens {
		out = append(out, TokenInfo{Name: e.Name, Created: e.Created})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Authenticate implements Authenticator. Only an Authorization: Bearer
// token of this store's form is checked; a token without TokenPrefix is
// left to the next authenticator of a Chain.
func (t *Tokens) Authenticate(_ context.Context, r *http.Request) (Principal, error) {
	tok, err := bearer(r)
	if err != nil {
		return Principal{}, err
	}
	if !strings.HasPrefix(tok, TokenPrefix) {
		return Principal{}, notOurs("not a sandpit token")
	}
	if len(tok) != tokenLen {
		return Principal{}, invalid("malformed sandpit token")
	}
	s := t.current()
	if s.err != nil {
		return Principal{}, fmt.Errorf("%w: token store: %w", ErrUnavailable, s.err)
	}
	sum := sha256.Sum256([]byte(tok))
	// Compare with every hash, in constant time, and never stop early: how
	// long a request takes says nothing about which hash came close.
	match := -1
	for i := range s.hashes {
		if subtle.ConstantTimeCompare(sum[:], s.hashes[i].sum[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Principal{}, invalid("unknown or revoked token")
	}
	return Principal{Tenant: s.hashes[match].name, Scopes: append([]string(nil), AllScopes...), Via: "token"}, nil
}

// current returns the snapshot to check a request against, first reading
// the file again if it changed since the last look (at most once per
// checkEvery, a stat; a read only when it changed).
func (t *Tokens) current() *tokenSnapshot {
	s := t.snap.Load()
	now := t.now().UnixNano()
	last := t.checked.Load()
	if now-last < int64(checkEvery) || !t.checked.CompareAndSwap(last, now) {
		return s
	}
	if !t.reloading.TryLock() {
		return s
	}
	defer t.reloading.Unlock()
	fi, err := os.Stat(t.file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if !s.exists && s.err == nil {
			return s
		}
	case err == nil:
		if s.exists && s.err == nil && sameFile(s, fi) {
			return s
		}
	}
	n := t.load()
	if n.err != nil {
		slog.Error("token store unreadable: every sandpit token is refused until it is fixed", "file", t.file, "err", n.err)
	}
	t.snap.Store(n)
	return n
}

func sameFile(s *tokenSnapshot, fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Ino == s.ino && fi.Size() == s.size && fi.ModTime().Equal(s.mtime)
}

// load reads the file into a snapshot.
func (t *Tokens) load() *tokenSnapshot {
	f, fi, err := t.read()
	if err != nil {
		return &tokenSnapshot{err: err}
	}
	s := &tokenSnapshot{hashes: make([]tokenHash, 0, len(f.Tokens))}
	if fi != nil {
		s.exists = true
		s.size = fi.Size()
		s.mtime = fi.ModTime()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s.ino = st.Ino
		}
	}
	for _, e := range f.Tokens {
		var h tokenHash
		h.name = e.Name
		hex.Decode(h.sum[:], []byte(e.Hash)) // checked by read
		s.hashes = append(s.hashes, h)
	}
	return s
}

// read reads and checks the token file; a missing file is an empty store.
// The FileInfo is of the file read (nil when there is none).
func (t *Tokens) read() (*tokenFile, os.FileInfo, error) {
	fh, err := os.Open(t.file)
	if errors.Is(err, os.ErrNotExist) {
		return &tokenFile{Version: 1}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("token store: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("token store: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxTokensFile+1))
	if err != nil {
		return nil, nil, fmt.Errorf("token store: %w", err)
	}
	if len(b) > maxTokensFile {
		return nil, nil, fmt.Errorf("token store %s: larger than %d bytes", t.file, maxTokensFile)
	}
	var f tokenFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("token store %s: %w", t.file, err)
	}
	if f.Version != 1 {
		return nil, nil, fmt.Errorf("token store %s: version %d, this sandpit reads version 1", t.file, f.Version)
	}
	if len(f.Tokens) > MaxTokens {
		return nil, nil, fmt.Errorf("token store %s: %d tokens, more than %d", t.file, len(f.Tokens), MaxTokens)
	}
	seen := make(map[string]bool, len(f.Tokens))
	for _, e := range f.Tokens {
		if !ValidTenant(e.Name) || seen[e.Name] {
			return nil, nil, fmt.Errorf("token store %s: invalid or repeated name %q", t.file, e.Name)
		}
		seen[e.Name] = true
		if h, err := hex.DecodeString(e.Hash); err != nil || len(h) != sha256.Size {
			return nil, nil, fmt.Errorf("token store %s: token %q: malformed hash", t.file, e.Name)
		}
	}
	return &f, fi, nil
}

// update changes the file under an exclusive flock, so that concurrent
// commands each see the other's change, and replaces it atomically
// (write a temp file, fsync, rename, fsync the dir): a reader sees the old
// file or the new, never half of one, and a crash loses at most the
// change being made.
func (t *Tokens) update(change func(*tokenFile) error) error {
	lock, err := os.OpenFile(filepath.Join(t.dir, "tokens.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("token store: lock: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	f, _, err := t.read()
	if err != nil {
		return err
	}
	if err := change(f); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(t.dir, ".tokens-*.json")
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("token store: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("token store: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("token store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := os.Rename(tmp.Name(), t.file); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if d, err := os.Open(t.dir); err == nil {
		d.Sync()
		d.Close()
	}
	// This process sees its own change at once.
	t.snap.Store(t.load())
	t.checked.Store(t.now().UnixNano())
	return nil
}
