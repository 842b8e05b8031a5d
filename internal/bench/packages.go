package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/internal/pypi/pypitest"
)

// Package layer figures (issue 27): print(1) in a workspace whose layer
// holds layerPackages wheels against one with none, both on warm servers,
// interleaved; and install_packages of installPackages wheels the cache
// already holds, in the notes.
const (
	layerPackages   = 50
	installPackages = 20
	installRounds   = 5
)

func (b *suite) packageComparators(ctx context.Context, group string, want func(string) bool, add func(group, name string, role Role, run func(context.Context) error, err error)) {
	ix, err := pypitest.NewIndex()
	if err != nil {
		add(group, "sandpit-mcp-layer", "", nil, err)
		return
	}
	b.closers = append(b.closers, func(context.Context) error { return ix.Close() })
	var names []string
	for i := range layerPackages {
		name := fmt.Sprintf("sp-bench-%d", i)
		body := fmt.Sprintf("# a module of the bench's layer\nVALUE = %d\nTABLE = %q\n", i, make([]byte, 4096))
		if err := ix.AddWheel(name, "1.0", nil, map[string][]byte{fmt.Sprintf("sp_bench_%d/__init__.py", i): []byte(body)}); err != nil {
			add(group, "sandpit-mcp-layer", "", nil, err)
			return
		}
		names = append(names, name)
	}
	source := []string{"--pool=2", "--package-source", "python=" + ix.URL(), "--package-cache", b.dir + "/package-cache"}
	prog := Programs["python"]
	for _, v := range []struct {
		name string
		pkgs []string
	}{{"sandpit-mcp-nolayer", nil}, {"sandpit-mcp-layer", names}} {
		if !want(v.name) {
			continue
		}
		cl, err := b.startServer(ctx, v.name, source, nil)
		if err == nil {
			b.closers = append(b.closers, func(context.Context) error { return cl.Close() })
			if len(v.pkgs) > 0 {
				_, err = installCall(ctx, cl, "install_packages", v.pkgs)
			}
		}
		var run func(context.Context) error
		if err == nil {
			run = mcpRun(cl, "python", prog.code, prog.want)
		}
		add(group, v.name, "", run, err)
		if err == nil && len(v.pkgs) == 0 && want("sandpit-mcp-install") {
			b.installNotes(ctx, cl, names[:installPackages])
		}
	}
}

// installNotes times install_packages of pkgs once the cache holds them
// (a first install fetches them; each measured one follows a remove).
func (b *suite) installNotes(ctx context.Context, cl *client.Client, pkgs []string) {
	if _, err := installCall(ctx, cl, "install_packages", pkgs); err != nil {
		b.report.Notes = append(b.report.Notes, "packages: install failed: "+err.Error())
		return
	}
	var times []time.Duration
	for range installRounds {
		if _, err := installCall(ctx, cl, "remove_packages", pkgs); err != nil {
			b.report.Notes = append(b.report.Notes, "packages: remove failed: "+err.Error())
			return
		}
		t0 := time.Now()
		if _, err := installCall(ctx, cl, "install_packages", pkgs); err != nil {
			b.report.Notes = append(b.report.Notes, "packages: install failed: "+err.Error())
			return
		}
		times = append(times, time.Since(t0))
	}
	slices.Sort(times)
	b.report.Notes = append(b.report.Notes, fmt.Sprintf("packages: install_packages of %d wheels the cache holds (resolve against the local index, check, unpack in a cold no-network sandbox, verify): median %s, max %s over %d rounds (target ≤ 2 s)",
		len(pkgs), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), len(times)))
}

func installCall(ctx context.Context, cl *client.Client, tool string, pkgs []string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var req mcpgo.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = map[string]any{"language": "python", "packages": pkgs}
	res, err := cl.CallTool(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.IsError {
		return nil, fmt.Errorf("%s: %s", tool, textOf(res))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	return out, json.Unmarshal(raw, &out)
}
