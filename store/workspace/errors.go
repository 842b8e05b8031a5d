package workspace

import (
	"errors"
	"fmt"
)

// Sentinel classes callers branch on with errors.Is. Each is wrapped in a
// *PathError whose message tells the model what to change.
var (
	// ErrOutsideWorkspace: the path is absolute, climbs out with "..", holds a
	// NUL byte, or goes through a symlink or hard link that may lead outside.
	ErrOutsideWorkspace = errors.New("path is outside the workspace")
	ErrInvalidPath      = errors.New("invalid path")
	ErrNotFound         = errors.New("no such file or directory in the workspace")
	ErrExists           = errors.New("already exists in the workspace")
	ErrTooLarge         = errors.New("too large")
	ErrNotRegular       = errors.New("not a regular file")
	ErrIsDir            = errors.New("is a directory")
	ErrNotDir           = errors.New("not a directory")
	ErrQuota            = errors.New("workspace size limit reached")
	// ErrBusy: a run is writing to the workspace; a restore must wait for it.
	ErrBusy = errors.New("a run is using the workspace")
)

// PathError is a failed operation on one workspace path.
type PathError struct {
	Op     string // "read", "write", ...
	Path   string // as the caller gave it
	Reason string // what to change, for the model
	Err    error  // one of the sentinels above, or an OS error
}

func (e *PathError) Error() string {
	msg := fmt.Sprintf("%s %q: %v", e.Op, e.Path, e.Err)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg
}

func (e *PathError) Unwrap() error { return e.Err }

func pathErr(op, path string, err error, reason string, a ...any) error {
	if len(a) > 0 {
		reason = fmt.Sprintf(reason, a...)
	}
	return &PathError{Op: op, Path: path, Reason: reason, Err: err}
}
