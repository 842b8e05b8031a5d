package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/internal/auth"
	"github.com/sandpit-dev/sandpit/internal/logring"
	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/history"
)

// logRing keeps the server's recent log records for sandbox://logs;
// setupLogging installs it in front of the stderr handler.
var logRing *logring.Ring

// logRingSize is how many log records sandbox://logs can show.
const logRingSize = 1000

// historyDefaultPath is /var/lib/sandpit/history.db for root,
// $XDG_STATE_HOME/sandpit/history.db (default ~/.local/state) otherwise.
func historyDefaultPath() string {
	if systemWide() {
		return "/var/lib/sandpit/history.db"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandpit", "history.db")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "sandpit", "history.db")
}

func historyDBFlag() cli.Flag {
	return &cli.StringFlag{Name: "history-db", Value: historyDefaultPath(), EnvVars: []string{"SANDPIT_HISTORY_DB"},
		Usage: `execution history database ("off": keep no history)`}
}

// tenantFlag picks an HTTP tenant's history under --data-dir.
func tenantFlag() cli.Flag {
	return &cli.StringFlag{Name: "tenant", Usage: "read this HTTP tenant's history (DATA_DIR/tenants/NAME/history.db) instead of --history-db"}
}

func historyDataDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "data-dir", Value: dataDir(), EnvVars: []string{"SANDPIT_DATA_DIR"}, Usage: "the HTTP server's data directory, for --tenant"}
}

// historyFlags are serve's history flags.
func historyFlags() []cli.Flag {
	return []cli.Flag{
		historyDBFlag(),
		&cli.DurationFlag{Name: "history-max-age", Value: 30 * 24 * time.Hour, Usage: "delete runs older than this from the history (0: keep forever)"},
		&cli.Int64Flag{Name: "history-max-runs", Value: 100000, Usage: "keep at most this many runs in the history (0: no limit)"},
	}
}

// historyPruneInterval is how often serve prunes the history to its retention.
const historyPruneInterval = time.Hour

// historyConfig opens the history for serve, starts its pruner and fills
// cfg.History; it also attaches the log ring as cfg.Logs. cleanup stops the
// pruner and closes the database.
func historyConfig(c *cli.Context, cfg *mcp.Config) (cleanup func(), err error) {
	if logRing != nil {
		cfg.Logs = logRing
		cfg.HostPaths = hostPaths(c)
	}
	return openHistory(c, cfg, c.String("history-db"))
}

// openHistory opens the history database at path ("" or "off": none) for
// serve, starts its pruner and fills cfg.History.
func openHistory(c *cli.Context, cfg *mcp.Config, path string) (cleanup func(), err error) {
	if path == "" || path == "off" {
		slog.Info("execution history is off")
		return func() {}, nil
	}
	db, err := history.Open(c.Context, path)
	if err != nil {
		return nil, fmt.Errorf("%w (hint: pass --history-db with a writable path, or --history-db off)", err)
	}
	ret := history.Retention{MaxAge: c.Duration("history-max-age"), MaxCount: c.Int64("history-max-runs")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Pruner(ctx, ret, historyPruneInterval, slog.Default())
	}()
	slog.Info("execution history ready", "db", path, "max_age", ret.MaxAge, "max_runs", ret.MaxCount)
	cfg.History = db
	return func() {
		cancel()
		<-done
		db.Close()
	}, nil
}

func historyCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
	return &cli.Command{
		Name:      "history",
		Usage:     "list the runs the server recorded, newest first",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			historyDBFlag(), tenantFlag(), historyDataDirFlag(),
			&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Value: history.DefaultLimit, Usage: "how many runs to list"},
			&cli.StringFlag{Name: "status", Usage: "only runs with this status (success, error, timeout, oom, compile_error)"},
			&cli.StringFlag{Name: "language", Usage: "only runs in this language"},
			&cli.StringFlag{Name: "before", Usage: "only runs older than this run id or RFC 3339 time"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected argument %q (did you mean `sandpit history show %s`?)", c.Args().First(), c.Args().First())
			}
			f := history.Filter{Limit: c.Int("limit"), Status: c.String("status"), Language: strings.ToLower(c.String("language"))}
			if b := c.String("before"); b != "" {
				if t, err := time.Parse(time.RFC3339Nano, b); err == nil {
					f.Before = t
				} else {
					f.BeforeID = b
				}
			}
			return withHistory(c, func(db *history.DB) error {
				runs, err := db.List(c.Context, f)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, runs)
				}
				return printHistory(c.App.Writer, runs)
			})
		},
		Subcommands: []*cli.Command{{
			Name:      "show",
			Usage:     "print one run in full, code included",
			ArgsUsage: "ID",
			Flags:     []cli.Flag{historyDBFlag(), tenantFlag(), historyDataDirFlag(), jsonFlag},
			Action: func(c *cli.Context) error {
				// cli stops parsing flags at the id: accept `show ID --json` too.
				asJSON := c.Bool("json")
				var ids []string
				for _, a := range c.Args().Slice() {
					if a == "--json" || a == "-json" {
						asJSON = true
						continue
					}
					ids = append(ids, a)
				}
				if len(ids) != 1 {
					return errors.New("usage: sandpit history show ID [--json] (ids are in `sandpit history`)")
				}
				return withHistory(c, func(db *history.DB) error {
					r, err := db.Get(c.Context, ids[0])
					if err != nil {
						return err
					}
					if asJSON {
						return printJSON(c.App.Writer, r)
					}
					return printRun(c.App.Writer, r)
				})
			},
		}},
	}
}

// withHistory opens an existing history database; it never creates one.
func withHistory(c *cli.Context, fn func(*history.DB) error) error {
	path := c.String("history-db")
	if tn := c.String("tenant"); tn != "" {
		if c.IsSet("history-db") {
			return fmt.Errorf("give --tenant or --history-db, not both")
		}
		if !auth.ValidTenant(tn) {
			return fmt.Errorf("--tenant %q is not a tenant name (sandpit tenants lists them)", tn)
		}
		path = filepath.Join(c.String("data-dir"), "tenants", tn, "history.db")
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no history at %s (the server has recorded no runs there; pass --history-db to read another)", path)
	}
	db, err := history.Open(c.Context, path)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printHistory(w io.Writer, runs []history.Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED (UTC)\tID\tLANGUAGE\tSTATUS\tEXIT\tDURATION\tCPU\tMEMORY\tCODE")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			r.Started.UTC().Format("2006-01-02 15:04:05"), r.ID, r.Language, r.Status, r.ExitCode,
			msText(r.DurationMS), msText(r.CPUUserMS+r.CPUSystemMS), sizeText(r.MemoryPeakBytes), codeLine(r, 48))
	}
	return tw.Flush()
}

func printRun(w io.Writer, r history.Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, a...)...) }
	row("id", "%s", r.ID)
	row("started", "%s", r.Started.UTC().Format(time.RFC3339Nano))
	row("language", "%s", r.Language)
	row("status", "%s (exit code %d)", r.Status, r.ExitCode)
	row("duration", "%s", msText(r.DurationMS))
	row("cpu", "%s user, %s system", msText(r.CPUUserMS), msText(r.CPUSystemMS))
	row("memory peak", "%s", sizeText(r.MemoryPeakBytes))
	row("pids", "%d", r.Pids)
	row("oom killed", "%t", r.OOMKilled)
	row("stdin", "%s", sizeText(r.StdinBytes))
	row("stdout", "%s%s", sizeText(r.StdoutBytes), truncText(r.StdoutTruncated))
	row("stderr", "%s%s", sizeText(r.StderrBytes), truncText(r.StderrTruncated))
	if len(r.Files) > 0 {
		row("workspace", "%s", r.Files)
	}
	if len(r.Limits) > 0 {
		row("limits", "%s", r.Limits)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	section := func(name, s string) {
		if s == "" {
			return
		}
		fmt.Fprintf(w, "--- %s ---\n%s\n", name, strings.TrimSuffix(s, "\n"))
	}
	if r.Path != "" {
		fmt.Fprintf(w, "--- ran workspace file %s ---\n", r.Path)
	} else {
		section(fmt.Sprintf("code (%d bytes, sha256 %.12s)", r.CodeBytes, r.CodeSHA256), r.Code)
	}
	section("stdout (first KiB)", r.StdoutHead)
	section("stderr (first KiB)", r.StderrHead)
	return nil
}

func codeLine(r history.Run, n int) string {
	if r.Path != "" {
		return "(file " + r.Path + ")"
	}
	s := strings.Join(strings.Fields(r.CodePreview), " ")
	if rs := []rune(s); len(rs) > n {
		s = string(rs[:n-1]) + "…"
	}
	return s
}

func msText(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.2f s", float64(ms)/1000)
}

func sizeText(n int64) string {
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

func truncText(t bool) string {
	if t {
		return " (truncated)"
	}
	return ""
}
