package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/images"
)

func imagesCommand() *cli.Command {
	return &cli.Command{
		Name:  "images",
		Usage: "build, list, remove, import and pull the images sandboxes run",
		Subcommands: []*cli.Command{
			{
				Name:  "build",
				Usage: "build the default toolchain image from Debian packages (no registry needed; about 2 minutes, then cached)",
				Flags: append(containerdFlags(),
					&cli.BoolFlag{Name: "force", Usage: "rebuild the rootfs even if it is cached"},
					&cli.StringFlag{Name: "mirror", Value: images.DefaultMirror, Usage: "Debian mirror for debootstrap", EnvVars: []string{"SANDPIT_DEBIAN_MIRROR"}},
					&cli.StringFlag{Name: "cache-dir", Usage: "where built rootfs layers are kept (default $" + images.EnvCacheDir + " or " + images.DefaultCacheDir + ")"},
				),
				Action: withImages(func(c *cli.Context, ctx context.Context, store *images.Store) error {
					b := store.Builder()
					b.Mirror, b.CacheDir = c.String("mirror"), c.String("cache-dir")
					if isTerminal(os.Stderr) {
						b.Progress = os.Stderr
					}
					r := images.DefaultRecipe()
					if err := b.Build(ctx, r, c.Bool("force")); err != nil {
						return err
					}
					v, err := store.Versions(ctx, r.Ref)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "%s %s\n", r.Ref, formatVersions(v))
					return nil
				}),
			},
			{
				Name:  "ls",
				Usage: "list images with their size and language versions",
				Flags: append(containerdFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
				Action: withImages(func(c *cli.Context, ctx context.Context, store *images.Store) error {
					infos, err := store.List(ctx)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						enc := json.NewEncoder(c.App.Writer)
						enc.SetIndent("", "  ")
						return enc.Encode(infos)
					}
					return printImages(c.App.Writer, infos)
				}),
			},
			{
				Name:      "rm",
				Usage:     "remove images (and the snapshots only they use)",
				ArgsUsage: "REF...",
				Flags:     containerdFlags(),
				Action: withImages(func(c *cli.Context, ctx context.Context, store *images.Store) error {
					if c.NArg() == 0 {
						return fmt.Errorf("images rm: name at least one image (see `sandpit images ls`)")
					}
					for _, ref := range c.Args().Slice() {
						if err := store.Remove(ctx, ref); err != nil {
							return err
						}
						fmt.Fprintln(c.App.Writer, ref)
					}
					return nil
				}),
			},
			{
				Name:      "import",
				Usage:     "import an OCI or Docker image archive (`-` reads stdin) and unpack it",
				ArgsUsage: "FILE",
				Flags:     append(containerdFlags(), &cli.StringFlag{Name: "ref", Usage: "store the archive's single image under this name"}),
				Action: withImages(func(c *cli.Context, ctx context.Context, store *images.Store) error {
					if c.NArg() != 1 {
						return fmt.Errorf("images import: name one archive file, or - for stdin")
					}
					var in io.Reader = os.Stdin
					if name := c.Args().First(); name != "-" {
						f, err := os.Open(name)
						if err != nil {
							return err
						}
						defer f.Close()
						in = f
					}
					names, err := store.Import(ctx, in, c.String("ref"))
					if err != nil {
						return err
					}
					for _, n := range names {
						fmt.Fprintln(c.App.Writer, n)
					}
					return nil
				}),
			},
			{
				Name:      "pull",
				Usage:     "pull an image from a registry and unpack it (hosts with a registry only)",
				ArgsUsage: "REF",
				Flags:     containerdFlags(),
				Action: withImages(func(c *cli.Context, ctx context.Context, store *images.Store) error {
					if c.NArg() != 1 {
						return fmt.Errorf("images pull: name one image, e.g. docker.io/library/python:3.12-slim")
					}
					if err := store.Pull(ctx, c.Args().First()); err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, c.Args().First())
					return nil
				}),
			},
		},
	}
}

// withImages connects to containerd's images in the configured namespace.
func withImages(fn func(c *cli.Context, ctx context.Context, store *images.Store) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		store, err := connectImages(c)
		if err != nil {
			return err
		}
		defer store.Close()
		return fn(c, c.Context, store)
	}
}

func printImages(w io.Writer, infos []images.Info) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REF\tSIZE\tCREATED\tUNPACKED\tVERSIONS")
	for _, i := range infos {
		fmt.Fprintf(tw, "%s\t%.1f MiB\t%s\t%v\t%s\n", i.Ref, float64(i.Size)/(1<<20),
			i.Created.Local().Format("2006-01-02 15:04"), i.Unpacked, formatVersions(i.Versions))
	}
	return tw.Flush()
}

func formatVersions(v map[string]string) string {
	parts := make([]string, 0, len(v))
	for lang, ver := range v {
		parts = append(parts, lang+"="+ver)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
