// Package images builds, imports, pulls and lists the images sandboxes run.
//
// Its guarantee: an image built here is a single uncompressed layer,
// unpacked into the snapshotter the runtime uses, whose rootfs already has
// every mountpoint the runtime binds (so it can be mounted read-only), an
// unprivileged "sandbox" user (1000:1000), and labels recording the version
// of each language it carries. Builds need no registry: the rootfs comes
// from Debian packages via debootstrap and is cached, keyed by recipe, so
// rebuilding after containerd's state is wiped only re-imports. A cache
// entry is either complete or absent.
//
// Callers set the containerd namespace on the context.
package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
	cimages "github.com/containerd/containerd/images"
	transferarchive "github.com/containerd/containerd/images/archive"
	"github.com/containerd/containerd/namespaces"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/host"
)

// DefaultSnapshotter is the snapshotter images are unpacked into; the
// runtime must create its snapshots with the same one.
const DefaultSnapshotter = "overlayfs"

var (
	// ErrNotFound: no image of that name in containerd.
	ErrNotFound = sandpit.Define(sandpit.ErrNotFound, "image not found")
	// ErrBuild: building the rootfs failed (debootstrap, a probe).
	ErrBuild = errors.New("image build failed")
	// ErrInvalidRecipe: the recipe cannot be built as written.
	ErrInvalidRecipe = sandpit.Define(sandpit.ErrInvalidArgument, "invalid image recipe")
)

// Builder builds recipes into containerd. The zero value needs only Client.
type Builder struct {
	Client *containerd.Client
	// CacheDir keeps built rootfs layers; default $SANDPIT_CACHE_DIR, else
	// DefaultCacheDir for root and ~/.cache/sandpit/images for a normal
	// (or rootless) user.
	CacheDir string
	// Mirror is the Debian mirror; default DefaultMirror.
	Mirror string
	// Snapshotter to unpack into; default DefaultSnapshotter.
	Snapshotter string
	// Progress, when set, receives debootstrap's output as it runs (a
	// terminal). When nil, a build logs a few lines only.
	Progress io.Writer
	// Log defaults to slog.Default().
	Log *slog.Logger

	// ns, when set (Store.Builder), is the namespace Build and Ensure use.
	ns string

	// bootstrap and probe are debootstrap and chroot; tests replace them.
	bootstrap func(ctx context.Context, r Recipe, mirror, rootfs string, out io.Writer) error
	probe     probeFunc
	// progressEvery is how often a build logs its progress; default
	// defaultProgressEvery (tests shorten it).
	progressEvery time.Duration
}

func (b *Builder) progressInterval() time.Duration {
	if b.progressEvery > 0 {
		return b.progressEvery
	}
	return defaultProgressEvery
}

func (b *Builder) cacheDir() string {
	if b.CacheDir != "" {
		return b.CacheDir
	}
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d
	}
	if os.Geteuid() != 0 || host.InUserNamespace() {
		// A normal user (rootless) cannot write /var/cache: use theirs.
		if d, err := os.UserCacheDir(); err == nil {
			return filepath.Join(d, "sandpit", "images")
		}
	}
	return DefaultCacheDir
}

func (b *Builder) mirror() string {
	if b.Mirror != "" {
		return b.Mirror
	}
	return DefaultMirror
}

func (b *Builder) snapshotter() string {
	if b.Snapshotter != "" {
		return b.Snapshotter
	}
	return DefaultSnapshotter
}

// nsctx applies the builder's namespace, when it has one; otherwise ctx's.
func (b *Builder) nsctx(ctx context.Context) context.Context {
	if b.ns != "" {
		return namespaces.WithNamespace(ctx, b.ns)
	}
	return ctx
}

func (b *Builder) log() *slog.Logger {
	if b.Log != nil {
		return b.Log
	}
	return slog.Default()
}

// Build makes r.Ref in containerd from recipe r: from the cached rootfs if
// there is one, otherwise by running debootstrap first. force rebuilds the
// rootfs even when it is cached.
func (b *Builder) Build(ctx context.Context, r Recipe, force bool) error {
	ctx = b.nsctx(ctx)
	if err := r.Validate(); err != nil {
		return err
	}
	e, err := b.rootfs(ctx, r, force)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := importEntry(ctx, b.Client, r, e, b.snapshotter(), b.log()); err != nil {
		return err
	}
	b.log().Info("image ready", "ref", r.Ref, "size_mb", e.Size>>20, "import", time.Since(start).Round(time.Millisecond))
	return nil
}

// rootfs returns the cache entry for r, building it when missing or forced.
func (b *Builder) rootfs(ctx context.Context, r Recipe, force bool) (entry, error) {
	dir, key := b.cacheDir(), r.Key()
	if !force {
		if e, ok := lookup(dir, key); ok {
			b.log().Info("using cached image rootfs", "ref", r.Ref, "cache", e.dir)
			return e, nil
		}
	}
	log := b.log().With("ref", r.Ref)
	// One build per recipe at a time: a second caller (a CLI build beside
	// a serving daemon) waits for the first and reuses its result.
	unlock, err := lockKey(ctx, dir, key, log)
	if err != nil {
		return entry{}, err
	}
	defer unlock()
	if !force {
		if e, ok := lookup(dir, key); ok {
			log.Info("using image rootfs another build just made", "cache", e.dir)
			return e, nil
		}
	}
	log.Info("building image rootfs: minutes from a cold cache (measured on shared 2-core machines: toolchain 3-5, datascience 8-10, plus the import); progress every "+b.progressInterval().String(), "suite", r.Suite,
		"packages", strings.Join(r.Packages, ","), "mirror", b.mirror(), "cache", filepath.Join(dir, key))
	start := time.Now()
	e, err := buildEntry(ctx, dir, key, force, func(ctx context.Context, tmp string) (entry, error) {
		return b.fill(ctx, r, tmp, log)
	})
	if err != nil {
		return entry{}, err
	}
	log.Info("image rootfs built", "took", time.Since(start).Round(time.Second), "size_mb", e.Size>>20, "versions", e.Labels)
	return e, nil
}

// fill runs the build steps inside a cache build directory.
func (b *Builder) fill(ctx context.Context, r Recipe, tmp string, log *slog.Logger) (entry, error) {
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return entry{}, err
	}
	bootstrap, probe := b.bootstrap, b.probe
	if bootstrap == nil {
		bootstrap = debootstrap
	}
	if probe == nil {
		probe = chrootProbe
	}
	last := &tail{max: 20}
	prog := newProgress(rootfs, filepath.Join(tmp, layerFile))
	defer prog.report(ctx, log, b.progressInterval())()
	out := io.Writer(io.MultiWriter(last, prog))
	if b.Progress != nil {
		out = io.MultiWriter(b.Progress, last, prog)
	}
	if err := bootstrap(ctx, r, b.mirror(), rootfs, out); err != nil {
		if errors.Is(err, ErrBuild) && b.Progress == nil {
			return entry{}, fmt.Errorf("%w\n%s", err, last)
		}
		return entry{}, err
	}
	prog.step("customise")
	log.Info("packages installed; customising rootfs")
	if err := customise(rootfs); err != nil {
		return entry{}, err
	}
	if err := writeFiles(rootfs, r.Files); err != nil {
		return entry{}, err
	}
	if err := runSetup(ctx, r, rootfs, probe); err != nil {
		return entry{}, err
	}
	prog.step("probe versions")
	labels, err := probeVersions(ctx, r, rootfs, probe)
	if err != nil {
		return entry{}, err
	}
	libs, err := probeLibraries(ctx, r, rootfs, probe)
	if err != nil {
		return entry{}, err
	}
	maps.Copy(labels, libs)
	prog.step("write layer")
	diffID, size, err := writeLayer(ctx, rootfs, filepath.Join(tmp, layerFile))
	if err != nil {
		return entry{}, err
	}
	removeTree(rootfs)
	return entry{DiffID: diffID, Size: size, Labels: labels, Created: time.Now().UTC(), Command: r.describe()}, nil
}

// Ensure makes sure r.Ref is present and unpacked, building it on first
// use. An image built by sandpit from an older recipe is rebuilt; an image
// someone imported under that name without a recipe label is kept.
func (b *Builder) Ensure(ctx context.Context, r Recipe) error {
	ctx = b.nsctx(ctx)
	img, err := b.Client.GetImage(ctx, r.Ref)
	if errdefs.IsNotFound(err) {
		b.log().Info("image missing; building it", "ref", r.Ref)
		return b.Build(ctx, r, false)
	}
	if err != nil {
		return fmt.Errorf("look up image %s: %w", r.Ref, err)
	}
	spec, err := img.Spec(ctx)
	if err != nil {
		b.log().Warn("image config unreadable; rebuilding", "ref", r.Ref, "err", err)
		return b.Build(ctx, r, false)
	}
	labels := spec.Config.Labels
	if key, ok := labels[LabelRecipe]; ok && key != r.Key() && labels[LabelBase] != r.Key() {
		// Keep what `images build --packages` added to it.
		if extra := labels[LabelExtraPackages]; extra != "" {
			r = r.WithPackages(strings.Split(extra, ",")...)
		}
		b.log().Info("image was built from another recipe; rebuilding", "ref", r.Ref, "have", key, "want", r.Key(), "extra_packages", r.Extra)
		return b.Build(ctx, r, false)
	}
	if ok, err := img.IsUnpacked(ctx, b.snapshotter()); err == nil && ok {
		return nil
	}
	if err := img.Unpack(ctx, b.snapshotter()); err != nil {
		b.log().Warn("unpacking the stored image failed; rebuilding", "ref", r.Ref, "err", err)
		return b.Build(ctx, r, false)
	}
	return nil
}

// Info describes a stored image.
type Info struct {
	Ref     string    `json:"ref"`
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	// Name is the catalog name of the recipe it was built from.
	Name string `json:"name,omitempty"`
	// Versions maps language names to versions, from the image labels.
	Versions map[string]string `json:"versions,omitempty"`
	// Libraries maps language names to "module version" entries.
	Libraries map[string][]string `json:"libraries,omitempty"`
	// Extra are the Debian packages added on top of its recipe, with versions.
	Extra    []string `json:"extra_packages,omitempty"`
	Unpacked bool     `json:"unpacked"`
}

// List describes every image in the context's namespace, sorted by ref.
func List(ctx context.Context, client *containerd.Client) ([]Info, error) {
	imgs, err := client.ListImages(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	infos := make([]Info, 0, len(imgs))
	for _, img := range imgs {
		info := Info{Ref: img.Name(), Digest: img.Target().Digest.String(), Created: img.Metadata().CreatedAt}
		if size, err := img.Size(ctx); err == nil {
			info.Size = size
		}
		if spec, err := img.Spec(ctx); err == nil {
			info.Versions = versions(spec.Config.Labels)
			info.Name = spec.Config.Labels[LabelImage]
			info.Libraries, info.Extra = Libraries(spec.Config.Labels)
			if spec.Created != nil {
				info.Created = *spec.Created
			}
		}
		info.Unpacked, _ = img.IsUnpacked(ctx, DefaultSnapshotter)
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Ref < infos[j].Ref })
	return infos, nil
}

// Versions returns the language versions recorded in ref's labels, keyed
// by language name ("python" → "3.11.2").
func Versions(ctx context.Context, client *containerd.Client, ref string) (map[string]string, error) {
	img, err := client.GetImage(ctx, ref)
	if err != nil {
		return nil, notFound(ref, err)
	}
	spec, err := img.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("read config of image %s: %w", ref, err)
	}
	return versions(spec.Config.Labels), nil
}

// Libraries reads an image's labels: per language, its libraries as
// "module version", sorted; and the Debian packages added on top of its
// recipe as "package version".
func Libraries(labels map[string]string) (libs map[string][]string, extra []string) {
	for k, v := range labels {
		if rest, ok := strings.CutPrefix(k, LabelLibraryPrefix); ok {
			if lang, mod, ok := strings.Cut(rest, "."); ok {
				if libs == nil {
					libs = map[string][]string{}
				}
				libs[lang] = append(libs[lang], mod+" "+v)
			}
		}
		if pkg, ok := strings.CutPrefix(k, LabelPackagePrefix); ok {
			extra = append(extra, pkg+" "+v)
		}
	}
	for _, l := range libs {
		sort.Slice(l, func(i, j int) bool { return strings.ToLower(l[i]) < strings.ToLower(l[j]) })
	}
	sort.Strings(extra)
	return libs, extra
}

func versions(labels map[string]string) map[string]string {
	v := map[string]string{}
	for k, val := range labels {
		if name, ok := strings.CutPrefix(k, LabelVersionPrefix); ok {
			v[name] = val
		}
	}
	return v
}

// Remove deletes ref and, synchronously, whatever only it held (content and
// snapshots).
func Remove(ctx context.Context, client *containerd.Client, ref string) error {
	if err := client.ImageService().Delete(ctx, ref, cimages.SynchronousDelete()); err != nil {
		return notFound(ref, err)
	}
	return nil
}

// Import loads an OCI or Docker image archive and unpacks what it holds.
// With ref set, the archive must hold one image, which is stored under ref
// (the archive's own name is not kept unless it was there before);
// otherwise images keep their names and unnamed ones get a digest name.
// It returns the names stored.
func Import(ctx context.Context, client *containerd.Client, r io.Reader, ref string) ([]string, error) {
	ctx, done, err := client.WithLease(ctx)
	if err != nil {
		return nil, fmt.Errorf("import: lease: %w", err)
	}
	defer done(context.WithoutCancel(ctx))
	before := map[string]bool{}
	if ref != "" {
		existing, err := client.ImageService().List(ctx)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		for _, img := range existing {
			before[img.Name] = true
		}
	}
	imgs, err := client.Import(ctx, r, containerd.WithDigestRef(transferarchive.DigestTranslator("sandpit.local/import")))
	if err != nil {
		return nil, fmt.Errorf("import archive: %w", err)
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("import archive: it holds no image for this platform: %w", ErrNotFound)
	}
	// Unpacked before any renaming, for the reason importEntry unpacks
	// before it names the image.
	for _, img := range imgs {
		if err := containerd.NewImage(client, img).Unpack(ctx, DefaultSnapshotter); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", img.Name, err)
		}
	}
	if ref != "" {
		for _, img := range imgs[1:] {
			if img.Target.Digest != imgs[0].Target.Digest {
				return nil, sandpit.WithHint(fmt.Errorf("import archive: it holds several images, which cannot all be named %s: %w", ref, ErrInvalidRecipe), "import without --ref")
			}
		}
		renamed, err := storeImage(ctx, client, cimages.Image{Name: ref, Target: imgs[0].Target})
		if err != nil {
			return nil, fmt.Errorf("import archive as %s: %w", ref, err)
		}
		for _, img := range imgs {
			if img.Name != ref && !before[img.Name] {
				if err := client.ImageService().Delete(ctx, img.Name); err != nil && !errdefs.IsNotFound(err) {
					return nil, fmt.Errorf("import archive as %s: drop name %s: %w", ref, img.Name, err)
				}
			}
		}
		imgs = []cimages.Image{renamed}
	}
	var names []string
	for _, img := range imgs {
		names = append(names, img.Name)
	}
	return names, nil
}

// Pull fetches ref from its registry and unpacks it. Sandpit needs no
// registry; this is for hosts that have one.
func Pull(ctx context.Context, client *containerd.Client, ref string) error {
	if _, err := client.Pull(ctx, ref, containerd.WithPullUnpack, containerd.WithPullSnapshotter(DefaultSnapshotter)); err != nil {
		return sandpit.WithHint(fmt.Errorf("pull %s: %w", ref, err), "without a registry, use `sandpit images build` or `sandpit images import FILE`")
	}
	return nil
}

func notFound(ref string, err error) error {
	if errdefs.IsNotFound(err) {
		return sandpit.WithHint(fmt.Errorf("image %s: %w", ref, ErrNotFound), "run `sandpit images build`, or see `sandpit images ls`")
	}
	return fmt.Errorf("image %s: %w", ref, err)
}
