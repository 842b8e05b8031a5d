package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit/internal/host"
)

// CPU per sandbox: everything the host spends on one run of a path — the
// caller, containerd, shims, runc and the sandbox itself. Each comparator
// that can be accounted gets a cgroup of its own (cgroups.go), which holds
// its server, its shims and its sandboxes: its counter is exact whatever
// runs beside it. What paths share — containerd, and this process with the
// children it reaps (the `runc run` and host processes, in-process
// runtimes, MCP clients) — is charged to the comparator whose throughput
// round is running, after a wait for its background work to finish.

// Cgroups are the bench's cgroups: one per comparator under a root named
// for this process, in every mounted hierarchy.
type Cgroups struct {
	root string   // relative to each hierarchy, e.g. /sandpit-bench-123
	acct string   // the hierarchy with CPU accounting (v1 cpuacct, or v2)
	v2   bool     // acct is cgroup2
	all  []string // every hierarchy's mount point
}

// NewCgroups finds the hierarchies; nothing is created yet.
func NewCgroups(name string) (*Cgroups, error) {
	mounts := host.CgroupMounts()
	g := &Cgroups{root: "/" + name}
	hybrid := len(mounts) > 1
	for _, m := range mounts {
		if m.V2 && hybrid {
			continue // hybrid: the controllers live in the v1 hierarchies
		}
		g.all = append(g.all, m.Point)
		switch {
		case m.V2:
			g.acct, g.v2 = m.Point, true
		case slices.Contains(strings.Split(m.Opts, ","), "cpuacct"):
			g.acct = m.Point
		}
	}
	if g.acct == "" {
		return nil, errors.New("no cgroup hierarchy accounts CPU (cpuacct or cgroup2)")
	}
	return g, nil
}

// Group is one comparator's cgroup: Procs holds its processes (a server,
// shims), Sandboxes is the parent of its sandboxes' cgroups. Both paths are
// relative to a hierarchy's root, as a spec's cgroupsPath is.
type Group struct {
	g         *Cgroups
	Path      string
	Procs     string
	Sandboxes string
}

// Group creates the cgroup of comparator name in every hierarchy.
func (g *Cgroups) Group(name string) (*Group, error) {
	p := g.root + "/" + name
	grp := &Group{g: g, Path: p, Procs: p + "/procs", Sandboxes: p + "/sb"}
	for _, h := range g.all {
		for _, d := range []string{grp.Procs, grp.Sandboxes} {
			if dir, err := host.MkdirCgroup(h, d); err != nil {
				return nil, fmt.Errorf("cgroup %s: %w", dir, err)
			}
		}
	}
	return grp, nil
}

// CPU reads the group's cumulative CPU time, its children's included.
func (grp *Group) CPU() (time.Duration, error) {
	dir := filepath.Join(grp.g.acct, grp.Path)
	if grp.g.v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return time.Duration(us) * time.Microsecond, err
			}
		}
		return 0, errors.New("cpu.stat has no usage_usec")
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns), err
}

// EnterScript is a shell prefix that moves the shell into the group's
// Procs in every hierarchy before it execs "$0" "$@".
func (grp *Group) EnterScript() string { return grp.enter() + `exec "$0" "$@"` }

// enter is the shell commands that move the shell into the group, each
// followed by "&& ".
func (grp *Group) enter() string {
	var b strings.Builder
	for _, h := range grp.g.all {
		fmt.Fprintf(&b, "echo $$ > %s && ", strconv.Quote(filepath.Join(h, grp.Procs, "cgroup.procs")))
	}
	return b.String()
}

// Remove deletes the bench's cgroups, deepest first, in every hierarchy.
// A cgroup still holding a process stays, and is reported.
func (g *Cgroups) Remove() error {
	var errs []error
	for _, h := range g.all {
		top := filepath.Join(h, g.root)
		var dirs []string
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// SharedCPU reads what paths share: containerd's CPU (with the execs it
// waited for: shim start and delete) and this process's own and its reaped
// children's.
type SharedCPU struct {
	containerd int // pid, 0 when unknown
}

// NewSharedCPU finds the daemon serving the containerd socket at addr.
func NewSharedCPU(addr string) *SharedCPU {
	pid, _ := socketPeer(addr)
	return &SharedCPU{containerd: pid}
}

// Containerd is the daemon's pid (0: unknown; its CPU is then not counted).
func (s *SharedCPU) Containerd() int { return s.containerd }

// Read returns containerd's and this process's cumulative CPU.
func (s *SharedCPU) Read() (daemon, self time.Duration) {
	if s.containerd > 0 {
		daemon, _ = procCPU(s.containerd)
	}
	var ru, rc unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	unix.Getrusage(unix.RUSAGE_CHILDREN, &rc)
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	self = tv(ru.Utime) + tv(ru.Stime) + tv(rc.Utime) + tv(rc.Stime)
	return daemon, self
}

// procCPU is a process's user and system time with that of the children it
// waited for (/proc/PID/stat fields 14–17, in clock ticks).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return 0, errors.New("short /proc stat")
	}
	var ticks int64
	for _, f := range fields[11:15] { // utime stime cutime cstime
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// socketPeer returns the pid of the process serving the unix socket.
func socketPeer(addr string) (int, error) {
	c, err := net.DialTimeout("unix", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}

// cpuTally accounts CPU per comparator over a throughput measurement.
type cpuTally struct {
	comps      []Comparator
	read       func() (daemon, self time.Duration)
	own0, own1 []time.Duration // each comparator's cgroup, before and after
	ownOK      []bool
	daemon     []time.Duration // shared CPU charged per comparator
	self       []time.Duration
}

type sharedSample struct{ daemon, self time.Duration }

func newCPUTally(comps []Comparator, read func() (daemon, self time.Duration)) *cpuTally {
	n := len(comps)
	return &cpuTally{comps: comps, read: read, own0: make([]time.Duration, n), own1: make([]time.Duration, n),
		ownOK: make([]bool, n), daemon: make([]time.Duration, n), self: make([]time.Duration, n)}
}

func (t *cpuTally) shared() sharedSample {
	if t.read == nil {
		return sharedSample{}
	}
	d, s := t.read()
	return sharedSample{d, s}
}

func (t *cpuTally) begin() {
	for i, c := range t.comps {
		t.ownOK[i] = c.CPU != nil
		if c.CPU != nil {
			v, err := c.CPU()
			t.own0[i], t.ownOK[i] = v, err == nil
		}
	}
}

func (t *cpuTally) end() {
	for i, c := range t.comps {
		if t.ownOK[i] {
			v, err := c.CPU()
			t.own1[i], t.ownOK[i] = v, err == nil
		}
	}
}

func (t *cpuTally) charge(i int, s0 sharedSample) {
	s1 := t.shared()
	if t.comps[i].Containerd {
		t.daemon[i] += s1.daemon - s0.daemon
	}
	t.self[i] += s1.self - s0.self
}

// quiesce waits, up to quiesceMax, until the CPU comparator i (or every
// comparator, for i < 0) and the shared processes use falls below a few
// percent of one CPU: the background work of its last runs is then
// charged to it, not to the next round.
func (t *cpuTally) quiesce(ctx context.Context, i int) {
	if t.read == nil {
		return
	}
	total := func() time.Duration {
		s := t.shared()
		sum := s.daemon + s.self
		for k, c := range t.comps {
			if (i < 0 || k == i) && c.CPU != nil {
				if v, err := c.CPU(); err == nil {
					sum += v
				}
			}
		}
		return sum
	}
	prev := total()
	for deadline := time.Now().Add(quiesceMax); time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(quiesceStep)
		cur := total()
		if cur-prev < quiesceStep*quietShare/100 {
			return
		}
		prev = cur
	}
}

// Quiet is less than quietShare % of one CPU over a quiesceStep; the
// shared containerd's ticks are 10 ms, so a step is several of them.
const (
	quiesceStep = 200 * time.Millisecond
	quiesceMax  = 5 * time.Second
	quietShare  = 10
)

func (t *cpuTally) report(out []Throughput) {
	if t.read == nil {
		return
	}
	tenth := func(v float64) *float64 {
		v = math.Round(v*10) / 10
		return &v
	}
	perRun := func(d time.Duration, runs int) *float64 { return tenth(ms(d / time.Duration(runs))) }
	// By group: a ratio against another program's runs means nothing
	// (the C group has no runc comparator; python's is not its).
	runcCPU, hostCPU := map[string]float64{}, map[string]float64{}
	for i, c := range t.comps {
		runs := out[i].Runs
		if runs == 0 || c.NoCPU {
			continue
		}
		var own time.Duration
		if t.ownOK[i] {
			own = t.own1[i] - t.own0[i]
		} else if c.CPU != nil {
			continue // its cgroup could not be read: no figure beats a wrong one
		}
		out[i].CPUMS = perRun(own+t.daemon[i]+t.self[i], runs)
		out[i].CPUCgroupMS = perRun(own, runs)
		out[i].CPUContainerdMS = perRun(t.daemon[i], runs)
		out[i].CPUCallerMS = perRun(t.self[i], runs)
		if c.Role == RoleRunc {
			runcCPU[out[i].Group] = *out[i].CPUMS
		}
		if c.Role == RoleHost {
			hostCPU[out[i].Group] = *out[i].CPUMS
		}
	}
	for i, c := range t.comps {
		if out[i].CPUMS == nil {
			continue
		}
		if r, ok := runcCPU[out[i].Group]; ok {
			out[i].CPUVsRunc = ratio(*out[i].CPUMS, r)
		}
		if h, ok := hostCPU[out[i].Group]; ok && c.Role != RoleHost {
			out[i].CPUSandboxMS = tenth(*out[i].CPUMS - h)
		}
	}
}
