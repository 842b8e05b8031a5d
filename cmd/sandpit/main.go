// Command sandpit is an MCP server that runs an agent's code in locked-down
// containers through containerd. This package only parses flags and wires
// the runtime, store and MCP layers together.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/logring"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	app := &cli.App{
		Name:    "sandpit",
		Usage:   "a secure local workspace for LLM agents, served over MCP",
		Version: version,
		// stdout belongs to the MCP protocol in serve mode: everything for
		// humans that is not a command's output goes to stderr.
		ErrWriter: os.Stderr,
		Flags:     globalFlags(),
		Before: func(c *cli.Context) error {
			// A reader that goes away (an MCP client, `| head`, a killed
			// parent) closes our stdout or stderr: a write must fail, not
			// kill the process with SIGPIPE (Go's default for fds 1 and 2)
			// before it has released its sandboxes — serve, run and bench
			// alike (a bench whose parent test was killed left 10).
			signal.Ignore(syscall.SIGPIPE)
			setupLogging(c)
			return nil
		},
		Commands: []*cli.Command{
			// one line per command; each lives in its own file
			serveCommand(),
			runCommand(),
			gcCommand(),
			doctorCommand(),
			versionCommand(),
			imagesCommand(),
			historyCommand(),
			uiCommand(),
			benchCommand(),
			containerdCommand(),
			tokenCommand(),
			tenantsCommand(),
			packagesCommand(),
			clusterCommand(),
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sandpit:", sandpit.Describe(err))
		os.Exit(1)
	}
}

func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"SANDPIT_LOG_LEVEL"}},
	}
}

func setupLogging(c *cli.Context) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		lvl = slog.LevelInfo
	}
	logRing = logring.New(logRingSize, lvl) // sandbox://logs shows what stderr shows
	slog.SetDefault(slog.New(logRing.Handler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))))
}
