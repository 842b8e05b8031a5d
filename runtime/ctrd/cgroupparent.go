package ctrd

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/containerd/containerd/containers"
	coci "github.com/containerd/containerd/oci"

	"github.com/sandpit-dev/sandpit/internal/host"
)

// Where sandboxes and shims sit in the cgroup tree. By default a sandbox's
// cgroup is containerd's /<namespace>/<id> and shims stay where they were
// started. CgroupParent and ShimCgroup move them under a cgroup of the
// operator's choosing: a slice with an overall CPU or memory budget, or (as
// `sandpit bench` does) one whose counters account for everything a path
// costs.

// cgroupPath is the sandbox's cgroup, as in its spec's cgroupsPath.
func (e *Engine) cgroupPath(id string) string {
	if e.cfg.CgroupParent != "" {
		return path.Join("/", e.cfg.CgroupParent, id)
	}
	return "/" + e.cfg.Namespace + "/" + id
}

// withCgroupParent puts the sandbox's cgroup under CgroupParent; without
// one, containerd's default spec already has /<namespace>/<id>. It must
// come before the rootless fallback, which makes the path relative.
func (e *Engine) withCgroupParent() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, c *containers.Container, s *coci.Spec) error {
		if e.cfg.CgroupParent != "" && s.Linux != nil {
			s.Linux.CgroupsPath = e.cgroupPath(c.ID)
		}
		return nil
	}
}

// ensureCgroup creates cgroup p in every mounted hierarchy (a runc shim
// loads its ShimCgroup from all of them) and returns the directories.
func ensureCgroup(p string) ([]string, error) {
	var dirs []string
	for _, m := range host.CgroupMounts() {
		if m.V2 && len(host.CgroupMounts()) > 1 {
			continue // hybrid: the controllers live in the v1 hierarchies
		}
		d, err := host.MkdirCgroup(m.Point, p)
		if err != nil {
			return dirs, fmt.Errorf("create cgroup %s: %w", d, err)
		}
		dirs = append(dirs, d)
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("create cgroup %s: no cgroup hierarchy is mounted", p)
	}
	return dirs, nil
}

// moveToCgroup places process pid into cgroup p (created as needed) in
// every hierarchy.
func moveToCgroup(pid int, p string) error {
	dirs, err := ensureCgroup(p)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("move %d into %s: %w", pid, d, err)
		}
	}
	return nil
}
