package workspace

import "os"

// OpenFile opens the regular file p for reading and returns the descriptor,
// for readers that stream a workspace file themselves (the data tools). It
// never follows a path by name after checking it: the file is opened through
// the workspace's os.Root with O_NOFOLLOW|O_NONBLOCK, so a symlink a running
// program swaps into p or into a parent fails instead of leading outside, and
// a FIFO never blocks the open. Its type is checked on the descriptor:
// symlinks, directories, FIFOs, sockets, devices and hard links are refused
// with the same classes as Read. The caller closes the file.
//
// The lock is held only while opening: the descriptor stays valid and keeps
// naming the same file whatever happens to the path afterwards.
func (w *Workspace) OpenFile(p string) (*os.File, error) {
	const op = "open"
	var f *os.File
	err := w.withRoot(false, func(r *os.Root) error {
		c, err := w.check(r, op, p, true)
		if err != nil {
			return err
		}
		if c == "." {
			return pathErr(op, p, ErrIsDir, "name a file")
		}
		f, _, err = openRegular(r, op, p, c)
		return err
	})
	return f, err
}
