package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// removeRunDir removes a per-run or pooled sandbox's host directory (src/,
// fifo/, ws/). ws/ is where a workspace view is attached: it is unmounted
// and then removed with rmdir only, and nothing is removed recursively while
// /proc/self/mountinfo lists a mount at or below dir. So a mount that stays
// or lands there (a failed unmount, a concurrent attach) leaves the
// directory in place instead of leading a recursive removal into a
// workspace (security review L6). What is left is logged by the caller and
// swept again later.
func removeRunDir(dir string) error {
	ws := filepath.Join(dir, "ws")
	for unix.Unmount(ws, unix.MNT_DETACH) == nil {
	}
	if err := unix.Rmdir(ws); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("run dir %s: ws/ cannot be removed (%w); left in place", dir, err)
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return fmt.Errorf("run dir %s: %w; left in place", dir, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("run dir %s: %s is mounted; left in place", dir, mounts[0])
	}
	return os.RemoveAll(dir)
}

// mountsUnder lists the mount points at or below dir in this process's
// mount namespace.
func mountsUnder(dir string) ([]string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		// id parent major:minor root mount-point options ...
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == real || strings.HasPrefix(mp, real+"/") {
			out = append(out, mp)
		}
	}
	return out, s.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
