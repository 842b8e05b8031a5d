// Package workspace is the agent's directory of files, shared by the file
// tools and every run, and the only way either reaches the host's disk.
//
// # Paths
//
// Every path is relative to the workspace root ("/workspace/x" is accepted as
// "x"). Clean refuses absolute paths, "..", NUL bytes, and paths longer than
// MaxPathBytes or deeper than MaxDepth, lexically; names starting with
// sandpit's reserved prefix ".sandpit-tmp-" are refused too (its own
// temporary files, which snapshots skip). Every operation then goes through
// an os.Root (openat2-style resolution that cannot leave the root) and refuses any symlink on the way
// (ErrOutsideWorkspace: sandpit never follows symlinks, even ones that stay
// inside). Reads refuse FIFOs, sockets and devices after an Lstat, open with
// O_NOFOLLOW|O_NONBLOCK and re-check the descriptor, so nothing blocks; they
// refuse regular files with more than one link, which may share an inode
// with a file outside. Resolve returns a host path with the same checks for
// tools that need one.
//
// # Runs write back within bounds, all at once
//
// Open(ctx, runID) first calls BeforeRun (the undo record); if that fails
// the run does not start (ErrNoUndoState), so undo never has to skip a run.
// It then gives the run its own view: a tmpfs of size Quota on
// <StateDir>/runs/<runID>/changes holds an overlay upper and work dir, and
// overlay(lower=workspace, upper) is mounted on <StateDir>/runs/<runID>/merged,
// which the runtime binds at /workspace. The run's writes land in the tmpfs:
// past the quota it gets ENOSPC and the host's disk is never touched. The
// tmpfs has MaxFiles inodes plus one per entry of the workspace, because
// each file a run deletes leaves a whiteout that takes an inode.
//
// Close, once the sandbox is gone, unmounts the overlay and merges the upper
// dir into the workspace (merge.go) in two phases. The first, without the
// workspace lock and bounded by MergeTimeout, walks the upper dir with one
// descriptor per directory (never a host path, so no PATH_MAX), checks each
// entry against the bounds and copies each regular file that passes into a
// staging directory inside the workspace, sparse-aware. If it fails or runs
// out of time, nothing is applied. The second, under the workspace's
// exclusive lock (file tools, which take it shared, see all of the run's
// changes or none), does only metadata work bounded by counts: deletions
// first, then directories and one rename per file, then directory modes and
// mtimes:
//   - regular files keep mode and mtime and are owned by Owner (atomic per
//     file); directories likewise;
//   - whiteouts become deletions; an opaque directory (removed and recreated
//     by the run) first loses its old content;
//   - symlinks, FIFOs, sockets and devices are dropped, and whatever they
//     replaced is deleted; hard links come back as independent copies;
//   - entries deeper than MaxDepth or longer than MaxPathBytes, names with
//     sandpit's reserved prefix (.sandpit-tmp-), files past MaxFiles or
//     MaxRunBytes (apparent size) for the run, and files that would take the
//     workspace past MaxSize or MaxWorkspaceFiles are dropped;
//   - every drop is reported with its reason in the Changes, whose lists are
//     bounded (MaxListed paths, MaxListedBytes) with counts of everything.
//
// Nothing the model reads names a host path: per-entry errors are reported
// as "error" drops and logged with relative paths; a failure of the merge
// as a whole is a Changes with Discarded and a Reason. Close never returns
// an error for an overlay view, so a run's output is never lost to its
// write-back. The tmpfs pages a run writes are charged to the sandbox's
// memory cgroup, so a memory limit below the quota ends a big write with an
// OOM kill rather than ENOSPC.
//
// Open, Close and Sweep (which unmounts and removes the run directories a
// crashed server left, discarding their changes) only ever rmdir run
// directories, never remove them recursively, so a mount that failed to go
// away cannot lead a cleanup into the workspace. A crash during the apply
// phase can leave part of one run's changes applied; each file is whole,
// and Open removes leftover staging directories.
//
// Without root (or a StateDir) nothing can be mounted: runs then bind the
// workspace directly, with no quota, no bounds on what a run writes and no
// atomicity, entries that are not regular files or directories are deleted
// when the run ends, and Open logs this. Options.RequireOverlay refuses
// instead. Other runs may write the workspace meanwhile, so every walk of it
// goes by descriptor (walkAt): nothing is listed, statted or removed through
// a path a run could swap for a symlink out of the workspace.
//
// # Views kept for the next call or run
//
// A session's calls open their views through a keeper (NewKeeper, one per
// session; keep.go), and runs through the workspace's own (the spare,
// released by Close): a call or run that changed nothing leaves its view
// mounted, and the next one takes it instead of mounting another — only if its
// upper dir is still empty and the workspace's fingerprint (every entry's
// inode, size, mode, mtime and ctime, the root included) is the one taken
// before that view was mounted. Any change since, a restore or a host edit
// included, makes the next call mount afresh: an overlay caches what it
// looked up, so a view mounted before a change is never reused. The undo
// record (BeforeRun) is still taken for every call.
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
