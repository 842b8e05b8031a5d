package host

import (
	"errors"

	"golang.org/x/sys/unix"
)

// OnTmpfs reports whether path lies on a tmpfs or ramfs: memory, not disk.
func OnTmpfs(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, err
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC, nil
}

// IsMountPoint reports whether path is the root of a mount (bind mounts of
// the same filesystem included).
func IsMountPoint(path string) (bool, error) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx)
	if err == nil && stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	if err != nil && !errors.Is(err, unix.ENOSYS) {
		return false, err
	}
	// Kernels before 5.8: a mount of another filesystem changes the device.
	var self, parent unix.Stat_t
	if err := unix.Lstat(path, &self); err != nil {
		return false, err
	}
	if err := unix.Stat(path+"/..", &parent); err != nil {
		return false, err
	}
	return self.Dev != parent.Dev, nil
}
