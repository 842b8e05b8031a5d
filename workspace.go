package sandpit

import "context"

// Changes lists workspace paths (relative to WorkspaceDir) a run changed.
// Directory paths end in "/". The lists are bounded (a workspace names at
// most a thousand paths in all, "and N more"): the counts cover every
// change, and Truncated says the lists name fewer.
type Changes struct {
	Created  []string `json:"created"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
	// Dropped lists what the run made that did not come back into the
	// workspace, each with why (a symlink, a bound reached).
	Dropped []DroppedPath `json:"dropped,omitempty"`

	CreatedCount  int  `json:"created_count"`
	ModifiedCount int  `json:"modified_count"`
	DeletedCount  int  `json:"deleted_count"`
	DroppedCount  int  `json:"dropped_count"`
	Truncated     bool `json:"truncated,omitempty"`

	// Discarded: none of the run's changes reached the workspace; Reason
	// says why (the merge ran out of time, the disk is full...).
	Discarded bool   `json:"discarded,omitempty"`
	Reason    string `json:"reason,omitempty"`

	BytesWritten int64 `json:"bytes_written"` // apparent size of the files written back
	MergeMS      int64 `json:"merge_ms"`      // how long the write-back took
}

// DroppedPath is a path a run made that did not come back, and why: a type
// ("symlink", "fifo", "socket", "device") or a bound ("too_deep",
// "run_bytes_limit", "workspace_size_limit", ...).
type DroppedPath struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Workspace gives each run its own view of the agent's files.
type Workspace interface {
	// Open prepares a view for one run. The runtime binds View.Dir() at
	// WorkspaceDir, then calls Close once the sandbox is gone.
	Open(ctx context.Context, runID string) (View, error)
}

// KeepingWorkspace is a Workspace that can keep a session's view prepared
// between its calls (a call that changed nothing leaves it for the next,
// which takes it only if nothing changed it or the workspace since).
type KeepingWorkspace interface {
	Workspace
	NewKeeper() ViewKeeper
}

// ViewKeeper opens the views of one session's calls, one at a time.
type ViewKeeper interface {
	// Open is Workspace.Open for the session's next call.
	Open(ctx context.Context, runID string) (View, error)
	// Release lets go of the kept view (the session ended); views closed
	// afterwards are not kept.
	Release()
}

// View is one run's writable view of a workspace.
type View interface {
	// Dir is the host directory to bind at WorkspaceDir.
	Dir() string
	// Close makes the run's changes visible in the workspace, all at once,
	// and releases the view. It is called whatever the run's status.
	Close(ctx context.Context) (*Changes, error)
}
