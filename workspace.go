package sandpit

import "context"

// Changes lists workspace paths (relative to WorkspaceDir) a run changed.
type Changes struct {
	Created  []string `json:"created"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
}

// Workspace gives each run its own view of the agent's files.
type Workspace interface {
	// Open prepares a view for one run. The runtime binds View.Dir() at
	// WorkspaceDir, then calls Close once the sandbox is gone.
	Open(ctx context.Context, runID string) (View, error)
}

// View is one run's writable view of a workspace.
type View interface {
	// Dir is the host directory to bind at WorkspaceDir.
	Dir() string
	// Close makes the run's changes visible in the workspace, all at once,
	// and releases the view. It is called whatever the run's status.
	Close(ctx context.Context) (*Changes, error)
}
