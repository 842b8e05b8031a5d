package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/internal/auth"
)

// tokenCommand manages the bearer tokens `serve --listen` accepts: each
// names a tenant and holds every scope. The store is a file under the data
// dir that a running server re-reads when it changes.
func tokenCommand() *cli.Command {
	dataDirFlag := &cli.StringFlag{Name: "data-dir", Value: dataDir(), EnvVars: []string{"SANDPIT_DATA_DIR"},
		Usage: "data directory whose tokens to manage (they live in DIR/auth/tokens.json)"}
	open := func(c *cli.Context, want int, usage string) (*auth.Tokens, error) {
		if c.NArg() != want {
			return nil, fmt.Errorf("usage: sandpit token %s (flags go before the name)", usage)
		}
		return auth.OpenTokens(c.String("data-dir"))
	}
	return &cli.Command{
		Name:  "token",
		Usage: "create, list and revoke the bearer tokens the HTTP server accepts",
		Subcommands: []*cli.Command{{
			Name:      "create",
			Usage:     "issue a token for tenant NAME; the token is printed once, as the last line",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{dataDirFlag},
			Action: func(c *cli.Context) error {
				s, err := open(c, 1, "create [--data-dir DIR] NAME")
				if err != nil {
					return err
				}
				tok, err := s.Create(c.Args().First())
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "created token %s (tenant %s): it is shown only now and stored only as a hash; send it as \"Authorization: Bearer <token>\"\n", c.Args().First(), c.Args().First())
				_, err = fmt.Fprintln(c.App.Writer, tok)
				return err
			},
		}, {
			Name:      "list",
			Usage:     "list the tokens' names and creation times (never the tokens)",
			ArgsUsage: " ",
			Flags:     []cli.Flag{dataDirFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}},
			Action: func(c *cli.Context) error {
				s, err := open(c, 0, "list [--data-dir DIR] [--json]")
				if err != nil {
					return err
				}
				list, err := s.List()
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, list)
				}
				tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tCREATED (UTC)")
				for _, t := range list {
					// Names are tenant names (checked on read): no control bytes to escape.
					fmt.Fprintf(tw, "%s\t%s\n", t.Name, t.Created.UTC().Format("2006-01-02 15:04:05"))
				}
				return tw.Flush()
			},
		}, {
			Name:      "revoke",
			Usage:     "delete token NAME; a running server refuses it within a second",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{dataDirFlag},
			Action: func(c *cli.Context) error {
				s, err := open(c, 1, "revoke [--data-dir DIR] NAME")
				if err != nil {
					return err
				}
				if err := s.Revoke(c.Args().First()); err != nil {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "revoked token %s\n", c.Args().First())
				return nil
			},
		}},
	}
}
