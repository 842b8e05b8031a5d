package main

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"strings"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/images"
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

func doctor(c *cli.Context) []check {
	var out []check
	ctx := c.Context

	root := os.Geteuid() == 0
	out = append(out, check{name: "privileges", ok: root, warn: true,
		info: map[bool]string{true: "running as root", false: fmt.Sprintf("running as uid %d (rootless)", os.Geteuid())}[root],
		fix:  "rootless needs a rootless containerd (scripts/rootless.sh); on cgroup v1 limits cannot be enforced"})

	for _, bin := range []string{"containerd", "runc"} {
		v, err := runtime.BinaryVersion(bin)
		ch := check{name: bin + " binary", ok: err == nil, info: v}
		if err != nil {
			ch.info, ch.fix = err.Error(), "sudo apt-get install containerd runc (or scripts/install-deps.sh)"
		}
		out = append(out, ch)
	}
	if v, err := runtime.BinaryVersion("runc"); err == nil && !strings.Contains(v, "libseccomp") {
		if full, _ := execOutput("runc", "--version"); !strings.Contains(full, "libseccomp") {
			out = append(out, check{name: "runc seccomp", ok: false, info: "runc was built without libseccomp", fix: "install a runc built with seccomp (Debian's is)"})
		}
	}
	for _, alt := range []string{"runsc", "kata-runtime", "crun"} {
		if v, err := runtime.BinaryVersion(alt); err == nil {
			info := v + " (select with --runc-binary " + alt + ")"
			if alt == "crun" && runtime.DetectCgroups() == runtime.CgroupHybrid {
				info = v + ": refuses hybrid cgroup hosts like this one (\"cgroups in hybrid mode not supported\"); use runc"
			}
			out = append(out, check{name: "runtime " + alt, ok: true, info: info})
		}
	}

	addr, err := address(c)
	cd := check{name: "containerd", ok: err == nil}
	var client *containerd.Client
	if err == nil {
		v, verr := runtime.Answers(ctx, addr, 3*time.Second)
		if verr != nil {
			cd.ok, cd.info, cd.fix = false, fmt.Sprintf("%s: %v", addr, verr), "start it: sudo scripts/containerd.sh start"
		} else {
			cd.info = fmt.Sprintf("%s answers (containerd %s)", addr, v)
			client, _ = containerd.New(addr, containerd.WithDefaultNamespace(c.String("namespace")))
		}
	} else {
		cd.info, cd.fix = err.Error(), "sudo scripts/containerd.sh start, or run as root so sandpit starts its private containerd"
	}
	out = append(out, cd)

	mode := runtime.DetectCgroups()
	cg := check{name: "cgroups", ok: mode != runtime.CgroupNone, info: "cgroup " + string(mode)}
	if !root && mode != runtime.CgroupV2 {
		cg.ok, cg.info = false, "cgroup "+string(mode)+": rootless runc cannot create cgroups here, so memory/pids/CPU limits cannot be enforced"
		cg.fix = "run as root, or use a cgroup v2 host with systemd delegation"
	}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		if mode == runtime.CgroupV1 || mode == runtime.CgroupHybrid {
			if _, err := os.Stat("/sys/fs/cgroup/" + ctl); err != nil {
				cg.ok, cg.info = false, "cgroup v1 controller "+ctl+" is not mounted"
			}
		}
	}
	out = append(out, cg)
	if err := runtime.CheckRuntimeBinary(c.String("runc-binary"), mode); err != nil {
		out = append(out, check{name: "runc-binary", ok: false, info: err.Error(), fix: "--runc-binary runc"})
	}
	if c.Bool("rootless") || !root || runtime.IsRootless() {
		ok, reason := runtime.RootlessCgroups()
		lim := check{name: "limits", ok: ok, info: "rootless: " + reason}
		switch {
		case !ok && c.Bool("allow-unenforced-limits"):
			lim.warn, lim.info = true, lim.info+"; running anyway with rlimit fallbacks (--allow-unenforced-limits), each result lists what is not enforced"
		case !ok:
			lim.info += "; every run will be refused"
			lim.fix = "run as root, use cgroup v2 with systemd delegation, or opt in to rlimit fallbacks with --allow-unenforced-limits"
		}
		out = append(out, lim)
	}

	if c.Bool("userns") {
		ok, info := runtime.UserNamespacesEnabled()
		m := oci.DefaultIDMap()
		if conf := runtime.IDRangeConflicts(m); len(conf) > 0 {
			ok, info = false, fmt.Sprintf("sandbox id range %d+%d overlaps %s", m.HostBase, m.Size, strings.Join(conf, "; "))
		} else if ok {
			info += fmt.Sprintf("; sandboxes map to host ids %d..%d (owned by no user)", m.HostBase, m.HostBase+m.Size-1)
		}
		out = append(out, check{name: "user namespaces", ok: ok, info: info, fix: "enable user namespaces, or run with --userns=false (weaker)"})
	} else {
		out = append(out, check{name: "user namespaces", ok: false, warn: true, info: "disabled by --userns=false", fix: "drop --userns=false"})
	}
	out = append(out, check{name: "seccomp", ok: runtime.SeccompSupported(), info: fmt.Sprintf("kernel supports seccomp filters; %d extra syscalls denied", len(oci.DeniedSyscalls())), fix: "a kernel with CONFIG_SECCOMP_FILTER"})

	img := check{name: "image", info: images.DefaultRef}
	if client != nil {
		defer client.Close()
		nctx := namespaces.WithNamespace(ctx, c.String("namespace"))
		if v, err := images.Versions(nctx, client, images.DefaultRef); err != nil {
			img.info, img.fix = fmt.Sprintf("%s: %v", images.DefaultRef, err), "sandpit images build (about 2 minutes; needs Debian's mirror)"
		} else {
			img.ok = true
			var parts []string
			for k, val := range v {
				parts = append(parts, k+"="+val)
			}
			img.info = images.DefaultRef + " " + strings.Join(parts, ", ")
		}
	} else {
		img.info, img.fix = "cannot check without containerd", "fix containerd first"
	}
	out = append(out, img)
	return out
}

func execOutput(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := osexec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(b), err
}
