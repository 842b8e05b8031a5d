package main

import (
	"log/slog"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/mcp"
)

func serveCommand() *cli.Command {
	flags := append(containerdFlags(),
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "run_code's default timeout"},
		&cli.DurationFlag{Name: "max-timeout", Value: 60 * time.Second, Usage: "the longest timeout a caller may ask for"},
		&cli.IntFlag{Name: "max-code-kb", Value: 64, Usage: "largest code or stdin accepted (KiB)"},
	)
	return &cli.Command{
		Name:  "serve",
		Usage: "serve MCP over stdio (stdout is the protocol; logs go to stderr)",
		Flags: flags,
		Action: func(c *cli.Context) error {
			rt, err := newRuntime(c)
			if err != nil {
				return err
			}
			defer rt.Close()
			cfg := mcp.Config{
				Name:           "sandpit",
				Version:        version,
				Runner:         rt,
				DefaultTimeout: c.Duration("timeout"),
				MaxTimeout:     c.Duration("max-timeout"),
				MaxCodeBytes:   c.Int("max-code-kb") << 10,
				Logger:         slog.Default(),
			}
			s := mcp.NewServer(cfg)
			slog.Info("sandpit serving MCP on stdio", "version", version)
			return server.ServeStdio(s)
		},
	}
}
