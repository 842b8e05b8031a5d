package workspace

import (
	"path"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// Path limits: Linux's PATH_MAX and NAME_MAX, and a depth. The file tools
// refuse paths past them; a run's entries past them are dropped at merge.
const (
	MaxPathBytes = 4096
	MaxNameBytes = 255
	MaxDepth     = 64 // path components
)

// Clean turns a caller's path into a clean slash-separated path relative to
// the workspace root, or "." for the root itself. It is purely lexical:
// symlinks are checked when the path is used.
func Clean(p string) (string, error) {
	const op = "resolve"
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return "", pathErr(op, p, ErrOutsideWorkspace, "the path contains a NUL byte")
	case len(p) > MaxPathBytes:
		return "", pathErr(op, p[:64]+"...", ErrInvalidPath, "the path is %d bytes long, at most %d are allowed", len(p), MaxPathBytes)
	}
	if p == sandpit.WorkspaceDir || strings.HasPrefix(p, sandpit.WorkspaceDir+"/") {
		p = "." + strings.TrimPrefix(p, sandpit.WorkspaceDir)
	}
	if strings.HasPrefix(p, "/") {
		return "", pathErr(op, p, ErrOutsideWorkspace, "use a path relative to the workspace, e.g. %q, or one under %s", strings.TrimLeft(path.Base(p), "/"), sandpit.WorkspaceDir)
	}
	c := path.Clean("./" + p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", pathErr(op, p, ErrOutsideWorkspace, "\"..\" climbs out of the workspace root")
	}
	names := strings.Split(c, "/")
	if len(names) > MaxDepth {
		return "", pathErr(op, p[:min(len(p), 64)]+"...", ErrInvalidPath, "the path is %d levels deep, at most %d are allowed", len(names), MaxDepth)
	}
	for _, name := range names {
		if len(name) > MaxNameBytes {
			return "", pathErr(op, p, ErrInvalidPath, "a path component is %d bytes long, at most %d are allowed", len(name), MaxNameBytes)
		}
	}
	return c, nil
}
