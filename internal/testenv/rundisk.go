package testenv

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/host"
)

// RunOnDisk returns a fresh dir under /run that is on disk, as all of /run
// is on some hosts (the CI machines among them): a dir of /var/tmp bound
// there. It skips, saying why, without real root or where /var/tmp is not
// on disk. Whatever is mounted under it is unmounted at the test's end.
func RunOnDisk(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 || host.IsRootless() {
		t.Skip("mounting needs real root (CI runs as root)")
	}
	disk, err := os.MkdirTemp("/var/tmp", "sandpit-rundisk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(disk) })
	if tmp, err := host.OnTmpfs(disk); err != nil || tmp {
		t.Skipf("/var/tmp is not on disk here (tmpfs %v, %v): nothing to stand for /run on disk", tmp, err)
	}
	run, err := os.MkdirTemp("/run", "sandpit-rundisk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(disk, run, "", unix.MS_BIND, ""); err != nil {
		os.Remove(run)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mounts, _ := host.MountsUnder(run)
		for i := len(mounts) - 1; i >= 0; i-- { // innermost first
			unix.Unmount(mounts[i], unix.MNT_DETACH)
		}
		unix.Unmount(run, unix.MNT_DETACH)
		os.RemoveAll(run)
	})
	return run
}
