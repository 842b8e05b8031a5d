// Package ledger records which server holds each open session of a
// tenant, in the tenant's data dir, so that a session whose server is gone
// — a cluster node that died or drained, a server that restarted — is
// reported lost by the next server, instead of being started afresh as if
// it never held anything.
//
// One file per session under DIR (the tenant's sessions/ dir), named by
// the session name's hex, holding the server's id and where it ran. A
// server records a session when it starts it and forgets it when it ends
// for a reason the caller was told (closed, idle, lost in a call); it keeps
// the record when it stops, which is what lets the next one say so.
package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Ledger is one server's view of its tenants' session records.
type Ledger struct {
	// Dir is the tenant's sessions dir.
	Dir func(tenant string) string
	// Where names this server in a lost session's reason ("node
	// node-a", "server instance default").
	Where string
	id    string
}

// record is one session's file.
type record struct {
	Server  string    `json:"server"`
	Where   string    `json:"where"`
	Started time.Time `json:"started"`
}

// New returns a ledger with a fresh server id: a restarted server is
// another server.
func New(dir func(tenant string) string, where string) *Ledger {
	b := make([]byte, 8)
	rand.Read(b)
	return &Ledger{Dir: dir, Where: where, id: hex.EncodeToString(b)}
}

func (l *Ledger) path(tenant, name string) string {
	return filepath.Join(l.Dir(tenant), hex.EncodeToString([]byte(name))+".json")
}

// Record notes that this server holds tenant's session name.
func (l *Ledger) Record(tenant, name string) error {
	p := l.path(tenant, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("session ledger: %w", err)
	}
	b, _ := json.Marshal(record{Server: l.id, Where: l.Where, Started: time.Now().UTC()})
	tmp := p + ".tmp-" + l.id
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("session ledger: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("session ledger: %w", err)
	}
	return nil
}

// Forget removes the record of a session this server held.
func (l *Ledger) Forget(tenant, name string) {
	p := l.path(tenant, name)
	if r, err := read(p); err == nil && r.Server == l.id {
		os.Remove(p)
	}
}

// Lost reports why tenant's session name, which this server does not
// hold, is lost: another server held it and no longer serves the tenant.
// The record is consumed: the next call with the name starts a new
// session. "" when no other server held it.
func (l *Ledger) Lost(tenant, name string) string {
	p := l.path(tenant, name)
	r, err := read(p)
	if err != nil || r.Server == l.id {
		return ""
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return fmt.Sprintf("it lived on %s (started %s), which no longer serves you: that server stopped, or this workspace moved to %s; what the session held in memory (variables, imports, loaded data) is gone, its workspace files are kept; call again with this name to start a new session",
		r.Where, r.Started.Format(time.RFC3339), l.Where)
}

func read(p string) (record, error) {
	var r record
	b, err := os.ReadFile(p)
	if err != nil {
		return r, err
	}
	if len(b) > 4096 {
		return r, errors.New("session record too large")
	}
	return r, json.Unmarshal(b, &r)
}
