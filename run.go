package sandpit

import "time"

// Status is the outcome class of a run. A program that fails is data, not an
// error: a Runner returns a Result with one of these and a nil error.
type Status string

const (
	StatusSuccess      Status = "success"       // exited 0
	StatusError        Status = "error"         // exited non-zero or died of a signal
	StatusTimeout      Status = "timeout"       // killed at the wall-clock limit
	StatusOOM          Status = "oom"           // a process was killed by the memory cgroup
	StatusCompileError Status = "compile_error" // the compiler rejected the source
	// StatusCancelled: the caller went away (cancelled the call, or the
	// server is shutting down) and the sandbox was killed; the output and
	// workspace changes up to then are kept.
	StatusCancelled Status = "cancelled"
	// StatusSessionLost: a session call ended its session (the interpreter
	// ran out of memory, did not stop within the grace after an interrupt,
	// exited, or the session reached its age limit); what it held is gone.
	// Result.Session says why and what was lost.
	StatusSessionLost Status = "session_lost"
)

// Request is one program to run in a fresh sandbox.
//
// Exactly one of Code or Path is set. New fields keep today's behaviour at
// their zero values.
type Request struct {
	Language string        // a language name or alias, case-insensitive
	Code     string        // source text, written as the sandbox's main file
	Path     string        // or: a file in the workspace, relative to WorkspaceDir
	Args     []string      // argv after the program name
	Stdin    []byte        // given to the program's standard input
	Timeout  time.Duration // wall-clock limit; zero means DefaultTimeout

	// Workspace, when set, is mounted read-write at WorkspaceDir and is the
	// working directory of the run. Its changes are committed when the run ends.
	Workspace Workspace

	// Session, when set, runs the code in that named session (started on
	// first use) instead of a fresh sandbox: its interpreter keeps its
	// state between calls. See session.go.
	Session string
	// Tenant, when set, is whose run this is: a session belongs to its
	// tenant, and one tenant's session names never reach another's.
	Tenant string
	// ID, when set, is the run's id (lowercase letters, digits and '-', at
	// most 64); otherwise the runner picks one. A caller that must name a
	// run before it ends (a background run) sets it.
	ID string
	// Output, when set, sees the program's output as it is written.
	Output OutputFunc
	// WatchUsage, when set, is given (once the run's sandbox exists) a
	// function that reads its usage so far: CPU time, peak memory and
	// processes, for a person watching it run. The function is cheap,
	// safe to call from any goroutine, and reads zeros once the sandbox is
	// gone or where the counters cannot be read.
	WatchUsage func(read func() Usage)

	// Env, when set, is the host directory of the workspace's package
	// layer: bound read-only (executable: compiled extensions) at EnvDir.
	Env string
	// Install, when set, makes this run an install step: it runs cold (never
	// in a pooled sandbox or a session) with Install.Artifacts bound
	// read-only at ArtifactsDir and Install.Layer read-write at
	// EnvBuildDir; Env must be empty.
	Install *InstallDirs
}

// InstallDirs are the host directories of an install step.
type InstallDirs struct {
	Artifacts string // verified artifacts, read-only
	Layer     string // the layer being built, read-write, empty at start
}

// Result is what a run produced and what it cost.
type Result struct {
	ID              string        `json:"id"`
	Language        string        `json:"language"`
	Status          Status        `json:"status"`
	ExitCode        int           `json:"exit_code"`
	Stdout          string        `json:"stdout"`
	Stderr          string        `json:"stderr"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	StdoutBytes     int64         `json:"stdout_bytes"` // total written by the program, kept or not
	StderrBytes     int64         `json:"stderr_bytes"`
	Started         time.Time     `json:"started"`
	Duration        time.Duration `json:"-"`
	DurationMS      int64         `json:"duration_ms"`                 // from when the sandbox got the request; the workspace open is apart
	WorkspaceOpenMS int64         `json:"workspace_open_ms,omitempty"` // opening the workspace view (and recording the undo state)
	Usage           Usage         `json:"usage"`
	Limits          Limits        `json:"limits"`
	Files           *Changes      `json:"files,omitempty"` // workspace changes, when a workspace was attached

	// Value is the repr of a session call's last expression, when it was
	// an expression whose value is not None (as a notebook cell shows it).
	Value          string         `json:"value,omitempty"`
	ValueTruncated bool           `json:"value_truncated,omitempty"`
	Session        *SessionResult `json:"session,omitempty"` // a session call's session
}

// Usage is measured from the sandbox's cgroup before it is deleted.
type Usage struct {
	CPUUserMS       int64  `json:"cpu_user_ms"`
	CPUSystemMS     int64  `json:"cpu_system_ms"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
	PidsCurrent     uint64 `json:"pids,omitempty"`
	WallMS          int64  `json:"wall_ms"`
	OOMKilled       bool   `json:"oom_killed"`
}

// Limits are the bounds a sandbox runs under, as reported to callers.
type Limits struct {
	MemoryBytes    int64   `json:"memory_bytes"`
	PidsMax        int64   `json:"pids_max"`
	CPUs           float64 `json:"cpus"`
	TmpfsBytes     int64   `json:"tmpfs_bytes"`
	FileSizeBytes  int64   `json:"file_size_bytes"`
	OpenFiles      uint64  `json:"open_files"`
	OutputBytes    int64   `json:"output_bytes"` // per stream
	TimeoutSeconds float64 `json:"timeout_seconds"`
	// Unenforced lists limits the host cannot enforce (rootless on cgroup v1);
	// empty when every limit above holds.
	Unenforced []string `json:"unenforced,omitempty"`
}

// Language describes a language sandpit can run.
type Language struct {
	Name        string   `json:"language"`
	Image       string   `json:"image"`
	Version     string   `json:"version"`
	Description string   `json:"description"`
	Aliases     []string `json:"aliases,omitempty"`
	// Libraries are what programs can import beyond the standard library,
	// as "module version" (e.g. "pandas 1.5.3"), from the image's labels.
	Libraries []string `json:"libraries,omitempty"`
}
