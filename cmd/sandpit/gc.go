package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/internal/instance"
)

func gcCommand() *cli.Command {
	return &cli.Command{
		Name:  "gc",
		Usage: "remove what crashed sandpit processes left behind: sandboxes, snapshots, run files, workspace views (never a live instance's)",
		Flags: containerdFlags(),
		Action: func(c *cli.Context) error {
			addr, err := address(c)
			if err != nil {
				return err
			}
			if name := c.String("instance"); name != "" {
				in, err := instance.Acquire(instanceRoot(c), name)
				if err != nil {
					return err // a live instance: says which pid holds it
				}
				n, err := sweepInstance(c, addr, in)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "removed %d leftover sandboxes of instance %q\n", n, name)
				return nil
			}
			n, err := sweepDead(c, addr)
			fmt.Fprintf(c.App.Writer, "removed %d leftover sandboxes of dead instances\n", n)
			return err
		},
	}
}
