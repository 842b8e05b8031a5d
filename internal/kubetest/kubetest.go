// Package kubetest starts a private, real Kubernetes control plane for
// tests of sandpit's cluster parts (node agents that register with Leases,
// a front door that records workspace placement in a CRD): an etcd and a
// kube-apiserver built from the Go module proxy and run by scripts/k8s.sh,
// nothing mocked, so admission, RBAC, optimistic concurrency, watches and
// CRDs behave as in production.
//
// Start runs only etcd and kube-apiserver: no controller manager, scheduler
// or kubelet. So nothing creates a namespace's "default" ServiceAccount,
// collects garbage, or runs a Pod; a test that needs such an object makes
// it itself. The apiserver listens on 127.0.0.1 (TLS, client certificates,
// authorization Node,RBAC, default admission plugins and NodeRestriction);
// everything else lives in the test's temporary directory, and the
// processes go when the test ends, or when the test binary dies
// (scripts/k8s.sh up --owner).
//
// StartNode (root only) adds a node that runs Pods: containerd 2.4, runc,
// a kubelet and kube-scheduler in a network namespace of their own; the
// apiserver then listens on the host end of the veth that joins it to the
// host (Cluster.APIServer). Images come from Import (ImageArchive writes
// one without a registry); a Pod's network namespace holds only lo. No
// controller manager either: StartNode has made the default ServiceAccount
// and kube-root-ca.crt of namespace default and untainted the Node.
//
// The first Start on a machine builds the binaries (scripts/k8s.sh build,
// cached outside the checkout per version; see its header for the time a
// cold build takes); later ones start a control plane in about 3 s, a
// node in about 5 s.
// SANDPIT_K8S_TEST=0 skips the tests that need a control plane, saying so;
// otherwise a control plane that cannot be built or started fails them.
package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is one running control plane.
type Cluster struct {
	// Dir holds its state, certificates, logs (etcd.log,
	// kube-apiserver.log) and pid files.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig: a client
	// certificate in group system:masters, which RBAC lets do anything.
	Kubeconfig string
	// NobodyKubeconfig authenticates as user "sandpit-nobody", in no
	// group and bound to no role: what an authenticated stranger may do.
	NobodyKubeconfig string
	// APIServer is the apiserver's URL, https://127.0.0.1:PORT.
	APIServer string
	// Config is the admin kubeconfig as a client-go config.
	Config *rest.Config
	// Processes are what scripts/k8s.sh up started: etcd,
	// kube-apiserver and the watcher that stops them if the test binary
	// dies; with StartNode also containerd, kubelet and kube-scheduler.
	Processes []Process

	// A node's (StartNode), empty for a control plane only (Start).

	// NetNS is the name of the network namespace (ip netns) containerd,
	// the kubelet and the scheduler run in.
	NetNS string
	// CtrAddress is the node's containerd socket (ctr --address; images
	// live in its k8s.io namespace).
	CtrAddress string
	// NodeName is the Node's name, NodeIP its InternalIP (in NetNS; the
	// host reaches it through a veth).
	NodeName, NodeIP string
	// CgroupRoot is the kubelet's cgroupRoot: down kills every process
	// under it (a node agent's sandboxes belong there too).
	CgroupRoot string

	// With NodeOptions.Sandpit: the host paths of the node's
	// /run/sandpit and /var/lib/sandpit (SandpitHost/run, /lib), and the
	// node's sandpit containerd socket as the host reaches it.
	SandpitHost, SandpitContainerd string
}

// NodeOptions are what StartNodeWith adds to a node.
type NodeOptions struct {
	// Services adds kube-controller-manager, kube-proxy and a real Pod
	// network (Debian's bridge CNI plugin) inside the node's network
	// namespace: Deployments and DaemonSets make Pods, Services route,
	// Pods reach each other and the apiserver (up --services).
	Services bool
	// Sandpit is a sandpit binary: the node gets a "host" /run/sandpit and
	// /var/lib/sandpit shared with the host at SandpitHost, and a
	// sandpit containerd (`sandpit containerd start`) there, as an
	// operator runs on each host before the node DaemonSet (up --sandpit).
	Sandpit string
}

// Process is one process that up started, told apart from a later one
// with the same pid by its start time.
type Process struct {
	Name      string
	PID       int
	StartTime string // field 22 of /proc/PID/stat
}

// Running reports whether p is still running: its pid is a live process
// (not a zombie) with p's start time.
func (p Process) Running() bool {
	st, ok := startTime(p.PID)
	return ok && st == p.StartTime
}

// startTime returns the start time of live process pid.
func startTime(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	// The fields after the command name, which is in parentheses and may
	// hold anything: state (field 3) first, start time is field 22.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

// Running returns those of c's processes that still run.
func (c *Cluster) Running() []Process {
	var r []Process
	for _, p := range c.Processes {
		if p.Running() {
			r = append(r, p)
		}
	}
	return r
}

// Patience bounds a build (a cold one took 4 minutes on two busy cores;
// far more leaves room for a slow module proxy and a loaded machine) and,
// separately, an up or a down.
const (
	buildPatience = 45 * time.Minute
	upPatience    = 5 * time.Minute
)

// Start builds (once per machine) and starts a control plane in a
// temporary directory of t, stopped by t's cleanup. It fails t when that
// cannot be done, and skips t, saying why, only when SANDPIT_K8S_TEST=0.
func Start(t testing.TB) *Cluster {
	t.Helper()
	return start(t, false, NodeOptions{})
}

// StartNode is Start with a node (scripts/k8s.sh up --node): a containerd,
// a kubelet and a kube-scheduler in a network namespace of their own, the
// Node "sandpit-test-node" Ready and untainted, the default ServiceAccount
// made; Pods run (images from Import, imagePullPolicy Never) with a network
// namespace that holds only lo. It needs root.
func StartNode(t testing.TB) *Cluster {
	t.Helper()
	return start(t, true, NodeOptions{})
}

// StartNodeWith is StartNode with more on the node (NodeOptions).
func StartNodeWith(t testing.TB, o NodeOptions) *Cluster {
	t.Helper()
	return start(t, true, o)
}

func start(t testing.TB, node bool, o NodeOptions) *Cluster {
	t.Helper()
	if os.Getenv("SANDPIT_K8S_TEST") == "0" {
		t.Skip("SANDPIT_K8S_TEST=0: skipping the tests against a real Kubernetes control plane (scripts/k8s.sh)")
	}
	script, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	build := []string{"build", "--control-plane"}
	if node {
		build = build[:1]
	}
	if _, err := run(buildPatience, script, build...); err != nil {
		t.Fatalf("scripts/k8s.sh %s: %v", strings.Join(build, " "), err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Logf("scripts/k8s.sh build took %v", d.Round(time.Second))
	}

	dir := t.TempDir()
	if node {
		if len(dir) > 48 {
			// Unix socket paths (containerd's, the kubelet's) under dir
			// must stay within 108 bytes: a long test name would not.
			// Removed after the down below (cleanups run last first).
			short, err := os.MkdirTemp("", "sandpit-node-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(short) })
			dir = short
		}
		// A Pod in a user namespace must reach its root filesystem under
		// dir: the directories testing made are 0700.
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if d == os.TempDir() {
				continue
			}
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := &Cluster{Dir: dir}
	// Registered before up: an up that fails halfway stops what it
	// started itself, and a down of nothing is no error.
	t.Cleanup(func() {
		start := time.Now()
		if _, err := run(upPatience, script, "down", dir); err != nil {
			t.Errorf("scripts/k8s.sh down %s: %v", dir, err)
		}
		if node {
			t.Logf("node down in %v", time.Since(start).Round(time.Millisecond))
		}
		for _, p := range c.Running() {
			t.Errorf("%s (pid %d) still runs after scripts/k8s.sh down", p.Name, p.PID)
		}
	})
	start = time.Now()
	args := []string{"up", dir, "--owner", strconv.Itoa(os.Getpid())}
	what, names := "control plane", []string{"etcd", "kube-apiserver", "watcher"}
	if node {
		args = append(args, "--node")
		what, names = "node", append(names, "containerd", "kubelet", "kube-scheduler")
	}
	if o.Services {
		args = append(args, "--services")
		names = append(names, "kube-controller-manager", "kube-proxy")
	}
	if o.Sandpit != "" {
		args = append(args, "--sandpit", o.Sandpit)
		names = append(names, "sandpit-containerd")
	}
	out, err := run(upPatience, script, args...)
	if err != nil {
		t.Fatalf("scripts/k8s.sh %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("%s up in %v", what, time.Since(start).Round(time.Millisecond))
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	c.Kubeconfig, c.APIServer = vars["KUBECONFIG"], vars["APISERVER"]
	if c.Kubeconfig == "" || c.APIServer == "" {
		t.Fatalf("scripts/k8s.sh up printed %q: no KUBECONFIG= and APISERVER=", out)
	}
	c.NobodyKubeconfig = filepath.Join(dir, "nobody.kubeconfig")
	if node {
		c.NetNS, c.CtrAddress, c.NodeName, c.NodeIP = vars["NETNS"], vars["CTR_ADDRESS"], vars["NODE"], vars["NODE_IP"]
		c.CgroupRoot = vars["CGROOT"]
		if c.NetNS == "" || c.CtrAddress == "" || c.NodeName == "" || c.NodeIP == "" || c.CgroupRoot == "" {
			t.Fatalf("scripts/k8s.sh up --node printed %q: no NETNS=, CTR_ADDRESS=, NODE=, NODE_IP= and CGROOT=", out)
		}
	}
	if o.Sandpit != "" {
		c.SandpitHost, c.SandpitContainerd = vars["SANDPIT_HOST"], vars["SANDPIT_CONTAINERD"]
		if c.SandpitHost == "" || c.SandpitContainerd == "" {
			t.Fatalf("scripts/k8s.sh up --sandpit printed %q: no SANDPIT_HOST= and SANDPIT_CONTAINERD=", out)
		}
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
		if err != nil {
			t.Fatalf("after up: %v", err)
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			t.Fatalf("%s.pid holds %q, not PID STARTTIME", name, b)
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("%s.pid holds %q, not PID STARTTIME", name, b)
		}
		c.Processes = append(c.Processes, Process{Name: name, PID: pid, StartTime: f[1]})
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		t.Fatalf("the kubeconfig up wrote: %v", err)
	}
	return c
}

// Import imports the image archive at tarPath (OCI layout or docker
// archive, as ctr images import takes) into the node's containerd, for
// Pods with imagePullPolicy Never.
func (c *Cluster) Import(t testing.TB, tarPath string) {
	t.Helper()
	if c.CtrAddress == "" {
		t.Fatal("Import: no node in this cluster (StartNode)")
	}
	script, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(upPatience, script, "import", c.Dir, tarPath); err != nil {
		t.Fatalf("scripts/k8s.sh import %s: %v", tarPath, err)
	}
}

// run runs script with args and returns its standard output. Its standard
// error is passed on to the test binary's (logs, and a cold build's
// progress) and quoted in the error. The script runs in a process group of
// its own, killed whole at the deadline.
func run(patience time.Duration, script string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A daemon that kept the pipes open would hold Output; up gives them
	// other files, so this is only a backstop.
	cmd.WaitDelay = 10 * time.Second
	var stderr tail
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (no end within %v)", err, patience)
		}
		return out, fmt.Errorf("%w\n%s", err, stderr.String())
	}
	return out, nil
}

// tail keeps the last 16 KiB written to it.
type tail struct{ b []byte }

func (w *tail) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if n := len(w.b) - 16<<10; n > 0 {
		w.b = append(w.b[:0], w.b[n:]...)
	}
	return len(p), nil
}

func (w *tail) String() string { return string(w.b) }

// Script returns the path of scripts/k8s.sh in the checkout: the first
// directory up from the working directory (a test runs in its package's)
// that holds sandpit's go.mod.
func Script() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(b, []byte("module github.com/sandpit-dev/sandpit\n")) {
			return filepath.Join(dir, "scripts", "k8s.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no sandpit checkout (go.mod of github.com/sandpit-dev/sandpit) above the working directory")
		}
		dir = parent
	}
}
