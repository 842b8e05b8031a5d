package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

// removed are rootfs paths (globs) a sandbox never needs: package caches,
// documentation and translations. They make up a fifth of a fresh rootfs.
var removed = []string{
	"var/cache/apt/*",
	"var/lib/apt/lists/*",
	"var/cache/debconf/*-old",
	"var/log/*",
	"usr/share/doc/*",
	"usr/share/man/*",
	"usr/share/info/*",
	"usr/share/locale/*",
	"usr/share/lintian/*",
	"dev/*", // runc gives every container its own /dev
	"debootstrap",
}

// customise turns a fresh debootstrap into a sandbox rootfs: it removes
// what no sandbox needs, drops what came from the build host (hostname,
// resolver), adds the unprivileged sandbox user and creates every
// mountpoint the runtime uses. It is idempotent.
func customise(rootfs string) error {
	for _, pattern := range removed {
		matches, err := filepath.Glob(filepath.Join(rootfs, pattern))
		if err != nil {
			return fmt.Errorf("customise rootfs: %w", err)
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("customise rootfs: %w", err)
			}
		}
	}
	dirs := []struct {
		path string
		mode os.FileMode
	}{
		{"etc", 0o755},
		{"tmp", os.ModeSticky | 0o777},
		{"proc", 0o555},
		{"sys", 0o555},
		{"dev", 0o755},
		{"dev/shm", os.ModeSticky | 0o777},
		{"dev/pts", 0o755},
		{"dev/mqueue", 0o755},
		{"sandpit", 0o755},
	}
	for _, m := range sandpit.Mountpoints {
		dirs = append(dirs, struct {
			path string
			mode os.FileMode
		}{strings.TrimPrefix(m, "/"), 0o755})
	}
	for _, d := range dirs {
		p := filepath.Join(rootfs, d.path)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("customise rootfs: %w", err)
		}
		// MkdirAll honours the umask and leaves existing dirs alone:
		// set the mode that the runtime relies on explicitly.
		if err := os.Chmod(p, d.mode); err != nil {
			return fmt.Errorf("customise rootfs: %w", err)
		}
	}
	files := map[string]string{
		"etc/hostname":    "sandpit\n",
		"etc/hosts":       "127.0.0.1\tlocalhost sandpit\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/resolv.conf": "", // sandboxes have no network
	}
	for name, content := range files {
		p := filepath.Join(rootfs, name)
		_ = os.Remove(p) // may be a symlink to the host's resolver
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("customise rootfs: %w", err)
		}
	}
	return addUser(rootfs)
}

// addUser adds the sandbox user and group unless they are already there.
// An existing entry with the same name but another id, or the same id under
// another name, is an error: the runtime relies on both.
func addUser(rootfs string) error {
	entries := []struct {
		file, name, line string
		id               int
	}{
		{"etc/passwd", sandpit.SandboxUser, fmt.Sprintf("%s:x:%d:%d:sandpit sandbox:/tmp:/bin/bash", sandpit.SandboxUser, sandpit.SandboxUID, sandpit.SandboxGID), sandpit.SandboxUID},
		{"etc/group", sandpit.SandboxUser, fmt.Sprintf("%s:x:%d:", sandpit.SandboxUser, sandpit.SandboxGID), sandpit.SandboxGID},
	}
	for _, e := range entries {
		p := filepath.Join(rootfs, e.file)
		data, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("add sandbox user: %w", err)
		}
		present := false
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) < 3 {
				continue
			}
			id, _ := strconv.Atoi(fields[2])
			switch {
			case fields[0] == e.name && id == e.id:
				present = true
			case fields[0] == e.name || id == e.id:
				return fmt.Errorf("add sandbox user: %s already has %q, which clashes with %s id %d: %w",
					e.file, line, e.name, e.id, ErrInvalidRecipe)
			}
		}
		if present {
			continue
		}
		if len(data) > 0 && !bytes.HasSuffix(data, []byte("\n")) {
			data = append(data, '\n')
		}
		data = append(data, e.line+"\n"...)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("add sandbox user: %w", err)
		}
	}
	return nil
}

// debootstrap installs a minimal Debian with the recipe's packages into
// rootfs. Its output goes to out.
func debootstrap(ctx context.Context, r Recipe, mirror, rootfs string, out io.Writer) error {
	if os.Geteuid() != 0 {
		return sandpit.WithHint(fmt.Errorf("building an image runs debootstrap and chroot, which need root: %w", ErrBuild), "run `sudo sandpit images build`, or `sandpit images import FILE` an archive built elsewhere")
	}
	path, err := exec.LookPath("debootstrap")
	if err != nil {
		return sandpit.WithHint(fmt.Errorf("debootstrap is not installed: %w", ErrBuild), "apt-get install debootstrap")
	}
	args := []string{"--variant=minbase"}
	if pkgs := r.all(); len(pkgs) > 0 {
		args = append(args, "--include="+strings.Join(pkgs, ","))
	}
	args = append(args, r.Suite, rootfs, mirror)
	cmd := exec.CommandContext(ctx, path, args...)
	if host.InUserNamespace() {
		// Rootless (root of rootlesskit's user namespace): device nodes
		// cannot be made there, and /proc can be mounted only in a pid
		// namespace of our own. In container mode ("container=lxc")
		// debootstrap bind-mounts the host's device nodes instead of
		// mknod'ing them; unshare gives it the pid and mount namespaces.
		unshareArgs := append([]string{"--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", "--", "env", "container=lxc", path}, args...)
		cmd = exec.CommandContext(ctx, "unshare", unshareArgs...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := runGroup(cmd); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("debootstrap %s from %s: %v: %w", r.Suite, mirror, err, ErrBuild)
	}
	return nil
}

// runGroup runs a build tool (debootstrap) in a process group of its own
// and ends the whole group with it: debootstrap runs wget, apt, dpkg and
// maintainer scripts, which a signal to debootstrap alone left running
// (for minutes, after a server whose client had gone away exited).
//
// When cmd's context is done, the group gets SIGTERM: debootstrap unmounts
// /proc and /sys inside the target from an exit trap, which a SIGKILL would
// skip. What is still there when cmd has been waited for (or WaitDelay
// later) gets SIGKILL. Should this process die first, the kernel sends the
// tool SIGTERM (Pdeathsig), since no cancel runs then.
func runGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	// Wait for the leader to exit without reaping it: while it is a zombie
	// its pid, the group's id, cannot be given to another process, so the
	// SIGKILL reaches only what the tool left behind.
	pid := cmd.Process.Pid
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
	for err == unix.EINTR {
		err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
	}
	if err == nil {
		if kerr := unix.Kill(-pid, unix.SIGKILL); kerr != nil && kerr != unix.ESRCH {
			slog.Warn("debootstrap's process group not killed", "pgid", pid, "err", kerr)
		}
	}
	return cmd.Wait()
}

// probeEnv is the environment language probes run with.
var probeEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/tmp"}

// chrootProbe runs argv inside rootfs (chroot, needs root) and returns its
// combined output.
func chrootProbe(ctx context.Context, rootfs string, argv []string) (string, error) {
	// /usr/bin/env resolves the command on the rootfs's PATH; a bare name
	// would be looked up on the host's before the chroot.
	cmd := exec.CommandContext(ctx, "/usr/bin/env", argv...)
	cmd.Env = probeEnv
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s in rootfs: %v: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// probeFunc runs a command inside a rootfs; tests replace the chroot.
type probeFunc func(ctx context.Context, rootfs string, argv []string) (string, error)

// probeVersions asks each language of the recipe for its version and
// returns the image labels that record them.
func probeVersions(ctx context.Context, r Recipe, rootfs string, probe probeFunc) (map[string]string, error) {
	labels := make(map[string]string, len(r.Languages))
	for _, l := range r.Languages {
		out, err := probe(ctx, rootfs, l.Command)
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w: %w", l.Name, err, ErrBuild)
		}
		v, ok := parseVersion(out)
		if !ok {
			return nil, fmt.Errorf("probe %s: no version number in %q: %w", l.Name, firstLine(out), ErrBuild)
		}
		labels[LabelVersionPrefix+l.Name] = l.Prefix + v
	}
	return labels, nil
}

// writeFiles writes the recipe's files into rootfs, world-readable, with
// their parent directories. A path that leads through a symlink is refused:
// the rootfs's links point into itself, but followed from the host they
// would point into the host.
func writeFiles(rootfs string, files map[string]string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("recipe files: %w", err)
	}
	defer root.Close()
	for p, content := range files {
		rel := strings.TrimPrefix(p, "/")
		if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("recipe file %s: %w", p, err)
		}
		if err := root.WriteFile(rel, []byte(strings.TrimPrefix(content, "\n")), 0o644); err != nil {
			return fmt.Errorf("recipe file %s: %w", p, err)
		}
	}
	return nil
}

// runSetup runs the recipe's setup commands in rootfs, in order.
func runSetup(ctx context.Context, r Recipe, rootfs string, probe probeFunc) error {
	for _, cmd := range r.Setup {
		if _, err := probe(ctx, rootfs, []string{"/bin/sh", "-ec", cmd}); err != nil {
			return fmt.Errorf("recipe %s setup: %w: %w", r.Name, err, ErrBuild)
		}
	}
	return nil
}

// probeLibraries records the version of each library's Debian package and
// of each package added on top of the recipe, from dpkg's database.
func probeLibraries(ctx context.Context, r Recipe, rootfs string, probe probeFunc) (map[string]string, error) {
	pkgs := slices.Clone(r.Extra)
	for _, l := range r.Libraries {
		pkgs = append(pkgs, l.Package)
	}
	labels := map[string]string{}
	if len(pkgs) == 0 {
		return labels, nil
	}
	out, err := probe(ctx, rootfs, append([]string{"dpkg-query", "-W", "-f", "${Package}\t${Version}\n"}, pkgs...))
	if err != nil {
		return nil, fmt.Errorf("library versions: %w: %w", err, ErrBuild)
	}
	versions := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, v, ok := strings.Cut(line, "\t"); ok && v != "" {
			versions[strings.TrimSpace(name)] = upstreamVersion(strings.TrimSpace(v))
		}
	}
	for _, l := range r.Libraries {
		v, ok := versions[l.Package]
		if !ok {
			return nil, fmt.Errorf("library %s: package %s is not installed: %w", l.Name, l.Package, ErrBuild)
		}
		labels[LabelLibraryPrefix+l.Language+"."+l.Name] = v
	}
	for _, p := range r.Extra {
		if v, ok := versions[p]; ok {
			labels[LabelPackagePrefix+p] = v
		}
	}
	return labels, nil
}

// upstreamVersion is a Debian version without its epoch, Debian revision
// and repack suffix: "1:1.24.2-3" → "1.24.2", "1.5.3+dfsg-2" → "1.5.3".
func upstreamVersion(v string) string {
	if _, after, ok := strings.Cut(v, ":"); ok {
		v = after
	}
	if i := strings.LastIndexByte(v, '-'); i > 0 {
		v = v[:i]
	}
	if i := strings.IndexAny(v, "+~"); i > 0 {
		v = v[:i]
	}
	return v
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// tail keeps the last lines written to it, so a failed build can say why
// even when its output was not shown.
type tail struct {
	lines []string
	max   int
	part  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.part = append(t.part, p...)
	for {
		i := bytes.IndexByte(t.part, '\n')
		if i < 0 {
			break
		}
		t.lines = append(t.lines, string(t.part[:i]))
		if len(t.lines) > t.max {
			t.lines = t.lines[len(t.lines)-t.max:]
		}
		t.part = t.part[i+1:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	lines := t.lines
	if len(t.part) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(t.part))
	}
	if len(lines) > t.max {
		lines = lines[len(lines)-t.max:]
	}
	return strings.Join(lines, "\n")
}
