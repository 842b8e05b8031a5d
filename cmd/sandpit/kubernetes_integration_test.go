package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sandpit-dev/sandpit/internal/attacks"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestManifestsOnKubernetes: scripts/kubernetes applied, as they are, to a
// real single-node Kubernetes (controller manager, scheduler, kubelet,
// kube-proxy, a bridge Pod network) whose host runs a sandpit containerd
// as an operator would (`sandpit containerd start`). The sandpit image is
// built from the project's own recipe (`sandpit images server`) and
// imported without a registry. The DaemonSet's node agent and the
// Deployment's two front doors run as Pods with exactly the manifests'
// privileges; an MCP client reaches the front doors only through the
// Service's ClusterIP, with a token `sandpit cluster token` issued into the
// Secret they read. Its calls run in sandboxes the agent Pod makes through
// the host's containerd, and the attack suite's payloads, sent that way,
// are all contained.
func TestManifestsOnKubernetes(t *testing.T) {
	testenv.Containerd(t) // the images are built through it; skips (or fails) first
	testenv.NeedRoot(t, "a Kubernetes node (network namespace, cgroups, mounts)")
	c := kubetest.StartNodeWith(t, kubetest.NodeOptions{Services: true, Sandpit: binPath})
	ctx := t.Context()
	sandpitCmd := func(what string, args ...string) string {
		t.Helper()
		start := time.Now()
		cmd := exec.CommandContext(ctx, binPath, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("sandpit %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
		return string(out)
	}

	// The node's host: the sandbox image in its sandpit containerd (from
	// the image cache the suite's build filled), as `sandpit images build`
	// on each host does.
	sandpitCmd("sandbox image into the node's containerd", "images", "build", "--address", c.SandpitContainerd, "--no-start", "datascience")
	// sandpit's own image, from its recipe, imported as `ctr images import`.
	archive := filepath.Join(t.TempDir(), "sandpit.tar")
	sandpitCmd("sandpit image built", "images", "server", "--output", archive)
	start := time.Now()
	c.Import(t, archive)
	t.Logf("sandpit image imported into the node: %v", time.Since(start).Round(time.Millisecond))

	manifests := kubetest.RepoFile(t, "scripts/kubernetes")
	sandpitCmd("namespace applied", "cluster", "apply", filepath.Join(manifests, "namespace.yaml"))
	// Before the front doors start, so their Secret volume holds it from
	// the first moment (a later one reaches them with the kubelet's
	// refresh, up to a minute).
	tok := strings.TrimSpace(sandpitCmd("token issued", "cluster", "token", "alice"))
	if !strings.HasPrefix(tok, "sp_") && len(tok) < 20 {
		t.Fatalf("sandpit cluster token printed %q, not a token", tok)
	}
	start = time.Now()
	sandpitCmd("manifests applied", "cluster", "apply", manifests)

	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The DaemonSet's agent and both front doors Ready: Pods the
	// controller manager made, the scheduler placed and the kubelet runs.
	waitFor(t, kube, "the node agent DaemonSet", 5*time.Minute, func() (bool, string) {
		ds, err := kube.AppsV1().DaemonSets("sandpit").Get(ctx, "sandpit-node", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ds.Status.NumberReady == 1, fmt.Sprintf("%d of %d ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	})
	waitFor(t, kube, "the front door Deployment", 5*time.Minute, func() (bool, string) {
		d, err := kube.AppsV1().Deployments("sandpit").Get(ctx, "sandpit-front", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == 2, deploymentState(d)
	})
	t.Logf("manifests applied → agent and 2 front doors Ready: %v", time.Since(start).Round(time.Millisecond))
	// The agent's Lease: it registered with the API as its service account.
	waitFor(t, kube, "the node agent's Lease", 2*time.Minute, func() (bool, string) {
		nodes, err := cluster.Nodes(ctx, kube, "sandpit")
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes {
			if n.Name == c.NodeName && n.Live(time.Now()) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("nodes: %+v", nodes)
	})

	svc, err := kube.CoreV1().Services("sandpit").Get(ctx, "sandpit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterIP := svc.Spec.ClusterIP
	// The client knows the public name (the front doors check Host); every
	// connection goes to the Service's ClusterIP, from inside the node's
	// network, where kube-proxy routes it to a front door Pod.
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return c.DialContext(ctx, network, net.JoinHostPort(clusterIP, "80"))
		},
	}}
	url := "http://sandpit.example.com/mcp"
	// Both front doors behind the Service (the EndpointSlice controller's
	// work), then kube-proxy's rules for them: until it has synced, a
	// connection is refused.
	waitFor(t, kube, "the Service's endpoints", 2*time.Minute, func() (bool, string) {
		slices, err := kube.DiscoveryV1().EndpointSlices("sandpit").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=sandpit"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, sl := range slices.Items {
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == 2, fmt.Sprintf("%d ready endpoints", ready)
	})
	var alice *client.Client
	waitFor(t, kube, "an MCP session through the Service", 2*time.Minute, func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, testenv.Patience)
		defer cancel()
		cl, err := newServiceClient(cctx, hc, url, tok)
		if err != nil {
			return false, err.Error()
		}
		t.Cleanup(func() { cl.Close() })
		alice = cl
		return true, ""
	})

	start = time.Now()
	r := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "code": "open('note.txt','w').write('on k8s'); print(6*7)"}))
	if r.Stdout != "42\n" {
		t.Fatalf("run_code through the Service: %+v", r)
	}
	t.Logf("first run_code through Service → front door Pod → agent Pod → sandbox: %v", time.Since(start).Round(time.Millisecond))
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	list, err := dyn.Resource(cluster.WorkspaceGVR).Namespace("sandpit").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("placements after alice's first call: %v, %v; want one", list, err)
	}
	if n, _, _ := unstructured.NestedString(list.Items[0].Object, "spec", "node"); n != c.NodeName {
		t.Fatalf("alice placed on %q, want %s (the only node)", n, c.NodeName)
	}
	// The workspace lives on the node's host, under the agent's hostPath.
	if b, err := os.ReadFile(filepath.Join(c.SandpitHost, "lib", "data", "tenants", "alice", "workspace", "note.txt")); err != nil || string(b) != "on k8s" {
		t.Errorf("alice's file on the node's host: %q, %v", b, err)
	}

	t.Run("a token issued or revoked later reaches every front door", func(t *testing.T) {
		// The kubelet refreshes the front doors' Secret volume (the
		// node's syncFrequency is 10 s); each client is a new MCP
		// session, which kube-proxy may send to either front door:
		// three in a row served means both have it, or nearly so.
		bob := strings.TrimSpace(sandpitCmd("second token issued", "cluster", "token", "bob"))
		issued := time.Now()
		served := 0
		waitFor(t, kube, "bob's token accepted by the front doors", 3*time.Minute, func() (bool, string) {
			cctx, cancel := context.WithTimeout(ctx, testenv.Patience)
			defer cancel()
			cl, err := newServiceClient(cctx, hc, url, bob)
			if err != nil {
				served = 0
				return false, err.Error()
			}
			cl.Close()
			served++
			return served == 3, ""
		})
		t.Logf("a token issued → served through the Service: %v", time.Since(issued).Round(time.Millisecond))

		sandpitCmd("token revoked", "cluster", "token", "--revoke", "bob")
		revoked := time.Now()
		refused := 0
		waitFor(t, kube, "bob's token refused by the front doors", 3*time.Minute, func() (bool, string) {
			cctx, cancel := context.WithTimeout(ctx, testenv.Patience)
			defer cancel()
			cl, err := newServiceClient(cctx, hc, url, bob)
			if err == nil {
				cl.Close()
				refused = 0
				return false, "still served"
			}
			if !errors.Is(err, transport.ErrAuthorizationRequired) && !errors.Is(err, transport.ErrUnauthorized) {
				t.Fatalf("bob after the revocation: %v, want a refusal (401)", err)
			}
			refused++
			return refused == 3, ""
		})
		t.Logf("a token revoked → refused through the Service: %v", time.Since(revoked).Round(time.Millisecond))
	})

	t.Run("refused without a token", func(t *testing.T) {
		if _, err := newServiceClient(ctx, hc, url, "sp_not-a-token"); err == nil {
			t.Fatal("a client with a made-up token was served")
		}
	})

	// Where a sandbox could look for the cluster's keys: the agent Pod's
	// service-account token and cluster secret, the host's paths.
	agentPod := agentPodIP(t, kube)
	apiserver, err := netip.ParseAddrPort(strings.TrimPrefix(c.APIServer, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	// The API server (on the host's end of the node's veth), the
	// `kubernetes` Service, the agent Pod's port, the front doors' Service.
	listeners := []netip.AddrPort{apiserver, netip.MustParseAddrPort("198.51.100.1:443"),
		netip.AddrPortFrom(netip.MustParseAddr(agentPod), 8443), netip.AddrPortFrom(netip.MustParseAddr(clusterIP), 80)}
	clusterCases := []attacks.Case{
		{Threat: "Cluster", Name: "no_service_account_token", Lang: "bash", Code: `for p in /var/run/secrets/kubernetes.io /run/secrets/kubernetes.io /var/run/secrets/sandpit /etc/sandpit/cluster/secret /etc/sandpit/tokens; do [ -e "$p" ] && echo "UNSAFE $p" || echo "blocked $p"; done; env | grep -q '^KUBERNETES_' && echo "UNSAFE kubernetes env" || echo "blocked env"`, Want: []string{"blocked /var/run/secrets/kubernetes.io", "blocked /etc/sandpit/cluster/secret", "blocked env"}},
		{Threat: "Cluster", Name: "no_containerd_socket", Lang: "bash", Code: `for p in /run/sandpit/containerd/containerd.sock /run/containerd/containerd.sock /var/lib/sandpit/data; do [ -e "$p" ] && echo "UNSAFE $p" || echo "blocked $p"; done`, Want: []string{"blocked /run/sandpit/containerd/containerd.sock", "blocked /var/lib/sandpit/data"}},
	}
	cases := append(append(attacks.Portable(), attacks.HostListeners(listeners...)...), clusterCases...)
	t.Run("attack suite through the Service", func(t *testing.T) {
		// Four clients at once, each its own MCP session through the
		// Service (kube-proxy spreads them over both front doors).
		work := make(chan attacks.Case)
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := map[string]string{}
		for range 4 {
			cl := serviceClient(t, hc, url, tok)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tc := range work {
					res, err := tryCallWith(ctx, cl, "run_code", map[string]any{"language": tc.Lang, "code": tc.Program()})
					var why string
					switch {
					case err != nil:
						why = err.Error()
					case res.IsError:
						why = "tool error: " + text(res)
					default:
						out, _ := res.StructuredContent.(map[string]any)
						stdout, _ := out["stdout"].(string)
						stderr, _ := out["stderr"].(string)
						if cerr := attacks.Check(stdout+stderr, tc.Want); cerr != nil {
							why = fmt.Sprintf("%v (status %v)", cerr, out["status"])
						}
					}
					if why != "" {
						mu.Lock()
						failed[tc.Threat+"/"+tc.Name] = why
						mu.Unlock()
					}
				}
			}()
		}
		for _, tc := range cases {
			work <- tc
		}
		close(work)
		wg.Wait()
		for name, why := range failed {
			t.Errorf("%s: %s", name, why)
		}
		t.Logf("%d attack payloads sent through the Service, %d not contained", len(cases), len(failed))
	})
}

// waitFor polls ok every 250 ms until it holds, failing t with its last
// word after patience.
func waitFor(t *testing.T, kube kubernetes.Interface, what string, patience time.Duration, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		done, state := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not there after %v: %s\n%s", what, patience, state, podStates(kube))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// podStates describes namespace sandpit's Pods, for a failure message.
func podStates(kube kubernetes.Interface) string {
	pods, err := kube.CoreV1().Pods("sandpit").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return "pods: " + err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s", p.Name, p.Status.Phase)
		for _, s := range p.Status.ContainerStatuses {
			switch {
			case s.State.Waiting != nil:
				fmt.Fprintf(&b, " waiting %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message)
			case s.State.Terminated != nil:
				fmt.Fprintf(&b, " terminated %s (exit %d): %s", s.State.Terminated.Reason, s.State.Terminated.ExitCode, s.State.Terminated.Message)
			}
			fmt.Fprintf(&b, " restarts %d", s.RestartCount)
		}
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, " %s=%s (%s)", c.Type, c.Status, c.Message)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func deploymentState(d *appsv1.Deployment) string {
	return fmt.Sprintf("%d replicas, %d ready, %d available", d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas)
}

// agentPodIP is the node agent Pod's address.
func agentPodIP(t *testing.T, kube kubernetes.Interface) string {
	t.Helper()
	pods, err := kube.CoreV1().Pods("sandpit").List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("the node agent Pod: %v, %v", pods, err)
	}
	return pods.Items[0].Status.PodIP
}

// serviceClient is an initialized MCP client over hc, closed with t.
func serviceClient(t *testing.T, hc *http.Client, url, token string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	c, err := newServiceClient(ctx, hc, url, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newServiceClient(ctx context.Context, hc *http.Client, url, token string) (*client.Client, error) {
	return newHTTPClient(ctx, url, token, transport.WithHTTPBasicClient(hc))
}

func tryCallWith(ctx context.Context, c *client.Client, tool string, args map[string]any) (*mcpgo.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, testenv.Patience)
	defer cancel()
	var req mcpgo.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	return c.CallTool(ctx, req)
}
