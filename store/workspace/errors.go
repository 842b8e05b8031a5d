package workspace

import (
	"fmt"

	"github.com/sandpit-dev/sandpit"
)

// Sentinel classes callers branch on with errors.Is. Each is wrapped in a
// *PathError whose message tells the model what to change.
var (
	// ErrOutsideWorkspace: the path is absolute, climbs out with "..", holds a
	// NUL byte, or goes through a symlink or hard link that may lead outside.
	ErrOutsideWorkspace = sandpit.Define(sandpit.ErrInvalidArgument, "path is outside the workspace")
	ErrInvalidPath      = sandpit.Define(sandpit.ErrInvalidArgument, "invalid path")
	ErrNotFound         = sandpit.Define(sandpit.ErrNotFound, "no such file or directory in the workspace")
	ErrExists           = sandpit.Define(sandpit.ErrConflict, "already exists in the workspace")
	ErrTooLarge         = sandpit.Define(sandpit.ErrResourceExhausted, "too large")
	ErrNotRegular       = sandpit.Define(sandpit.ErrInvalidArgument, "not a regular file")
	ErrIsDir            = sandpit.Define(sandpit.ErrInvalidArgument, "is a directory")
	ErrNotDir           = sandpit.Define(sandpit.ErrInvalidArgument, "not a directory")
	ErrQuota            = sandpit.Define(sandpit.ErrResourceExhausted, "workspace size limit reached")
	// ErrBusy: a run is writing to the workspace; a restore must wait for it.
	ErrBusy = sandpit.Define(sandpit.ErrConflict, "a run is using the workspace")
	// ErrNoUndoState: the state before a run could not be recorded, so the
	// run did not start (undo_last_run could not have taken it back).
	ErrNoUndoState = sandpit.Define(sandpit.ErrUnavailable, "the workspace's state before the run could not be recorded for undo_last_run, so the run did not start")
	// ErrNoOverlay: Options.RequireOverlay, and per-run overlays cannot be
	// mounted here (Open's error says why).
	ErrNoOverlay = sandpit.Define(sandpit.ErrUnavailable, "per-run overlays are required but unavailable")
)

// PathError is a failed operation on one workspace path.
type PathError struct {
	Op     string // "read", "write", ...
	Path   string // as the caller gave it
	Reason string // what to change, for the model
	Err    error  // one of the sentinels above, or an OS error
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Op, e.Path, e.Err)
}

// Hint is the reason, kept apart from the message: what to change.
func (e *PathError) Hint() string { return e.Reason }

func (e *PathError) Unwrap() error { return e.Err }

func pathErr(op, path string, err error, reason string, a ...any) error {
	if len(a) > 0 {
		reason = fmt.Sprintf(reason, a...)
	}
	return &PathError{Op: op, Path: path, Reason: reason, Err: err}
}
