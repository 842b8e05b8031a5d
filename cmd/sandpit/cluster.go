package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/front"
)

// clusterFlags make serve --listen a cluster's front door (--cluster) or
// one of its nodes (--cluster-node): see internal/cluster and the README's
// "More than one host".
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "cluster", Usage: "be a cluster's front door: authenticate clients, place each tenant's workspace on a node (--cluster-namespace's SandpitWorkspaces) and forward its calls there; runs no sandbox itself"},
		&cli.StringFlag{Name: "cluster-node", EnvVars: []string{"SANDPIT_NODE_NAME"}, Usage: "be the cluster node NAME: announce this server with a Lease (renewed; released at exit) and accept the calls front doors forward (their service-account token, checked with TokenReview, or --cluster-secret-file)"},
		&cli.StringFlag{Name: "cluster-endpoint", Usage: "--cluster-node: the URL front doors reach this node at (default: --public-url)"},
		&cli.StringFlag{Name: "cluster-namespace", Value: "sandpit", EnvVars: []string{"POD_NAMESPACE"}, Usage: "the Kubernetes namespace of the Leases and SandpitWorkspaces"},
		&cli.StringFlag{Name: "cluster-token-file", Usage: "--cluster: the front door's service-account token for audience --cluster-token-audience (a projected volume; re-read as the kubelet rotates it), which nodes check with TokenReview"},
		&cli.StringFlag{Name: "cluster-token-audience", Value: cluster.DefaultAudience, Usage: "the audience of the front doors' service-account tokens"},
		&cli.StringFlag{Name: "cluster-front-account", Value: cluster.DefaultFrontAccount, Usage: "--cluster-node: the service account (in --cluster-namespace) whose tokens it accepts from front doors"},
		&cli.StringFlag{Name: "cluster-secret-file", Usage: "a file holding a secret front doors and nodes share instead (at least 32 characters: `openssl rand -hex 32`), for servers outside Pods"},
		&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "the Kubernetes API's kubeconfig (default: the Pod's service account, in a cluster)"},
		&cli.DurationFlag{Name: "cluster-lease", Value: cluster.DefaultLeaseDuration, Usage: "--cluster-node: a node is gone this long after its last renewal"},
		&cli.StringFlag{Name: "cluster-kube-node", EnvVars: []string{"KUBE_NODE_NAME"}, Usage: "--cluster-node: the Kubernetes Node this runs on; while it is cordoned (kubectl cordon or drain) this node drains: its tenants move to other nodes"},
		&cli.DurationFlag{Name: "cluster-drain-grace", Value: 2*cluster.DefaultCacheFor + time.Second, Usage: "--cluster-node: at SIGTERM, how long the node keeps serving after it marked itself draining (front doors move its tenants meanwhile) before it cancels what still runs"},
	}
}

// checkClusterFlags refuses cluster flags that cannot work together.
func checkClusterFlags(c *cli.Context) error {
	front, node := c.Bool("cluster"), c.String("cluster-node") != ""
	switch {
	case !front && !node:
		for _, f := range []string{"cluster-endpoint", "cluster-secret-file", "cluster-token-file", "cluster-token-audience", "cluster-front-account", "cluster-lease", "cluster-kube-node", "cluster-drain-grace"} {
			if c.IsSet(f) {
				return fmt.Errorf("--%s needs --cluster or --cluster-node", f)
			}
		}
		return nil
	case front && node:
		return errors.New("--cluster (a front door) and --cluster-node (a node) are different servers: give one")
	case c.String("listen") == "":
		return errors.New("--cluster and --cluster-node serve over HTTP: give --listen HOST:PORT")
	case front && c.String("cluster-secret-file") == "" && c.String("cluster-token-file") == "":
		return sandpit.WithHint(errors.New("--cluster needs --cluster-token-file (or --cluster-secret-file): what the front door shows the nodes"),
			"in a Pod, a projected service-account token (scripts/kubernetes/front.yaml)")
	case front && c.IsSet("cluster-front-account"):
		return errors.New("--cluster-front-account is a node's (the account it accepts front doors as)")
	case node && c.IsSet("cluster-token-file"):
		return errors.New("--cluster-token-file is a front door's (what it shows the nodes)")
	}
	return nil
}

// kubeClients connects to the Kubernetes API: --kubeconfig, or the Pod's
// service account.
func kubeClients(c *cli.Context) (kubernetes.Interface, dynamic.Interface, error) {
	cfg, err := restConfig(c.String("kubeconfig"))
	if err != nil {
		return nil, nil, sandpit.WithHint(fmt.Errorf("kubernetes API: %w", err), "give --kubeconfig, or run in a Pod with a service account")
	}
	cfg = cluster.Tune(cfg)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return kube, dyn, nil
}

// serveFrontDoor serves MCP over HTTP as a cluster's front door: the same
// checks as a single server (Host, Origin, tokens or OAuth, bounds), then
// each call goes to its tenant's node. It needs no containerd.
func serveFrontDoor(c *cli.Context) error {
	var secret string
	var token *cluster.TokenFile
	var err error
	if f := c.String("cluster-token-file"); f != "" {
		token = &cluster.TokenFile{Path: f}
		if _, err := token.Token(); err != nil {
			return err
		}
	} else if secret, err = auth.ReadClusterSecret(c.String("cluster-secret-file")); err != nil {
		return err
	}
	kube, dyn, err := kubeClients(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.String("data-dir"), 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	placer := &cluster.Placer{Kube: kube, Dynamic: dyn, Namespace: c.String("cluster-namespace")}
	if err := placer.Start(ctx); err != nil { // informers live as long as the server
		ln.Close()
		return fmt.Errorf("cluster: %w", err)
	}
	fw := &cluster.Forwarder{Placer: placer, Secret: secret, Token: token, Logger: slog.Default()}
	fc := frontConfig(c, ln)
	fc.Forward = fw
	late := &lateAuth{}
	if !fc.InsecureNoAuth {
		fc.Auth = late
		if iss := c.String("oauth-issuer"); iss != "" {
			fc.AuthorizationServers = []string{iss}
		}
	}
	f, err := front.New(fc)
	if err != nil {
		ln.Close()
		return err
	}
	if !fc.InsecureNoAuth {
		if late.a, _, err = httpAuth(ctx, c, f.PublicURL()+"/mcp"); err != nil {
			ln.Close()
			return err
		}
	}
	stopOnSignal(ctx, cancel)
	slog.Info("sandpit front door serving MCP over HTTP", "version", version, "listen", ln.Addr().String(), "url", f.PublicURL()+"/mcp",
		"namespace", c.String("cluster-namespace"))
	err = f.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// stopOnSignal cancels at the first SIGTERM or SIGINT and exits at the
// second.
func stopOnSignal(ctx context.Context, cancel func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		defer signal.Stop(sigs)
		select {
		case sig := <-sigs:
			slog.Info("stopping", "signal", sig.String())
			cancel()
		case <-ctx.Done():
			return
		}
		sig := <-sigs
		slog.Warn("second signal: exiting now", "signal", sig.String())
		os.Exit(1)
	}()
}

// clusterNode is a running node agent.
type clusterNode struct {
	drain func() // marks the node draining and waits --cluster-drain-grace
	stop  func() // releases the Lease
}

// nodeAgent announces this server as cluster node --cluster-node, serving
// at endpoint. A Lease lost to another agent stops the server (lost).
func nodeAgent(ctx context.Context, c *cli.Context, endpoint string, lost func()) (*clusterNode, error) {
	kube, _, err := kubeClients(c)
	if err != nil {
		return nil, err
	}
	if e := c.String("cluster-endpoint"); e != "" {
		endpoint = e
	}
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return nil, fmt.Errorf("--cluster-endpoint %q: want an http(s) URL", endpoint)
	}
	a := &cluster.Agent{Client: kube, Namespace: c.String("cluster-namespace"), Node: c.String("cluster-node"),
		Endpoint: endpoint, Duration: c.Duration("cluster-lease"), KubeNode: c.String("cluster-kube-node"), Logger: slog.Default()}
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(rctx); err != nil {
			slog.Error("cluster: this node's lease was taken; stopping", "node", a.Node, "err", err)
			lost()
		}
	}()
	slog.Info("cluster node announced", "node", a.Node, "endpoint", endpoint, "lease", a.Duration, "kube_node", a.KubeNode)
	grace := c.Duration("cluster-drain-grace")
	return &clusterNode{
		drain: func() {
			dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer dcancel()
			if err := a.Drain(dctx); err != nil {
				slog.Warn("cluster: drain not recorded; tenants move when the lease is released", "err", err)
				return
			}
			slog.Info("cluster: draining: front doors move this node's tenants", "node", a.Node, "grace", grace)
			time.Sleep(grace)
		},
		stop: func() {
			cancel()
			<-done
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			if err := a.Stop(sctx); err != nil {
				slog.Warn("cluster: lease not released; it lapses by itself", "err", err)
			}
		},
	}, nil
}
