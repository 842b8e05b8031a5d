package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/images"
	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/runtime"
)

func imagesCommand() *cli.Command {
	return &cli.Command{
		Name:  "images",
		Usage: "build, list, remove, import and pull the images sandboxes run",
		Subcommands: []*cli.Command{
			{
				Name:      "build",
				Usage:     "build images from the catalog's recipes with Debian packages (no registry needed; minutes the first time, then cached)",
				ArgsUsage: "[IMAGE...]",
				Description: `Builds the named images of the catalog (see ` + "`sandpit images catalog`" + `), or, without
names, every image some language runs on (the default image first). Examples:
   sandpit images build                       # what serve uses
   sandpit images build toolchain datascience
   sandpit images build --packages python3-networkx,python3-bs4 datascience
   sandpit images build --catalog my.toml golang`,
				Flags: append(containerdFlags(),
					&cli.BoolFlag{Name: "force", Usage: "rebuild the rootfs even if it is cached"},
					&cli.BoolFlag{Name: "all", Usage: "build every image of the catalog"},
					&cli.StringSliceFlag{Name: "packages", Usage: "extra Debian packages to add to the image (comma-separated; kept when serve rebuilds it)"},
					mirrorFlag(),
					cacheDirFlag(),
				),
				Action: withImages(func(c *cli.Context, ctx context.Context, store *images.Store) error {
					cat, err := images.LoadCatalog(c.String("catalog"))
					if err != nil {
						return err
					}
					names := c.Args().Slice()
					switch {
					case c.Bool("all"):
						names = cat.ImageNames()
					case len(names) == 0:
						names = cat.UsedImages()
					}
					var extra []string
					for _, p := range c.StringSlice("packages") {
						extra = append(extra, strings.Split(p, ",")...)
					}
					b := store.Builder()
					b.Mirror, b.CacheDir = c.String("mirror"), c.String("cache-dir")
					if isTerminal(os.Stderr) {
						b.Progress = os.Stderr
					}
					for _, name := range names {
						r, err := cat.Recipe(name)
						if err != nil {
							return err
						}
						r = r.WithPackages(extra...)
						if err := b.Build(ctx, r, c.Bool("force")); err != nil {
							return err
						}
						v, err := store.Versions(ctx, r.Ref)
						if err != nil {
							return err
						}
						fmt.Fprintf(c.App.Writer, "%s %s\n", r.Ref, formatVersions(v))
					}
					return nil
				}),
			},
			{
				Name:  "server",
				Usage: "write sandpit's own image, for Kubernetes, to an OCI archive (no registry or containerd needed)",
				Description: `Writes the image the node agents and front doors of scripts/kubernetes run (` + images.ServerRef + `)
to an OCI image archive: a Debian bookworm rootfs from sandpit's image recipes (debootstrap,
cached as ` + "`images build`" + ` caches: minutes and root the first time, seconds after) and
this sandpit binary (or --binary) at ` + images.ServerBinary + `. containerd need not run here.
Then put it on every node that runs sandpit, e.g.:
   sandpit images server --output sandpit.tar
   scripts/k8s.sh import DIR sandpit.tar         # the private test node (k8s.sh up DIR --node)
   ctr -n k8s.io images import sandpit.tar       # a node whose kubelet uses containerd
or push it to a registry with a tool of your choice that reads OCI archives, and name that
image in the manifests. The binary must be built for the image's glibc (on Debian 12, say):
the export checks its libraries against the rootfs and refuses one that would not start.`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "archive to write (replaced whole, or left as it was; - for stdout)"},
					&cli.StringFlag{Name: "ref", Value: images.ServerRef, Usage: "name the image is imported under"},
					&cli.StringFlag{Name: "binary", Usage: "sandpit binary to put in the image (default: this one)"},
					mirrorFlag(),
					cacheDirFlag(),
				},
				Action: exportServer,
			},
			{
				Name:  "catalog",
				Usage: "print the catalog in effect: languages, image recipes and which image runs which language",
				Flags: []cli.Flag{catalogFlag(), &cli.BoolFlag{Name: "builtin", Usage: "print the built-in catalog file itself (a starting point for your own)"}},
				Action: func(c *cli.Context) error {
					if c.Bool("builtin") {
						_, err := io.WriteString(c.App.Writer, images.BuiltinCatalog())
						return err
					}
					cat, err := images.LoadCatalog(c.String("catalog"))
					if err != nil {
						return err
					}
					return printCatalog(c.App.Writer, cat)
				},
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

func mirrorFlag() cli.Flag {
	return &cli.StringFlag{Name: "mirror", Value: images.DefaultMirror, Usage: "Debian mirror for debootstrap", EnvVars: []string{"SANDPIT_DEBIAN_MIRROR"}}
}

func cacheDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "cache-dir", EnvVars: []string{images.EnvCacheDir}, Usage: "where built rootfs layers are kept (default $" + images.EnvCacheDir + " or " + images.DefaultCacheDir + ")"}
}

// exportServer is `images server`. It builds its Builder without a
// containerd client: the image goes to a file, not into a daemon.
func exportServer(c *cli.Context) error {
	if c.NArg() != 0 {
		return fmt.Errorf("images server: unexpected arguments %v (the archive is --output FILE)", c.Args().Slice())
	}
	bin := c.String("binary")
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("images server: find this binary: %w (pass --binary)", err)
		}
		bin = self
	}
	b := &images.Builder{Mirror: c.String("mirror"), CacheDir: c.String("cache-dir")}
	if isTerminal(os.Stderr) {
		b.Progress = os.Stderr
	}
	ref, out := c.String("ref"), c.String("output")
	export := func(w io.Writer) error { return b.ExportServer(c.Context, bin, ref, w) }
	if out == "-" {
		if isTerminal(os.Stdout) {
			return fmt.Errorf("images server: not writing an image archive to a terminal (redirect it, or give --output FILE)")
		}
		if err := export(os.Stdout); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "%s %s\n", out, ref)
		return nil
	}
	if err := writeFileAtomic(out, export); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%s %s\n", out, ref)
	return nil
}

// writeFileAtomic writes path through a temporary file beside it, renamed
// over it only when write succeeded: a reader never sees half an archive,
// and a failed export leaves what was there.
func writeFileAtomic(path string, write func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err // the export's own error says what failed
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
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
	fmt.Fprintln(tw, "REF\tSIZE\tCREATED\tUNPACKED\tVERSIONS\tLIBRARIES")
	for _, i := range infos {
		var libs []string
		for lang, l := range i.Libraries {
			libs = append(libs, lang+": "+strings.Join(l, ", "))
		}
		sort.Strings(libs)
		if len(i.Extra) > 0 {
			libs = append(libs, "+ "+strings.Join(i.Extra, ", "))
		}
		fmt.Fprintf(tw, "%s\t%.1f MiB\t%s\t%v\t%s\t%s\n", i.Ref, float64(i.Size)/(1<<20),
			i.Created.Local().Format("2006-01-02 15:04"), i.Unpacked, formatVersions(i.Versions), strings.Join(libs, "; "))
	}
	return tw.Flush()
}

func printCatalog(w io.Writer, cat *images.Catalog) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LANGUAGE\tALIASES\tIMAGE\tRUN")
	for _, b := range cat.Bindings() {
		run := strings.Join(b.Run, " ")
		if len(b.Compile) > 0 {
			run = strings.Join(b.Compile, " ") + " && " + run
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (%s)\t%s\n", b.Name, strings.Join(b.Aliases, ","), b.Image, b.Ref, run)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "IMAGE\tREF\tPACKAGES")
	for _, name := range cat.ImageNames() {
		r, err := cat.Recipe(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, r.Ref, strings.Join(r.Packages, ","))
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

// buildStopWait bounds how long a server's exit waits for the image build
// it started to end after cancelling it (debootstrap's exit trap unmounts
// what it mounted; images.runGroup gives it 30 s before SIGKILL).
const buildStopWait = time.Minute

// startImageBuild builds, in the background, the images the catalog's
// languages run on, on first use, so that the MCP handshake is not held up
// (runs fail with a clear "image not available" until they are ready). It
// returns what the server calls on exit: that cancels the build and waits
// for it to end, so no debootstrap outlives the server. Nothing is built
// when every run would be refused (rootless where limits cannot be
// enforced): those images could not be used.
func startImageBuild(c *cli.Context, cfg runtime.Config) (stop func()) {
	if ok, reason := imagesUsable(cfg, probeRootlessCgroups); !ok {
		slog.Warn("not building images: every run is refused here", "reason", reason)
		return func() {}
	}
	ctx, cancel := context.WithCancel(c.Context)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ensureImages(ctx, c)
	}()
	return func() {
		cancel()
		select {
		case <-done:
			return
		default:
		}
		slog.Info("stopping the image build this server started")
		select {
		case <-done:
		case <-time.After(buildStopWait):
			slog.Warn("the image build did not end in time; exiting (debootstrap gets SIGTERM as this process exits)", "waited", buildStopWait)
		}
	}
}

// imagesUsable says whether images built for cfg's runtime could be used:
// not when it is rootless, the operator did not accept unenforced limits,
// and probe says the cgroups cannot enforce them (known: the probe could
// tell; a rootless daemon not yet reachable is asked again by each run).
func imagesUsable(cfg runtime.Config, probe func(address string) (known, ok bool, reason string)) (bool, string) {
	if !cfg.Rootless || cfg.AllowUnenforcedLimits {
		return true, ""
	}
	known, ok, reason := probe(cfg.Address)
	if !known || ok {
		return true, ""
	}
	return false, reason
}

// probeRootlessCgroups asks whether the rootless containerd at address can
// enforce limits. On cgroup v2 the answer depends on the daemon's cgroup:
// unknown while it does not answer.
func probeRootlessCgroups(address string) (known, ok bool, reason string) {
	if host.DetectCgroups() == host.CgroupV2 {
		if _, err := host.PeerPID(address); err != nil {
			return false, false, ""
		}
	}
	ok, reason = runtime.RootlessCgroups(address)
	return true, ok, reason
}

// ensureImages builds the images the catalog's languages run on that are
// missing, until ctx ends.
func ensureImages(ctx context.Context, c *cli.Context) {
	store, err := connectImages(c)
	if err != nil {
		slog.Warn("cannot check images", "err", err)
		return
	}
	defer store.Close()
	b := store.Builder()
	cat := mustCatalog(c)
	for _, name := range cat.UsedImages() {
		if ctx.Err() != nil {
			return
		}
		r, err := cat.Recipe(name)
		if err == nil {
			err = b.Ensure(ctx, r)
		}
		if err != nil && ctx.Err() == nil {
			slog.Error("building an image failed; run `sandpit images build` to see why", "image", name, "err", err)
		}
	}
}
