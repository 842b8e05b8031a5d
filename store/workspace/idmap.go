package workspace

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// idmap gives runs the workspace as if its files were the sandbox user's,
// while on disk they stay the workspace owner's: each run's overlay has as
// its lower layer an idmapped bind of the workspace (Linux 5.19+ for
// idmapped overlay layers) that shows the owner's files as the sandbox
// user's, and the sandbox's writes to them as the owner's. Files a run
// creates come back through the merge, which gives them to the owner. So a
// user who points --workspace at their own project keeps it theirs.
type idmap struct {
	userns *os.File // a user namespace mapping owner -> sandbox user, held open
}

// newIDMap makes the user namespace the binds are idmapped with: inside id
// owner is outside id sandbox (for both uid and gid), which is how an
// idmapped mount shows a file of owner (see mount_setattr(2)).
func newIDMap(owner, sandbox Owner) (*idmap, error) {
	// A process is needed to own the namespace while we open it; cat
	// waits on its stdin until we close it.
	cmd := exec.Command("cat")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(owner.UID), HostID: int(sandbox.UID), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(owner.GID), HostID: int(sandbox.GID), Size: 1}},
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace for the idmapped workspace: %w", err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("user namespace for the idmapped workspace: %w", err)
	}
	return &idmap{userns: f}, nil
}

// bind mounts src at dst (an empty dir), idmapped. The mount is private to
// this mount namespace and not recursive.
func (m *idmap) bind(src, dst string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone the workspace mount: %w", err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(m.userns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmap the workspace mount: %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the idmapped workspace: %w", err)
	}
	return nil
}

func (m *idmap) close() {
	if m != nil && m.userns != nil {
		m.userns.Close()
	}
}
