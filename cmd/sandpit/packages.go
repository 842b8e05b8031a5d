package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/internal/npm"
	"github.com/sandpit-dev/sandpit/internal/packages"
	"github.com/sandpit-dev/sandpit/internal/pypi"
	"github.com/sandpit-dev/sandpit/mcp"
)

// packageFlags are serve's package flags (issue 27: packages without a
// network).
func packageFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "package-source", Usage: "where install_packages fetches from: python=URL (a PEP 503/691 simple index, e.g. https://pypi.org/simple/) or javascript=URL (an npm registry, e.g. https://registry.npmjs.org/); repeat for both. None: install_packages says how to enable it"},
		&cli.StringSliceFlag{Name: "package-file-host", Usage: "a host besides a source's own that its files may come from (files.pythonhosted.org for PyPI); repeatable"},
		&cli.StringFlag{Name: "package-allow", Usage: "the package policy file: `allow|deny LANGUAGE NAME [VERSIONS]` a line; deny wins, and once a language has an allow line only what it allows installs (dependencies too)"},
		&cli.StringFlag{Name: "package-cache", Value: packageCacheDir(), Usage: "the verified artifact cache every workspace shares (content-addressed by sha256); `sandpit packages gc` trims it"},
		&cli.StringFlag{Name: "packages-dir", Usage: "a stdio server's package layers (default: beside --snapshot-dir); an HTTP tenant's are DATA_DIR/tenants/NAME/packages"},
		&cli.StringFlag{Name: "package-max-layer", Value: "1GiB", Usage: "largest a workspace's package layer may unpack to"},
		&cli.StringFlag{Name: "package-max-artifact", Value: "512MiB", Usage: "largest one downloaded wheel or tarball"},
		&cli.StringFlag{Name: "package-max-workspace", Value: "4GiB", Usage: "layers kept per workspace (tenant), the current one and those undo or a snapshot may want again; the oldest go first"},
		&cli.StringFlag{Name: "package-cache-max", Value: "8GiB", Usage: "the artifact cache is trimmed to this after installs (least recently used first; a trimmed artifact is fetched again when needed)"},
	}
}

func packageCacheDir() string {
	if systemWide() {
		return "/var/cache/sandpit/packages"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "sandpit", "packages")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "sandpit", "packages")
}

// packageSources is what every workspace of a server shares: the sources,
// the policy, the cache and the bounds.
type packageSources struct {
	python     *packages.PythonSource
	javascript *npm.Client
	policy     *packages.Policy
	cache      *pypi.Cache
	maxLayer   int64
	maxDisk    int64
	maxCache   int64
}

// pythonTarget is the interpreter of the images' suite (bookworm:
// CPython 3.11, glibc 2.36) on this machine's architecture.
func pythonTarget() (pypi.Target, error) {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[goruntime.GOARCH]
	if arch == "" {
		arch = goruntime.GOARCH
	}
	return pypi.LinuxTarget("3.11.2", "2.36", arch)
}

func newPackageSources(c *cli.Context) (*packageSources, error) {
	ps := &packageSources{}
	var err error
	if ps.maxLayer, err = parseSize(c.String("package-max-layer")); err != nil {
		return nil, fmt.Errorf("--package-max-layer: %w", err)
	}
	if ps.maxDisk, err = parseSize(c.String("package-max-workspace")); err != nil {
		return nil, fmt.Errorf("--package-max-workspace: %w", err)
	}
	if ps.maxCache, err = parseSize(c.String("package-cache-max")); err != nil {
		return nil, fmt.Errorf("--package-cache-max: %w", err)
	}
	maxArtifact, err := parseSize(c.String("package-max-artifact"))
	if err != nil {
		return nil, fmt.Errorf("--package-max-artifact: %w", err)
	}
	hosts := c.StringSlice("package-file-host")
	for _, s := range c.StringSlice("package-source") {
		lang, u, ok := strings.Cut(s, "=")
		if !ok || (!strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://")) {
			return nil, fmt.Errorf("--package-source %q: give python=URL or javascript=URL, the URL http(s)", s)
		}
		switch lang {
		case packages.Python:
			t, err := pythonTarget()
			if err != nil {
				return nil, err
			}
			ps.python = &packages.PythonSource{Client: &pypi.Client{BaseURL: u, AllowHosts: hosts, MaxArtifactBytes: maxArtifact, HTTPClient: &http.Client{}}, Target: t}
		case packages.JavaScript:
			ps.javascript = &npm.Client{BaseURL: u, AllowHosts: hosts, MaxArtifactBytes: maxArtifact, HTTPClient: &http.Client{}}
		default:
			return nil, fmt.Errorf("--package-source %q: language %q: give python or javascript", s, lang)
		}
	}
	if f := c.String("package-allow"); f != "" {
		if ps.policy, err = packages.ReadPolicy(f); err != nil {
			return nil, err
		}
	}
	if ps.cache, err = pypi.OpenCache(c.String("package-cache")); err != nil {
		return nil, fmt.Errorf("--package-cache: %w", err)
	}
	return ps, nil
}

// manager gives the workspace of cfg (its runs run by cfg.Runner) its
// package layers under dir.
func (ps *packageSources) manager(cfg *mcp.Config, dir string, uid, gid uint32) error {
	pcfg := packages.Config{
		Dir: dir, Cache: ps.cache, Python: ps.python, JavaScript: ps.javascript, Policy: ps.policy,
		Run: cfg.Runner.Run, MaxLayerBytes: ps.maxLayer, MaxWorkspaceDisk: ps.maxDisk, MaxCacheBytes: ps.maxCache,
	}
	pcfg.Owner.UID, pcfg.Owner.GID = uid, gid
	m, err := packages.New(pcfg)
	if err != nil {
		return err
	}
	cfg.Packages = m
	return nil
}

func packagesCommand() *cli.Command {
	return &cli.Command{
		Name:  "packages",
		Usage: "the package artifact cache install_packages fills",
		Subcommands: []*cli.Command{{
			Name:  "gc",
			Usage: "remove abandoned downloads and the least recently used artifacts until the cache is at most --max-size",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "package-cache", Value: packageCacheDir(), Usage: "the cache a server was given"},
				&cli.StringFlag{Name: "max-size", Value: "2GiB", Usage: "bytes of artifacts to keep"},
			},
			Action: func(c *cli.Context) error {
				max, err := parseSize(c.String("max-size"))
				if err != nil {
					return fmt.Errorf("--max-size: %w", err)
				}
				cache, err := pypi.OpenCache(c.String("package-cache"))
				if err != nil {
					return err
				}
				res, err := cache.GC(max)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "removed %d artifacts (%d bytes) and %d abandoned downloads; kept %d (%d bytes)\n", res.Removed, res.RemovedBytes, res.Partial, res.Kept, res.KeptBytes)
				return nil
			},
		}},
	}
}
