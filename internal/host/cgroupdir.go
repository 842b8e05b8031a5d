package host

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// MkdirCgroup creates cgroup rel (relative to the hierarchy mounted at
// mount) and its missing parents. In a v1 cpuset hierarchy a new cgroup
// starts with no CPUs and no memory nodes, and a process cannot join it
// ("no space left on device"): each level created gets its parent's.
func MkdirCgroup(mount, rel string) (string, error) {
	dir := mount
	for _, part := range strings.Split(strings.Trim(filepath.Clean("/"+rel), "/"), "/") {
		if part == "" {
			continue
		}
		parent := dir
		dir = filepath.Join(dir, part)
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return dir, err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				break // not a cpuset hierarchy
			}
			if cur, _ := os.ReadFile(filepath.Join(dir, f)); len(bytes.TrimSpace(cur)) == 0 {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0); err != nil {
					return dir, err
				}
			}
		}
	}
	return dir, nil
}
