package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// manifestOrder applies the namespace, the CRD and the service accounts
// before what uses them; other files follow by name.
var manifestOrder = []string{"namespace.yaml", "crd.yaml", "rbac.yaml"}

func clusterCommand() *cli.Command {
	kc := &cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "the Kubernetes API's kubeconfig (default: the Pod's service account)"}
	ns := &cli.StringFlag{Name: "namespace", Value: "sandpit", Usage: "sandpit's namespace (the manifests' RoleBindings name sandpit)"}
	return &cli.Command{
		Name:  "cluster",
		Usage: "sandpit on Kubernetes: apply the manifests, see the nodes and where each tenant's workspace lives",
		Subcommands: []*cli.Command{{
			Name:      "apply",
			Usage:     "apply the manifests (server-side apply: again is harmless)",
			ArgsUsage: "[DIR or FILE.yaml ...] (default scripts/kubernetes)",
			Flags:     []cli.Flag{kc, ns},
			Action: func(c *cli.Context) error {
				files, err := manifestFiles(c.Args().Slice())
				if err != nil {
					return err
				}
				cfg, err := restConfig(c.String("kubeconfig"))
				if err != nil {
					return err
				}
				for _, f := range files {
					data, err := os.ReadFile(f)
					if err != nil {
						return err
					}
					made, err := cluster.Apply(c.Context, cfg, data, c.String("namespace"))
					if err != nil {
						return fmt.Errorf("%s: %w", f, err)
					}
					for _, o := range made {
						fmt.Printf("applied %s %s\n", o.GetKind(), o.GetName())
					}
				}
				return nil
			},
		}, {
			Name:      "token",
			Usage:     "issue a sandpit token for tenant NAME into the Secret every front door reads (--tokens-file), printed once as the last line; or --revoke it",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{kc, ns, &cli.BoolFlag{Name: "revoke", Usage: "remove NAME's token instead"}},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return fmt.Errorf("usage: sandpit cluster token [--kubeconfig FILE] [--namespace NS] [--revoke] NAME")
				}
				kube, _, err := kubeClients(c)
				if err != nil {
					return err
				}
				name, ns := c.Args().First(), c.String("namespace")
				if c.Bool("revoke") {
					if err := cluster.RevokeToken(c.Context, kube, ns, name); err != nil {
						return err
					}
					fmt.Fprintf(c.App.ErrWriter, "revoked token %s in Secret %s/%s: front doors refuse it once the kubelet refreshes their Secret volume (up to about a minute)\n", name, ns, cluster.TokensSecretName)
					return nil
				}
				tok, err := cluster.IssueToken(c.Context, kube, ns, name)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "issued token %s into Secret %s/%s (its hash only): front doors accept it once the kubelet refreshes their Secret volume (up to about a minute); send it as \"Authorization: Bearer <token>\"\n", name, ns, cluster.TokensSecretName)
				_, err = fmt.Fprintln(c.App.Writer, tok)
				return err
			},
		}, {
			Name:  "status",
			Usage: "list the node agents (live, draining, gone) and the placements",
			Flags: []cli.Flag{kc, ns, &cli.BoolFlag{Name: "json", Usage: "print JSON"}},
			Action: func(c *cli.Context) error {
				kube, dyn, err := kubeClients(c)
				if err != nil {
					return err
				}
				nodes, err := cluster.Nodes(c.Context, kube, c.String("namespace"))
				if err != nil {
					return err
				}
				list, err := dyn.Resource(cluster.WorkspaceGVR).Namespace(c.String("namespace")).List(c.Context, metav1.ListOptions{})
				if err != nil {
					return fmt.Errorf("list placements: %w", err)
				}
				type placement struct{ Tenant, Node, PlacedAt, PreviousNode, Reason string }
				var ps []placement
				for _, o := range list.Items {
					s, _, _ := unstructured.NestedStringMap(o.Object, "spec")
					ps = append(ps, placement{s["tenant"], s["node"], s["placedAt"], s["previousNode"], s["reason"]})
				}
				if c.Bool("json") {
					return json.NewEncoder(os.Stdout).Encode(map[string]any{"nodes": nodes, "placements": ps})
				}
				now := time.Now()
				w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NODE\tSTATE\tENDPOINT\tRENEWED")
				for _, n := range nodes {
					state := "live"
					switch {
					case !n.Live(now):
						state = "gone (lease lapsed)"
					case n.Draining:
						state = "draining"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\n", n.Name, state, n.Endpoint, now.Sub(n.Renewed).Round(time.Second))
				}
				fmt.Fprintln(w, "\nTENANT\tNODE\tPLACED\tMOVED FROM")
				for _, p := range ps {
					moved := "-"
					if p.PreviousNode != "" {
						moved = p.PreviousNode + ": " + p.Reason
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Tenant, p.Node, p.PlacedAt, moved)
				}
				return w.Flush()
			},
		}},
	}
}

// manifestFiles expands dirs to their .yaml files, in manifestOrder.
func manifestFiles(args []string) ([]string, error) {
	if len(args) == 0 {
		args = []string{"scripts/kubernetes"}
	}
	var files []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		m, err := filepath.Glob(filepath.Join(a, "*.yaml"))
		if err != nil {
			return nil, err
		}
		slices.SortFunc(m, func(x, y string) int {
			ix, iy := slices.Index(manifestOrder, filepath.Base(x)), slices.Index(manifestOrder, filepath.Base(y))
			if ix < 0 {
				ix = len(manifestOrder)
			}
			if iy < 0 {
				iy = len(manifestOrder)
			}
			if ix != iy {
				return ix - iy
			}
			return strings.Compare(x, y)
		})
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", strings.Join(args, ", "))
	}
	return files, nil
}

// restConfig is --kubeconfig's, or the Pod's service account.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
