package front

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// bearer adds a token to every request of an http.Client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// mcpgoCall connects with mcp-go's client over tr and calls tool.
func mcpgoCall(t *testing.T, c *client.Client, tool string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	req := mcpgo.CallToolRequest{}
	req.Params.Name = tool
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	if res.IsError || len(res.Content) == 0 {
		t.Fatalf("call %s: %+v", tool, res)
	}
	return res.Content[0].(mcpgo.TextContent).Text
}

// sdkCall connects with the official Go SDK at version (latest: "") and
// calls tool; it returns the answer and the negotiated version.
func sdkCall(t *testing.T, rn *running, httpc *http.Client, token, version, tool string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	if httpc == nil {
		httpc = &http.Client{}
	}
	base := httpc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	httpc = &http.Client{Transport: bearer{token, base}}
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcpsdk.StreamableClientTransport{Endpoint: rn.url + "/mcp", HTTPClient: httpc, MaxRetries: -1}, &mcpsdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	if res.IsError || len(res.Content) == 0 {
		t.Fatalf("call %s: %+v", tool, res)
	}
	return res.Content[0].(*mcpsdk.TextContent).Text, cs.InitializeResult().ProtocolVersion
}

// TestClients: each real client, in each protocol era it speaks, reaches
// its own tenant's server.
func TestClients(t *testing.T) {
	rn := start(t, nil)
	hdr := map[string]string{"Authorization": "Bearer tok-alice"}
	t.Run("mcp-go streamable, 2026-07-28", func(t *testing.T) {
		c, err := client.NewStreamableHttpClient(rn.url+"/mcp", transport.WithHTTPHeaders(hdr))
		if err != nil {
			t.Fatal(err)
		}
		if got := mcpgoCall(t, c, "list_supported_languages"); got != "alice" {
			t.Errorf("got %q", got)
		}
		if sid := c.GetSessionId(); sid != "" {
			t.Errorf("stateless era, yet session %q", sid)
		}
	})
	t.Run("mcp-go streamable, 2025-06-18", func(t *testing.T) {
		tr, err := transport.NewStreamableHTTP(rn.url+"/mcp", transport.WithHTTPHeaders(hdr))
		if err != nil {
			t.Fatal(err)
		}
		c := client.NewClient(tr, client.WithProtocolVersion("2025-06-18"))
		if got := mcpgoCall(t, c, "list_supported_languages"); got != "alice" {
			t.Errorf("got %q", got)
		}
		if c.GetSessionId() == "" {
			t.Error("no session id in the session era")
		}
	})
	t.Run("mcp-go legacy SSE", func(t *testing.T) {
		c, err := client.NewSSEMCPClient(rn.url+"/sse", client.WithHeaders(map[string]string{"Authorization": "Bearer tok-bob"}))
		if err != nil {
			t.Fatal(err)
		}
		if got := mcpgoCall(t, c, "list_supported_languages"); got != "bob" {
			t.Errorf("got %q", got)
		}
	})
	for _, tc := range []struct{ ask, want string }{{"", "2026-07-28"}, {"2025-11-25", "2025-11-25"}, {"2025-03-26", "2025-03-26"}} {
		t.Run("go-sdk "+tc.want, func(t *testing.T) {
			got, version := sdkCall(t, rn, nil, "tok-bob", tc.ask, "list_supported_languages")
			if got != "bob" || version != tc.want {
				t.Errorf("got %q at %s, want bob at %s", got, version, tc.want)
			}
		})
	}
}

// TestProgressOnRequestStream: a notification a call sends rides that
// call's own response stream.
func TestProgressOnRequestStream(t *testing.T) {
	rn := start(t, nil)
	tr, err := transport.NewStreamableHTTP(rn.url+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer tok-alice"}))
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithProtocolVersion("2025-06-18"))
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Patience)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	progress := make(chan mcpgo.JSONRPCNotification, 1)
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			progress <- n
		}
	})
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		req := mcpgo.CallToolRequest{}
		req.Params.Name = "run_code"
		req.Params.Meta = &mcpgo.Meta{ProgressToken: "p1"}
		_, err := c.CallTool(ctx, req)
		result <- err
	}()
	rn.tenants.waitStarted(t)
	select {
	case n := <-progress:
		if n.Params.AdditionalFields["progressToken"] != "p1" {
			t.Errorf("progress %+v", n.Params)
		}
	case <-ctx.Done():
		t.Fatal("no progress notification while the call ran")
	}
	rn.tenants.release <- struct{}{}
	if err := <-result; err != nil {
		t.Fatal(err)
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	pool := selfSigned(t, dir)
	rn := start(t, func(c *Config) {
		c.TLSCert = filepath.Join(dir, "cert.pem")
		c.TLSKey = filepath.Join(dir, "key.pem")
	})
	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	for _, version := range []string{"", "2025-11-25"} {
		if got, _ := sdkCall(t, rn, httpc, "tok-alice", version, "list_supported_languages"); got != "alice" {
			t.Errorf("over TLS (%q): %q", version, got)
		}
	}
	// HTTP/2 is offered; the disconnect path is the same handler.
	resp, err := httpc.Get(rn.url + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2 over TLS", resp.Proto)
	}
	// Plain HTTP to the TLS port is not served.
	if resp, err := http.Get("http://" + rn.addr + "/mcp"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP on the TLS port: %s", resp.Status)
		}
	}
}

// selfSigned writes cert.pem and key.pem for 127.0.0.1 into dir and
// returns a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sandpit test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}
