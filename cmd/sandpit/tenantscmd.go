package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/store/history"
)

// TenantReport is one tenant as `sandpit tenants` shows it to the operator.
type TenantReport struct {
	Name           string    `json:"name"`
	TokenCreated   time.Time `json:"token_created,omitzero"` // zero: no sandpit token (an OAuth subject, or revoked)
	Runs           int64     `json:"runs"`
	LastRun        time.Time `json:"last_run,omitzero"`
	CPUHourMS      int64     `json:"cpu_last_hour_ms"`
	Failed         int64     `json:"failed_last_hour"`
	WorkspaceBytes int64     `json:"workspace_bytes"`
	WorkspaceFiles int64     `json:"workspace_files"`
	WorkspaceMore  bool      `json:"workspace_count_stopped,omitempty"` // the count stopped at its bound
}

// tenantsCommand is the operator's view of every tenant of a data dir.
func tenantsCommand() *cli.Command {
	return &cli.Command{
		Name:      "tenants",
		Usage:     "list the HTTP server's tenants: tokens, runs, CPU in the last hour, workspace size (the operator's view of all of them)",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: dataDir(), EnvVars: []string{"SANDPIT_DATA_DIR"}, Usage: "the data directory the server was given"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected argument %q: sandpit tenants lists them all", c.Args().First())
			}
			reports, err := tenantReports(c.Context, c.String("data-dir"), time.Now())
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, reports)
			}
			return printTenants(c.App.Writer, reports)
		},
	}
}

// workspaceCountMax bounds the files counted per workspace.
const workspaceCountMax = 200000

func tenantReports(ctx context.Context, dir string, now time.Time) ([]TenantReport, error) {
	byName := map[string]*TenantReport{}
	get := func(name string) *TenantReport {
		if r := byName[name]; r != nil {
			return r
		}
		r := &TenantReport{Name: name}
		byName[name] = r
		return r
	}
	if _, err := os.Stat(filepath.Join(dir, "auth")); err == nil {
		tokens, err := auth.OpenTokens(dir)
		if err != nil {
			return nil, err
		}
		list, err := tokens.List()
		if err != nil {
			return nil, err
		}
		for _, tk := range list {
			get(tk.Name).TokenCreated = tk.Created
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, "tenants"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() || !auth.ValidTenant(e.Name()) {
			continue
		}
		r := get(e.Name())
		tdir := filepath.Join(dir, "tenants", e.Name())
		if err := historyFigures(ctx, filepath.Join(tdir, "history.db"), now, r); err != nil {
			return nil, fmt.Errorf("tenant %s: %w", e.Name(), err)
		}
		r.WorkspaceBytes, r.WorkspaceFiles, r.WorkspaceMore = dirUsage(filepath.Join(tdir, "workspace"), workspaceCountMax)
	}
	out := make([]TenantReport, 0, len(byName))
	for _, r := range byName {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b TenantReport) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out, nil
}

// historyFigures fills r from the tenant's history: its runs, its last,
// and the CPU and failures of the last hour.
func historyFigures(ctx context.Context, path string, now time.Time, r *TenantReport) error {
	if _, err := os.Stat(path); err != nil {
		return nil // no run recorded yet
	}
	db, err := history.Open(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	if r.Runs, err = db.Count(ctx); err != nil {
		return err
	}
	// Newest first, a page at a time, until the hour is behind.
	f := history.Filter{Limit: 100}
	for {
		runs, err := db.List(ctx, f)
		if err != nil {
			return err
		}
		for _, run := range runs {
			if r.LastRun.IsZero() {
				r.LastRun = run.Started
			}
			if now.Sub(run.Started) > time.Hour {
				return nil
			}
			r.CPUHourMS += run.CPUUserMS + run.CPUSystemMS
			if run.Status != "success" {
				r.Failed++
			}
		}
		if len(runs) < f.Limit {
			return nil
		}
		f.BeforeID = runs[len(runs)-1].ID
	}
}

// dirUsage sums the apparent size and count of what dir holds, stopping at
// max entries.
func dirUsage(dir string, max int64) (bytes, files int64, more bool) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if files++; files >= max {
			more = true
			return filepath.SkipAll
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
			}
		}
		return nil
	})
	return bytes, files, more
}

func printTenants(w io.Writer, reports []TenantReport) error {
	if len(reports) == 0 {
		_, err := fmt.Fprintln(w, "no tenants (create one with `sandpit token create NAME`)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTOKEN\tRUNS\tLAST RUN\tCPU 1H\tFAILED 1H\tWORKSPACE")
	for _, r := range reports {
		tok := "-"
		if !r.TokenCreated.IsZero() {
			tok = r.TokenCreated.UTC().Format("2006-01-02")
		}
		last := "-"
		if !r.LastRun.IsZero() {
			last = r.LastRun.UTC().Format(time.DateTime)
		}
		more := ""
		if r.WorkspaceMore {
			more = "+"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s in %d%s files\n", r.Name, tok, r.Runs, last,
			(time.Duration(r.CPUHourMS) * time.Millisecond).Round(time.Millisecond), r.Failed, humanBytes(r.WorkspaceBytes), r.WorkspaceFiles, more)
	}
	return tw.Flush()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
