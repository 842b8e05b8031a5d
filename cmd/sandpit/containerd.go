package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/runtime"
)

// containerdCommand manages the private containerd that sandpit starts by
// itself when no system daemon answers; scripts/containerd.sh calls it, so
// the daemon's configuration and start-up live in one place.
func containerdCommand() *cli.Command {
	flags := []cli.Flag{privateDirFlag(), privateRootFlag()}
	return &cli.Command{
		Name:  "containerd",
		Usage: "start, stop or check sandpit's private containerd (own root, state and sockets; CRI off)",
		Subcommands: []*cli.Command{
			{
				Name: "start", Usage: "start it unless it answers already; print its socket", Flags: flags,
				Action: func(c *cli.Context) error {
					d := privateDaemon(c)
					if v, err := runtime.Answers(c.Context, d.Address(), 2*time.Second); err == nil {
						slog.Info("private containerd already running", "address", d.Address(), "version", v)
					} else if err := d.Start(c.Context, slog.Default()); err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, d.Address())
					return nil
				},
			},
			{
				Name: "stop", Usage: "stop it", Flags: flags,
				Action: func(c *cli.Context) error {
					ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
					defer cancel()
					return privateDaemon(c).Stop(ctx)
				},
			},
			{
				Name: "status", Usage: "exit 0 if it answers", Flags: flags,
				Action: func(c *cli.Context) error {
					d := privateDaemon(c)
					v, err := runtime.Answers(c.Context, d.Address(), 2*time.Second)
					if err != nil {
						return cli.Exit(fmt.Sprintf("not running at %s", d.Address()), 1)
					}
					fmt.Fprintf(c.App.Writer, "running at %s (containerd %s, pid %d)\n", d.Address(), v, d.PID())
					return nil
				},
			},
			{
				Name: "address", Usage: "print its socket", Flags: flags,
				Action: func(c *cli.Context) error {
					fmt.Fprintln(c.App.Writer, privateDaemon(c).Address())
					return nil
				},
			},
			{
				Name: "config", Usage: "print its config.toml (for scripts that start containerd themselves)", Flags: flags,
				Action: func(c *cli.Context) error {
					fmt.Fprint(c.App.Writer, privateDaemon(c).Config())
					return nil
				},
			},
		},
	}
}

// The private daemon's directories; the env names are the ones
// scripts/containerd.sh has always read.
func privateDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "private-dir", Value: "/run/sandpit/containerd", Usage: "sockets and state of the private containerd", EnvVars: []string{"SANDPIT_CONTAINERD_DIR"}}
}

func privateRootFlag() cli.Flag {
	return &cli.StringFlag{Name: "private-root", Value: "/var/lib/sandpit/containerd", Usage: "persistent data of the private containerd", EnvVars: []string{"SANDPIT_CONTAINERD_ROOT"}}
}
