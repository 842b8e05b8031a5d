package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// A pooled sandbox or a session is created before it knows its request's
// workspace and package layer, so both arrive by mount propagation: dir/ws
// and dir/env are shared mount points, bound (rslave) into the sandbox at
// WorkspaceDir and EnvDir; a request mounts its view on ws/ and its layer
// on env/, and both appear inside.
//
// The layer must be read-only inside, and a remount's flags do not
// propagate: a bind of a read-only mount is read-only, and so is its
// propagated copy. So the layer is first bound at dir/envro and made
// read-only there, then that mount is bound on env/.

// attachPoints makes dir/ws and dir/env shared mount points and returns the
// options binding them into a sandbox.
func attachPoints(dir string) ([]engine.Mount, error) {
	for _, d := range []string{"ws", "env", "envro"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"ws", "env"} {
		p := filepath.Join(dir, d)
		if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("pooled sandboxes and sessions need mount privileges: %w", err)
		}
		if err := unix.Mount("", p, "", unix.MS_SHARED, ""); err != nil {
			return nil, fmt.Errorf("make %s shared: %w", p, err)
		}
	}
	// Exec-able, receiving mounts made on the host side later (rslave).
	return []engine.Mount{
		{Source: filepath.Join(dir, "ws"), Destination: sandpit.WorkspaceDir, Writable: true, Exec: true, Slave: true},
		{Source: filepath.Join(dir, "env"), Destination: sandpit.EnvDir, Exec: true, Slave: true},
	}, nil
}

// attachEnv shows layer, read-only, at EnvDir in the sandbox of dir.
func attachEnv(dir, layer string) error {
	ro := filepath.Join(dir, "envro")
	if err := unix.Mount(layer, ro, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("attach package layer: %w", err)
	}
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		unix.Unmount(ro, unix.MNT_DETACH)
		return fmt.Errorf("attach package layer read-only: %w", err)
	}
	if err := unix.Mount(ro, filepath.Join(dir, "env"), "", unix.MS_BIND, ""); err != nil {
		unix.Unmount(ro, unix.MNT_DETACH)
		return fmt.Errorf("attach package layer: %w", err)
	}
	return nil
}

// detachEnv undoes attachEnv; a dir without a layer attached is fine.
func detachEnv(dir string) error {
	var errs []error
	for _, d := range []string{"env", "envro"} {
		if err := unix.Unmount(filepath.Join(dir, d), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("detach package layer: %w", err))
		}
	}
	return errors.Join(errs...)
}
