package workspace

import (
	"path"
	"strings"
)

// Path limits: Linux's PATH_MAX and NAME_MAX.
const (
	MaxPathBytes = 4096
	MaxNameBytes = 255
)

// MountPoint is where runs see the workspace; callers may spell paths
// relative to it ("/workspace/out.csv") as the code they run does.
const MountPoint = "/workspace"

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
	if p == MountPoint || strings.HasPrefix(p, MountPoint+"/") {
		p = "." + strings.TrimPrefix(p, MountPoint)
	}
	if strings.HasPrefix(p, "/") {
		return "", pathErr(op, p, ErrOutsideWorkspace, "use a path relative to the workspace, e.g. %q, or one under %s", strings.TrimLeft(path.Base(p), "/"), MountPoint)
	}
	c := path.Clean("./" + p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", pathErr(op, p, ErrOutsideWorkspace, "\"..\" climbs out of the workspace root")
	}
	for _, name := range strings.Split(c, "/") {
		if len(name) > MaxNameBytes {
			return "", pathErr(op, p, ErrInvalidPath, "a path component is %d bytes long, at most %d are allowed", len(name), MaxNameBytes)
		}
	}
	return c, nil
}
