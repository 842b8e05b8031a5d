package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/kubetest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// serviceAccountKubeconfig writes a kubeconfig that acts as the service
// account name of namespace sandpit (the admin impersonates it), so the
// server using it has exactly the rights scripts/kubernetes/rbac.yaml
// grants.
func serviceAccountKubeconfig(t *testing.T, c *kubetest.Cluster, name string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:sandpit:" + name
	}
	p := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterEndToEnd: a front door and two node agents (sandpit serve
// processes, each with its own state, sharing the tenants' data dir as
// nodes share a volume) against a real kube-apiserver, each with the
// rights of its service account in scripts/kubernetes/rbac.yaml. An MCP
// client talks only to the front door: its calls run on the node its
// workspace is placed on; when that node dies (SIGKILL), its next
// session lands on the other node with the workspace as it was; nodes
// refuse callers without the cluster's secret.
func TestClusterEndToEnd(t *testing.T) {
	testenv.Containerd(t) // before the control plane: skips (or fails) first
	c := kubetest.Start(t)
	c.Namespace(t, "sandpit")
	c.Apply(t, kubetest.RepoFile(t, "scripts/kubernetes/crd.yaml"), "sandpit")
	c.Apply(t, kubetest.RepoFile(t, "scripts/kubernetes/rbac.yaml"), "sandpit")
	nodeKC, frontKC := serviceAccountKubeconfig(t, c, "sandpit-node"), serviceAccountKubeconfig(t, c, "sandpit-front")

	// What a front door shows the nodes: its service account's token for
	// audience "sandpit", as its Pod's projected volume holds it (here from
	// the TokenRequest API); nodes check it with TokenReview.
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	saToken := func(account string, audiences ...string) string {
		tr, err := kube.CoreV1().ServiceAccounts("sandpit").CreateToken(t.Context(), account,
			&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", account, err)
		}
		return tr.Status.Token
	}
	secret := filepath.Join(t.TempDir(), "front-token")
	if err := os.WriteFile(secret, []byte(saToken("sandpit-front", "sandpit")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "shared-data")
	nodeFlags := func(name string) []string {
		return []string{"--cluster-node", name, "--kubeconfig", nodeKC,
			"--cluster-lease", "3s", "--no-dashboard", "--pool", "1"}
	}
	stateA := filepath.Join(t.TempDir(), "state-a")
	t.Cleanup(func() {
		// node-a is killed below: its sandboxes are swept by gc.
		if out, err := exec.Command(binPath, "gc", "--address", testenv.Containerd(t), "--no-start", "--state-dir", stateA).CombinedOutput(); err != nil {
			t.Errorf("sandpit gc after the test: %v\n%s", err, out)
		}
	})
	nodeA := startHTTPWith(t, httpOpts{data: shared, state: stateA}, nodeFlags("node-a")...)
	frontData := filepath.Join(t.TempDir(), "front")
	tok := token(t, frontData, "alice")
	front := startHTTPWith(t, httpOpts{data: frontData}, "--cluster", "--cluster-token-file", secret, "--kubeconfig", frontKC)

	alice := httpClient(t, front.url, tok)
	r := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "code": "open('note.txt','w').write('placed'); print(6*7)"}))
	if r.Stdout != "42\n" {
		t.Fatalf("run_code through the front door: %+v", r)
	}
	// A session on node-a: its memory will be lost with node-a, and the
	// next call naming it must say so.
	if r := runResult(t, call(t, alice, "run_code", map[string]any{"language": "python", "session": "s", "code": "x = 41"})); r.Status != "success" {
		t.Fatalf("session call on node-a: %+v", r)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	list, err := dyn.Resource(cluster.WorkspaceGVR).Namespace("sandpit").List(t.Context(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("placements after alice's first call: %v, %v; want one", list, err)
	}
	if n, _, _ := unstructured.NestedString(list.Items[0].Object, "spec", "node"); n != "node-a" {
		t.Fatalf("alice placed on %q, want node-a (the only node)", n)
	}

	t.Run("nodes refuse callers without a front door's token", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
		for name, h := range map[string]map[string]string{
			"no credentials":               {"X-Sandpit-Tenant": "alice"},
			"the tenant's own front token": {"Authorization": "Bearer " + tok, "X-Sandpit-Tenant": "alice"},
			"a forged secret":              {"Authorization": "Bearer " + strings.Repeat("ab", 32), "X-Sandpit-Tenant": "alice"},
			"a made-up token":              {"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "X-Sandpit-Tenant": "alice"},
			"the node's own account's":     {"Authorization": "Bearer " + saToken("sandpit-node", "sandpit"), "X-Sandpit-Tenant": "alice"},
			"the front's, for the API":     {"Authorization": "Bearer " + saToken("sandpit-front"), "X-Sandpit-Tenant": "alice"},
		} {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, nodeA.url, bytes.NewBufferString(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: node answered %d, want 401", name, resp.StatusCode)
			}
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front.url, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Sandpit-Tenant", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("front door without a token: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("a sandbox placed through the front door is locked down", func(t *testing.T) {
		apiHost, apiPort, _ := strings.Cut(strings.TrimPrefix(c.APIServer, "https://"), ":")
		nodeHost, nodePort, _ := strings.Cut(strings.TrimPrefix(nodeA.base, "http://"), ":")
		connect := func(host, port string) string {
			return fmt.Sprintf("import socket\ntry:\n    socket.create_connection((%q, %s), timeout=3)\n    print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e)\n", host, port)
		}
		for _, tt := range []struct{ name, lang, code, want string }{
			{"no effective caps", "bash", "grep CapEff /proc/self/status", "CapEff:\t0000000000000000"},
			{"seccomp filter", "bash", "grep Seccomp: /proc/self/status", "Seccomp:\t2"},
			{"non-root", "bash", "id -u", "1000"},
			{"read-only root", "bash", "touch /usr/x 2>&1; echo rc=$?", "Read-only file system"},
			{"only loopback", "bash", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", "lo\n"},
			{"the API server is out of reach", "python", connect(apiHost, apiPort), "blocked"},
			{"its node's own port is out of reach", "python", connect(nodeHost, nodePort), "blocked"},
			{"no front door token", "bash", "cat " + secret + " 2>&1; echo rc=$?", "No such file"},
			{"no kubeconfig", "bash", "cat " + nodeKC + " 2>&1; ls /var/run/secrets 2>&1; echo rc=$?", "No such file"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := runResult(t, call(t, alice, "run_code", map[string]any{"language": tt.lang, "code": tt.code}))
				if got := r.Stdout + r.Stderr; !strings.Contains(got, tt.want) {
					t.Errorf("output %q does not contain %q (status %s)", got, tt.want, r.Status)
				}
			})
		}
	})

	// A second node, then node-a dies without a word.
	nodeB := startHTTPWith(t, httpOpts{data: shared}, append(nodeFlags("node-b"), "--cluster-drain-grace", "15s")...)
	nodeA.cmd.Process.Kill()
	<-nodeA.exited
	died := time.Now()

	// The client's session lived on node-a: a new one (what an MCP client
	// does after its session is gone) lands on node-b once node-a's lease
	// lapsed, with the workspace as it was.
	var moved *mcpgo.CallToolResult
	for moved == nil {
		if time.Since(died) > 2*time.Minute {
			t.Fatalf("no call succeeded through the front door %v after node-a died", time.Since(died))
		}
		ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
		res, err := tryCall(ctx, front.url, tok, "run_code", map[string]any{"language": "python", "code": "print(open('note.txt').read())"})
		cancel()
		if err == nil && !res.IsError {
			moved = res
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("failover: node-a killed → first successful call through the front door after %v (lease 3 s, placement cache %v)",
		time.Since(died).Round(time.Millisecond), cluster.DefaultCacheFor)
	if r := runResult(t, moved); r.Stdout != "placed\n" {
		t.Errorf("alice's workspace after the move: %+v, want the file written on node-a", r)
	}
	// The session lived on node-a: the first call naming it says it is
	// lost, and why; the next starts a new one.
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	lost, err := tryCall(ctx, front.url, tok, "run_code", map[string]any{"language": "python", "session": "s", "code": "print(x + 1)"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if r := runResult(t, lost); r.Status != "session_lost" || r.Session == nil || !r.Session.Lost || !strings.Contains(r.Session.LostReason, "node node-a") {
		t.Errorf("a session of the dead node-a, named on node-b: %+v (session %+v), want session_lost saying it lived on node-a", r, r.Session)
	}
	ctx, cancel = context.WithTimeout(t.Context(), testenv.Patience)
	fresh, err := tryCall(ctx, front.url, tok, "run_code", map[string]any{"language": "python", "session": "s", "code": "print('new')"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if r := runResult(t, fresh); r.Status != "success" || r.Session == nil || !r.Session.New {
		t.Errorf("the session name after its loss was reported: %+v, want a new session", r)
	}
	obj, err := dyn.Resource(cluster.WorkspaceGVR).Namespace("sandpit").Get(t.Context(), list.Items[0].GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedStringMap(obj.Object, "spec")
	if spec["node"] != "node-b" || spec["previousNode"] != "node-a" || !strings.Contains(spec["reason"], "lapsed") {
		t.Errorf("placement after node-a died: %v, want node-b, moved from node-a because its lease lapsed", spec)
	}

	// node-b is stopped the way Kubernetes stops a Pod (SIGTERM): it
	// marks itself draining and serves on while front doors move its
	// tenants, so alice's next session is on node-c before node-b exits.
	startHTTPWith(t, httpOpts{data: shared}, nodeFlags("node-c")...)
	nodeB.cmd.Process.Signal(syscall.SIGTERM)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
		res, err := tryCall(ctx, front.url, tok, "run_code", map[string]any{"language": "python", "code": "print(open('note.txt').read())"})
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("a call while node-b drains: %v %v", err, res)
		}
		obj, err := dyn.Resource(cluster.WorkspaceGVR).Namespace("sandpit").Get(t.Context(), list.Items[0].GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedStringMap(obj.Object, "spec")
		if spec["node"] == "node-c" {
			if !strings.Contains(spec["reason"], "draining") {
				t.Errorf("moved off node-b: %v, want because it drains", spec)
			}
			if r := runResult(t, res); r.Stdout != "placed\n" && r.Stdout != "placed" {
				t.Errorf("alice's workspace during the drain: %+v", r)
			}
			break
		}
		select {
		case <-nodeB.exited:
			t.Fatalf("node-b exited before alice's workspace left it: %v", spec)
		case <-time.After(200 * time.Millisecond):
		}
	}
	select {
	case <-nodeB.exited:
	case <-time.After(testenv.Patience):
		t.Error("node-b did not exit after its drain")
	}
	if !strings.Contains(nodeB.stderr.String(), "draining") {
		t.Errorf("node-b's log does not say it drained:\n%s", nodeB.stderr.String())
	}
}

// tryCall makes a fresh MCP session through url and calls tool once.
func tryCall(ctx context.Context, url, token, tool string, args map[string]any) (*mcpgo.CallToolResult, error) {
	cl, err := newHTTPClient(ctx, url, token)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var req mcpgo.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := cl.CallTool(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	return res, nil
}

// newHTTPClient is httpClient that returns its error.
func newHTTPClient(ctx context.Context, url, token string, opts ...transport.StreamableHTTPCOption) (*client.Client, error) {
	c, err := client.NewStreamableHttpClient(url, append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))...)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcpgo.Implementation{Name: "sandpit-cluster-e2e", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	return c, nil
}

// TestClusterApply: `sandpit cluster apply` puts every manifest of
// scripts/kubernetes into a real API server (server-side apply: a field
// the API does not know fails it), twice without harm, with the cluster
// secret made once; `sandpit cluster status` lists nodes and placements.
func TestClusterApply(t *testing.T) {
	c := kubetest.Start(t)
	dir := kubetest.RepoFile(t, "scripts/kubernetes")
	apply := func(args ...string) (string, error) {
		out, err := exec.Command(binPath, append([]string{"cluster", "apply", "--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := apply(dir)
	if err != nil {
		t.Fatalf("sandpit cluster apply: %v\n%s", err, out)
	}
	for _, want := range []string{"Namespace sandpit", "CustomResourceDefinition sandpitworkspaces.sandpit.dev", "Role sandpit-node",
		"ClusterRole sandpit-node-reader", "DaemonSet sandpit-node", "Deployment sandpit-front", "Service sandpit",
		"NetworkPolicy sandpit-node", "NetworkPolicy sandpit-front"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply's output lacks %q:\n%s", want, out)
		}
	}
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := kube.AppsV1().DaemonSets("sandpit").Get(t.Context(), "sandpit-node", metav1.GetOptions{})
	if err != nil || !*ds.Spec.Template.Spec.Containers[0].SecurityContext.Privileged || ds.Spec.Template.Spec.HostNetwork {
		t.Errorf("node DaemonSet: %v; want privileged (mount propagation), no host network", err)
	}
	dep, err := kube.AppsV1().Deployments("sandpit").Get(t.Context(), "sandpit-front", metav1.GetOptions{})
	if err != nil || *dep.Spec.Replicas < 2 || !*dep.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("front Deployment: %v; want 2 replicas, non-root", err)
	}

	if out, err := apply(dir); err != nil {
		t.Errorf("applying again: %v\n%s", err, out)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: typo\nautomountServiceAcountToken: false\n"), 0o644)
	if out, err := apply(bad); err == nil {
		t.Errorf("a manifest with a field the API does not know was applied:\n%s", out)
	}

	st, err := exec.Command(binPath, "cluster", "status", "--kubeconfig", c.Kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(st), "NODE") || !strings.Contains(string(st), "TENANT") {
		t.Errorf("sandpit cluster status: %v\n%s", err, st)
	}
}
