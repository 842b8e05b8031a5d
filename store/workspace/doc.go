// Package workspace is the agent's directory of files, shared by the file
// tools and every run, and the only way either reaches the host's disk.
//
// # Paths
//
// Every path is relative to the workspace root ("/workspace/x" is accepted as
// "x"). Clean refuses absolute paths, "..", NUL bytes and over-long paths
// lexically; every operation then goes through an os.Root (openat2-style
// resolution that cannot leave the root) and refuses any symlink on the way
// (ErrOutsideWorkspace: sandpit never follows symlinks, even ones that stay
// inside). Reads refuse FIFOs, sockets and devices after an Lstat, open with
// O_NOFOLLOW|O_NONBLOCK and re-check the descriptor, so nothing blocks; they
// refuse regular files with more than one link, which may share an inode
// with a file outside. Resolve returns a host path with the same checks for
// tools that need one.
//
// # Runs write back within a quota, all at once
//
// Open(ctx, runID) gives a run its own view: a tmpfs of size Quota (and
// MaxFiles inodes) on <StateDir>/runs/<runID>/changes holds an overlay upper
// and work dir, and overlay(lower=workspace, upper) is mounted on
// <StateDir>/runs/<runID>/merged, which the runtime binds at /workspace. The
// run's writes land in the tmpfs: past the quota it gets ENOSPC and the
// host's disk is never touched. Close, once the sandbox is gone, unmounts the
// overlay and merges the upper dir into the workspace under the workspace's
// exclusive lock, so file tools (which take it shared) see all of the run's
// changes or none:
//   - regular files are copied to a temporary name beside their target and
//     renamed over it (atomic per file), owned by Owner, mode and mtime kept;
//   - directories are created (Owner, mode, mtime kept);
//   - whiteouts become deletions; an opaque directory (removed and recreated
//     by the run) first loses its old content;
//   - symlinks, FIFOs, sockets and devices are dropped (logged), and whatever
//     they replaced is deleted; hard links come back as independent copies.
//
// Quota bounds the size of one run's changes, not the workspace: what a run
// wrote before hitting ENOSPC comes back as it left it. Host-side writes are
// bounded by MaxSize (the whole workspace). The tmpfs pages a run writes are
// charged to the sandbox's memory cgroup, so a memory limit below the quota
// ends a big write with an OOM kill rather than ENOSPC.
//
// Open, Close and Sweep (which unmounts and removes the run directories a
// crashed server left, discarding their changes) only ever rmdir run
// directories, never remove them recursively, so a mount that failed to go
// away cannot lead a cleanup into the workspace. A crash during a merge can
// leave part of one run's changes applied; each file is whole.
//
// Without root (or a StateDir) nothing can be mounted: runs then bind the
// workspace directly, with no quota and no atomicity, entries that are not
// regular files or directories are deleted when the run ends, and Open logs
// this. Options.RequireOverlay refuses instead.
//
// # Replacing the whole tree
//
// Replace (used by snapshot restores and undo) builds a new tree in a stage
// directory beside the workspace and swaps the two with one
// renameat2(RENAME_EXCHANGE): a crash leaves the old tree or the new one,
// and Open removes the leftover stage. Replace holds the exclusive lock and
// refuses with ErrBusy while any run's view is open, so a restore never
// happens under a running program.
//
// Several workspaces (one per session, later) are several *Workspace values
// with their own roots and state directories.
package workspace
