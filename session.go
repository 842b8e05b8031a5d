package sandpit

import "time"

// Stream names one of a program's output streams.
type Stream int

const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// OutputFunc sees a run's output as the program writes it, in the order
// each stream's bytes arrive (the two streams are not ordered relative to
// each other). It is called from the goroutines that drain the sandbox's
// pipes: it must return quickly and must not keep p. The Result still
// carries the output, bounded, when the run ends.
type OutputFunc func(s Stream, p []byte)

// A session is a sandbox that outlives one call: its interpreter (a Python
// REPL) keeps variables, imports and open data between the calls that name
// it. It has the hardening and limits of any sandbox, belongs to one server,
// is never shared with another session and is never reused after it ends.

// SessionResult is what a session call says about its session.
type SessionResult struct {
	Name string `json:"name"`
	// New: this call started the session (its state was empty).
	New bool `json:"new,omitempty"`
	// Previous, for a new session, says why an earlier session of the same
	// name ended, when one did recently: its state is not in this one.
	Previous string `json:"previous,omitempty"`
	Call     int64  `json:"call" jsonschema:"this call's number in the session, from 1"`
	// Lost: the session ended during this call; LostReason says why and
	// LostNames what it held (its variables and imported modules at the
	// end of its last call), so the caller knows what to rebuild.
	Lost       bool     `json:"lost,omitempty"`
	LostReason string   `json:"lost_reason,omitempty"`
	LostNames  []string `json:"lost_names,omitempty"`
	LostMore   int      `json:"lost_more,omitempty" jsonschema:"names held but not listed"`
	// Expires is when the session ends unless used again (idle limit), or
	// at its age limit, whichever comes first.
	Expires time.Time `json:"expires,omitzero"`
}

// SessionInfo describes an open session.
type SessionInfo struct {
	Name string `json:"name"`
	// Tenant owns it ("" on a stdio server). Not shown to the tenant.
	Tenant   string    `json:"-"`
	Language string    `json:"language"`
	Started  time.Time `json:"started"`
	LastUsed time.Time `json:"last_used"`
	Calls    int64     `json:"calls"`
	// Running is the id of the call in progress, if any.
	Running string `json:"running,omitempty"`
	// Expires is when it ends unless used again; MaxAgeAt when it ends
	// regardless.
	Expires  time.Time `json:"expires"`
	MaxAgeAt time.Time `json:"max_age_at"`
	// Memory and CPU of the session's sandbox (its cgroup), now.
	MemoryBytes     uint64 `json:"memory_bytes"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
	CPUUserMS       int64  `json:"cpu_user_ms"`
	CPUSystemMS     int64  `json:"cpu_system_ms"`
	// Names are the session's variables and modules at the end of its last
	// call (bounded; More counts the rest).
	Names []string `json:"names,omitempty"`
	More  int      `json:"more_names,omitempty"`
}
