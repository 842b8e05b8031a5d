package kubetest

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// netcheck is the program the test's Pod runs: it says hello, lists its
// network interfaces, tries a TCP connection to the address in its
// argument (the apiserver, on the host) and reports what happened.
const netcheck = `package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	fmt.Printf("hello from a pod: uid %d\n", os.Getuid())
	ifs, err := net.Interfaces()
	if err != nil {
		fmt.Println("interfaces: error:", err)
		os.Exit(1)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	fmt.Println("interfaces:", strings.Join(names, " "))
	c, err := net.DialTimeout("tcp", os.Args[1], 3*time.Second)
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	c.Close()
	fmt.Println("connect: connected")
}
`

// TestNodeRunsAPod starts a real single-node cluster, imports an image built
// here without a registry, runs a hardened one-shot Pod from it, reads its
// log through the API (apiserver -> kubelet), and checks that the Pod had
// only lo and could not reach the host; after the cluster's cleanup, that
// none of its processes and not its network namespace is left.
func TestNodeRunsAPod(t *testing.T) {
	var c *Cluster
	var env map[string]string // DIR/node.env: what up changed on the host
	ok := t.Run("node", func(t *testing.T) {
		c = StartNode(t)
		env = nodeEnv(t, c)
		runPod(t, c)
	})
	switch {
	case !ok:
		return // failed, and said why
	case c == nil:
		t.Skip("no node started (skipped, see above)")
	}
	if len(c.Processes) != 6 {
		t.Fatalf("up --node recorded %d processes, want etcd, kube-apiserver, watcher, containerd, kubelet, kube-scheduler: %+v", len(c.Processes), c.Processes)
	}
	for _, p := range c.Processes {
		if p.Running() {
			t.Errorf("%s (pid %d) still runs after the node's cleanup", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", c.NetNS)); !os.IsNotExist(err) {
		t.Errorf("network namespace %s still there after the node's cleanup (stat: %v)", c.NetNS, err)
	}
	if cg := env["CGROOT"]; cg != "" {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cg))
		for _, d := range left {
			t.Errorf("cgroup %s still there after the node's cleanup", d)
		}
	} else {
		t.Errorf("node.env names no CGROOT: %v", env)
	}
	if v := env["HOSTVETH"]; v == "" {
		t.Errorf("node.env names no HOSTVETH: %v", env)
	} else if _, err := os.Stat(filepath.Join("/sys/class/net", v)); !os.IsNotExist(err) {
		t.Errorf("veth %s still there after the node's cleanup (stat: %v)", v, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(mounts)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 && strings.HasPrefix(f[4], c.Dir) {
			t.Errorf("still mounted after the node's cleanup: %s", f[4])
		}
	}
}

// nodeEnv reads DIR/node.env, where up --node wrote what it changed on the
// host (NETNS, HOSTVETH, CGROOT...).
func nodeEnv(t *testing.T, c *Cluster) map[string]string {
	b, err := os.ReadFile(filepath.Join(c.Dir, "node.env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

func runPod(t *testing.T, c *Cluster) {
	ctx := t.Context()
	bin := buildStatic(t, netcheck)
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	const image = "sandpit.test/netcheck:1"
	start := time.Now()
	c.Import(t, ImageArchive(t, image, []string{"/netcheck"}, map[string][]byte{"netcheck": prog}))
	t.Logf("image imported in %v", time.Since(start).Round(time.Millisecond))

	u, err := url.Parse(c.APIServer)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	yes, no, nobody := true, false, int64(65534)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "netcheck"},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			HostUsers:                    &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &nobody,
				RunAsGroup:     &nobody,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "netcheck",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{u.Host},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	pods := cs.CoreV1().Pods(metav1.NamespaceDefault)
	start = time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the Pod: %v", err)
	}
	var got *corev1.Pod
	for {
		if got, err = pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("get the Pod: %v", err)
		}
		if got.Status.Phase == corev1.PodSucceeded {
			break
		}
		if got.Status.Phase == corev1.PodFailed || time.Since(start) > 2*time.Minute {
			events, _ := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			var ev []string
			for _, e := range events.Items {
				ev = append(ev, fmt.Sprintf("%s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message))
			}
			t.Fatalf("the Pod is %s after %v: status %+v\nevents:\n%s\n(kubelet log: %s)", got.Status.Phase,
				time.Since(start).Round(time.Millisecond), got.Status, strings.Join(ev, "\n"), filepath.Join(c.Dir, "kubelet.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("Pod created -> Succeeded in %v", time.Since(start).Round(time.Millisecond))
	if got.Spec.NodeName != c.NodeName {
		t.Errorf("the Pod ran on node %q, want %q", got.Spec.NodeName, c.NodeName)
	}

	// Through the apiserver, which asks the kubelet.
	log, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the Pod's log: %v", err)
	}
	t.Logf("the Pod's log:\n%s", log)
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			lines[k] = v
		}
	}
	if want := "uid 65534"; lines["hello from a pod"] != want {
		t.Errorf("the Pod said hello as %q, want %q", lines["hello from a pod"], want)
	}
	if lines["interfaces"] != "lo" {
		t.Errorf("the Pod's network interfaces: %q, want only lo", lines["interfaces"])
	}
	if !strings.Contains(lines["connect"], "network is unreachable") {
		t.Errorf("a connection from the Pod to the apiserver at %s: %q, want network is unreachable", u.Host, lines["connect"])
	}
}

// buildStatic builds Go program src (a main package with no dependencies)
// into a static binary in a temporary directory of t.
func buildStatic(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module sandpit.test/prog\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gobin := "go"
	if _, err := exec.LookPath(gobin); err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	out := filepath.Join(dir, "prog")
	cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}
