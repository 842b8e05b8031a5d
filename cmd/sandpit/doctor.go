package main

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/oci"
	"github.com/sandpit-dev/sandpit/runtime"
)

type check struct {
	name string
	ok   bool
	warn bool // not fatal
	info string
	fix  string
}

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check containerd, runc, cgroups, user namespaces, seccomp and images; say how to fix what is wrong",
		Flags: containerdFlags(),
		Action: func(c *cli.Context) error {
			checks := doctor(c)
			failed := 0
			for _, ch := range checks {
				mark := "ok  "
				switch {
				case !ch.ok && ch.warn:
					mark = "warn"
				case !ch.ok:
					mark = "FAIL"
					failed++
				}
				fmt.Fprintf(c.App.Writer, "[%s] %-22s %s\n", mark, ch.name, ch.info)
				if !ch.ok && ch.fix != "" {
					fmt.Fprintf(c.App.Writer, "       %-22s fix: %s\n", "", ch.fix)
				}
			}
			if failed > 0 {
				return cli.Exit(fmt.Sprintf("%d check(s) failed", failed), 1)
			}
			return nil
		},
	}
}

// doctorCheck is one named check; it may report several lines (a binary
// each, say) and is skipped with its reason when a check it needs failed.
type doctorCheck struct {
	name string
	run  func(d *doctorEnv) []check
}

// doctorEnv is what checks share: the flags, and what earlier checks found.
type doctorEnv struct {
	c      *cli.Context
	root   bool
	addr   string // containerd's address, once it answers
	mode   host.CgroupMode
	images *images.Store // set when containerd answers
}

// doctorChecks run in order: later ones use what earlier ones found.
var doctorChecks = []doctorCheck{
	{"privileges", checkPrivileges},
	{"binaries", checkBinaries},
	{"containerd", checkContainerd},
	{"cgroups", checkCgroups},
	{"limits", checkRootlessLimits},
	{"user namespaces", checkUserNS},
	{"seccomp", checkSeccomp},
	{"image", checkImage},
	{"state dirs", checkStateDirs},
}

func doctor(c *cli.Context) []check {
	d := &doctorEnv{c: c, root: os.Geteuid() == 0, mode: host.DetectCgroups()}
	defer func() {
		if d.images != nil {
			d.images.Close()
		}
	}()
	var out []check
	for _, dc := range doctorChecks {
		out = append(out, dc.run(d)...)
	}
	return out
}

func checkPrivileges(d *doctorEnv) []check {
	return []check{{name: "privileges", ok: d.root, warn: true,
		info: map[bool]string{true: "running as root", false: fmt.Sprintf("running as uid %d (rootless)", os.Geteuid())}[d.root],
		fix:  "rootless needs a rootless containerd (scripts/rootless.sh); on cgroup v1 limits cannot be enforced"}}
}

func checkBinaries(d *doctorEnv) []check {
	var out []check
	for _, bin := range []string{"containerd", "runc"} {
		v, err := host.BinaryVersion(bin)
		ch := check{name: bin + " binary", ok: err == nil, info: v}
		if err != nil {
			ch.info, ch.fix = err.Error(), "sudo apt-get install containerd runc (or scripts/install-deps.sh)"
		}
		out = append(out, ch)
	}
	if v, err := host.BinaryVersion("runc"); err == nil && !strings.Contains(v, "libseccomp") {
		if full, _ := execOutput("runc", "--version"); !strings.Contains(full, "libseccomp") {
			out = append(out, check{name: "runc seccomp", ok: false, info: "runc was built without libseccomp", fix: "install a runc built with seccomp (Debian's is)"})
		}
	}
	// Other OCI runtimes are listed, not recommended: sandpit's shim never
	// executes one, and no test of sandpit's runs under any but runc.
	for _, alt := range []string{"runsc", "kata-runtime", "crun"} {
		if v, err := host.BinaryVersion(alt); err == nil {
			info := v + ": not used by sandpit's shim; untested and unsupported under --runtime io.containerd.runc.v2 --runc-binary " + alt
			if alt == "crun" && d.mode == host.CgroupHybrid {
				info = v + ": refuses hybrid cgroup hosts like this one (\"cgroups in hybrid mode not supported\"); use runc"
			}
			out = append(out, check{name: "runtime " + alt, ok: true, info: info})
		}
	}
	if err := runtime.CheckRuntimeBinary(d.c.String("runc-binary"), d.mode); err != nil {
		out = append(out, check{name: "runc-binary", ok: false, info: err.Error(), fix: sandpit.HintOf(err)})
	}
	if cfg := runtimeConfig(d.c, ""); cfg.UsesShim() {
		cfg.Defaults()
		if err := cfg.CheckOCIBinary(); err != nil {
			out = append(out, check{name: "runc-binary", ok: false, info: err.Error(), fix: sandpit.HintOf(err)})
		}
		ch := check{name: "sandpit shim", ok: true, info: "runtime " + cfg.RuntimeName + ": " + filepath.Join(cfg.ShimDir, runtime.ShimDaemonBinary)}
		if err := cfg.CheckShim(); err != nil {
			ch.ok, ch.info, ch.fix = false, err.Error(), sandpit.HintOf(err)
		}
		out = append(out, ch)
		if ch.ok {
			init, ok := cfg.ShimInit()
			ich := check{name: "sandpit shim init", ok: ok, warn: true, info: init}
			if !ich.ok {
				ich.info = init + " is missing: each sandbox's init runs from sandpit-shim itself, ≈ 1.5 ms slower to create"
				ich.fix = "scripts/build.sh builds it beside sandpit-shim"
			}
			out = append(out, ich)
		}
	}
	return out
}

// checkStateDirs warns when the dirs where every sandbox's files and FIFOs
// are made are on disk: see runtime.StateOnTmpfs.
func checkStateDirs(d *doctorEnv) []check {
	dirs := []string{d.c.String("state-dir")}
	if priv := privateDaemon(d.c); d.addr == "" || d.addr == priv.Address() {
		dirs = append(dirs, priv.StateDir())
	}
	var out []check
	for _, dir := range dirs {
		ch := check{name: "state on tmpfs", ok: true, warn: true, info: dir + " is on a tmpfs"}
		switch onTmpfs, err := host.OnTmpfs(dir); {
		case os.IsNotExist(err):
			ch.info = dir + " does not exist yet: sandpit mounts a tmpfs there when it creates it under /run on a disk"
		case err != nil:
			ch.ok, ch.info = false, err.Error()
		case !onTmpfs:
			ch.ok, ch.info = false, dir+" is on disk: every sandbox's files and FIFOs cost more CPU there (≈ 17 % of a run on ext4)"
			ch.fix = "stop sandpit and containerd, empty the dir and start again (sandpit then mounts a tmpfs on its default state dir and on its private containerd's), or mount one yourself"
		}
		out = append(out, ch)
	}
	return out
}

func checkContainerd(d *doctorEnv) []check {
	addr, err := address(d.c)
	if err != nil {
		return []check{{name: "containerd", info: err.Error(), fix: "sudo scripts/containerd.sh start, or run as root so sandpit starts its private containerd"}}
	}
	v, err := runtime.Answers(d.c.Context, addr, 3*time.Second)
	if err != nil {
		return []check{{name: "containerd", info: fmt.Sprintf("%s: %v", addr, err), fix: "start it: sudo scripts/containerd.sh start"}}
	}
	d.addr = addr
	d.images, _ = images.Connect(d.c.Context, addr, d.c.String("namespace"), 3*time.Second)
	return []check{{name: "containerd", ok: true, info: fmt.Sprintf("%s answers (containerd %s)", addr, v)}}
}

func checkCgroups(d *doctorEnv) []check {
	cg := check{name: "cgroups", ok: d.mode != host.CgroupNone, info: "cgroup " + string(d.mode)}
	if !d.root && d.mode != host.CgroupV2 {
		cg.ok, cg.info = false, "cgroup "+string(d.mode)+": rootless runc cannot create cgroups here, so memory/pids/CPU limits cannot be enforced"
		cg.fix = "run as root, or use a cgroup v2 host with systemd delegation"
	}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		if d.mode == host.CgroupV1 || d.mode == host.CgroupHybrid {
			if _, err := os.Stat("/sys/fs/cgroup/" + ctl); err != nil {
				cg.ok, cg.info = false, "cgroup v1 controller "+ctl+" is not mounted"
			}
		}
	}
	return []check{cg}
}

func checkRootlessLimits(d *doctorEnv) []check {
	if !d.c.Bool("rootless") && d.root && !host.IsRootless() {
		return nil
	}
	ok, reason := runtime.RootlessCgroups(d.addr)
	lim := check{name: "limits", ok: ok, info: "rootless: " + reason}
	switch {
	case !ok && d.c.Bool("allow-unenforced-limits"):
		lim.warn, lim.info = true, lim.info+"; running anyway with rlimit fallbacks (--allow-unenforced-limits), each result lists what is not enforced"
	case !ok:
		lim.info += "; every run will be refused"
		lim.fix = "run as root, use cgroup v2 with systemd delegation, or opt in to rlimit fallbacks with --allow-unenforced-limits"
	}
	return []check{lim}
}

func checkUserNS(d *doctorEnv) []check {
	if !d.c.Bool("userns") {
		return []check{{name: "user namespaces", ok: false, warn: true, info: "disabled by --userns=false", fix: "drop --userns=false"}}
	}
	ok, info := host.UserNamespacesEnabled()
	m := oci.DefaultIDMap()
	if conf := host.IDRangeConflicts(m.HostBase, m.Size); len(conf) > 0 {
		ok, info = false, fmt.Sprintf("sandbox id range %d+%d overlaps %s", m.HostBase, m.Size, strings.Join(conf, "; "))
	} else if ok {
		info += fmt.Sprintf("; sandboxes map to host ids %d..%d (owned by no user)", m.HostBase, m.HostBase+m.Size-1)
	}
	return []check{{name: "user namespaces", ok: ok, info: info, fix: "enable user namespaces, or run with --userns=false (weaker)"}}
}

func checkSeccomp(*doctorEnv) []check {
	return []check{{name: "seccomp", ok: host.SeccompSupported(), info: fmt.Sprintf("kernel supports seccomp filters; %d extra syscalls denied", len(oci.DeniedSyscalls())), fix: "a kernel with CONFIG_SECCOMP_FILTER"}}
}

// checkImage checks every image the catalog's languages run on.
func checkImage(d *doctorEnv) []check {
	cat := mustCatalog(d.c)
	var out []check
	for _, name := range cat.UsedImages() {
		r, err := cat.Recipe(name)
		if err != nil {
			out = append(out, check{name: "image", info: err.Error(), fix: "fix the catalog (--catalog)"})
			continue
		}
		img := check{name: "image " + name, info: r.Ref}
		if d.images == nil {
			img.info, img.fix = "cannot check without containerd", "fix containerd first"
			out = append(out, img)
			continue
		}
		v, err := d.images.Versions(d.c.Context, r.Ref)
		if err != nil {
			img.info, img.fix = fmt.Sprintf("%s: %v", r.Ref, err), "sandpit images build "+name+" (minutes the first time; needs Debian's mirror)"
			out = append(out, img)
			continue
		}
		img.ok = true
		var parts []string
		for k, val := range v {
			parts = append(parts, k+"="+val)
		}
		sort.Strings(parts)
		img.info = r.Ref + " " + strings.Join(parts, ", ")
		out = append(out, img)
	}
	return out
}

func execOutput(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := osexec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(b), err
}
