package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func gcCommand() *cli.Command {
	return &cli.Command{
		Name:  "gc",
		Usage: "remove sandboxes, snapshots and run files a crashed server left behind (this instance's only)",
		Flags: containerdFlags(),
		Action: func(c *cli.Context) error {
			rt, err := newRuntime(c)
			if err != nil {
				return err
			}
			defer rt.Close()
			n, err := rt.Sweep(c.Context)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "removed %d leftover sandboxes of instance %q\n", n, c.String("instance"))
			return nil
		},
	}
}
