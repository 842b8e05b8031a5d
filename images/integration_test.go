package images

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/images/archive"
	"github.com/containerd/containerd/leases"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/opencontainers/image-spec/identity"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

const (
	tinyRef     = "sandpit.local/test-tiny:1"
	tinyCopyRef = "sandpit.local/test-tiny:imported"
)

// tinyBuilder builds a few-file rootfs instead of running debootstrap, so
// the import path is tested against a real containerd in seconds.
func tinyBuilder(t *testing.T, client *containerd.Client) (*Builder, Recipe, *int) {
	calls := 0
	b := &Builder{
		Client:   client,
		CacheDir: t.TempDir(),
		Log:      discardLogger(),
		bootstrap: func(ctx context.Context, r Recipe, mirror, rootfs string, out io.Writer) error {
			calls++
			writeTree(t, rootfs, map[string]string{
				"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\n",
				"etc/group":    "root:x:0:\n",
				"usr/bin/tool": "#!/bin/sh\n",
				"bin":          "->usr/bin",
			})
			return os.Link(filepath.Join(rootfs, "usr/bin/tool"), filepath.Join(rootfs, "usr/bin/tool2"))
		},
		probe: func(ctx context.Context, rootfs string, argv []string) (string, error) {
			return "Tiny 0.1.2\n", nil
		},
	}
	r := Recipe{
		Ref:       tinyRef,
		Suite:     "tiny",
		Packages:  []string{"tool"},
		Languages: []Language{{Name: "tiny", Command: []string{"tool", "--version"}, Prefix: "tiny "}},
		Env:       []string{"PATH=/usr/bin"},
	}
	return b, r, &calls
}

// tinyImage is tinyBuilder for ref, with a client of the test containerd
// and ref removed before (an earlier, killed run's) and after the test.
func tinyImage(t *testing.T, ref string) (context.Context, *containerd.Client, *Builder, Recipe, *int) {
	t.Helper()
	client, err := containerd.New(testenv.Containerd(t), containerd.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() }) // registered first, so it runs after the removal below
	ctx := namespaces.WithNamespace(t.Context(), testenv.Namespace)
	b, r, calls := tinyBuilder(t, client)
	r.Ref = ref
	Remove(ctx, client, ref)
	t.Cleanup(func() { Remove(namespaces.WithNamespace(context.Background(), testenv.Namespace), client, ref) })
	return ctx, client, b, r, calls
}

func TestIntegrationBuildImportRemove(t *testing.T) {
	addr := testenv.Containerd(t)
	client, err := containerd.New(addr, containerd.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() }) // registered first, so it runs after the removals below
	ctx := namespaces.WithNamespace(t.Context(), testenv.Namespace)
	for _, ref := range []string{tinyRef, tinyCopyRef} {
		Remove(ctx, client, ref) // leftovers of an earlier, killed run
		t.Cleanup(func() {
			Remove(namespaces.WithNamespace(context.Background(), testenv.Namespace), client, ref)
		})
	}
	b, r, calls := tinyBuilder(t, client)

	if err := b.Build(ctx, r, false); err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkImage(t, ctx, client, r.Ref)

	// Ensure on a present, unpacked image does nothing; after the image is
	// gone it re-imports from the cache without bootstrapping again.
	if err := b.Ensure(ctx, r); err != nil {
		t.Fatalf("Ensure (present): %v", err)
	}
	if err := Remove(ctx, client, r.Ref); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := Versions(ctx, client, r.Ref); !errors.Is(err, ErrNotFound) {
		t.Errorf("Versions after Remove = %v, want ErrNotFound", err)
	}
	if err := Remove(ctx, client, r.Ref); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
	if err := b.Ensure(ctx, r); err != nil {
		t.Fatalf("Ensure (missing): %v", err)
	}
	if *calls != 1 {
		t.Errorf("bootstrap ran %d times; want 1 (later builds come from the cache)", *calls)
	}
	checkImage(t, ctx, client, r.Ref)

	// A new recipe under the same ref (a sandpit upgrade) replaces the
	// image built from the old one.
	newer := r
	newer.Packages = append([]string{"extra"}, r.Packages...)
	if err := b.Ensure(ctx, newer); err != nil {
		t.Fatalf("Ensure (newer recipe): %v", err)
	}
	if *calls != 2 {
		t.Errorf("bootstrap ran %d times; want 2 (a changed recipe is rebuilt)", *calls)
	}
	img, err := client.GetImage(ctx, r.Ref)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := img.Spec(ctx)
	if err != nil || spec.Config.Labels[LabelRecipe] != newer.Key() {
		t.Errorf("after Ensure the image's recipe label is %q (%v), want %s", spec.Config.Labels[LabelRecipe], err, newer.Key())
	}
	checkImage(t, ctx, client, r.Ref)

	// Export and import back under another name: the OCI archive path.
	var buf bytes.Buffer
	if err := client.Export(ctx, &buf, archive.WithImage(client.ImageService(), r.Ref)); err != nil {
		t.Fatalf("Export: %v", err)
	}
	if err := Remove(ctx, client, r.Ref); err != nil {
		t.Fatal(err)
	}
	names, err := Import(ctx, client, &buf, tinyCopyRef)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if len(names) != 1 || names[0] != tinyCopyRef {
		t.Errorf("Import stored %v, want [%s]", names, tinyCopyRef)
	}
	checkImage(t, ctx, client, tinyCopyRef)
	if _, err := Versions(ctx, client, r.Ref); !errors.Is(err, ErrNotFound) {
		t.Errorf("importing under a new name also stored the archive's name %s (Versions = %v)", r.Ref, err)
	}
}

// checkImage asserts ref is listed with its labels, unpacked, and that its
// snapshot holds the customised rootfs.
func checkImage(t *testing.T, ctx context.Context, client *containerd.Client, ref string) {
	t.Helper()
	infos, err := List(ctx, client)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var info *Info
	for i := range infos {
		if infos[i].Ref == ref {
			info = &infos[i]
		}
	}
	if info == nil {
		t.Fatalf("List does not show %s: %+v", ref, infos)
	}
	if !info.Unpacked || info.Size == 0 || info.Versions["tiny"] != "tiny 0.1.2" || info.Created.IsZero() {
		t.Errorf("List entry = %+v; want unpacked, sized, created, versions tiny=tiny 0.1.2", *info)
	}
	v, err := Versions(ctx, client, ref)
	if err != nil || len(v) != 1 || v["tiny"] != "tiny 0.1.2" {
		t.Errorf("Versions = %v, %v", v, err)
	}

	img, err := client.GetImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chainID := identity.ChainID(diffIDs).String()
	sn := client.SnapshotService(DefaultSnapshotter)
	if _, err := sn.Stat(ctx, chainID); err != nil {
		t.Fatalf("no snapshot for chain %s: %v", chainID, err)
	}

	// Mount a view of the snapshot and look at the rootfs the runtime gets.
	lctx, done, err := client.WithLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer done(context.WithoutCancel(ctx))
	key := "sandpit-test-view-" + strings.ReplaceAll(t.Name(), "/", "-")
	mounts, err := sn.View(lctx, key, chainID)
	if errdefs.IsAlreadyExists(err) {
		mounts, err = sn.Mounts(lctx, key)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Remove(ctx, key)
	dir := t.TempDir()
	if err := mount.All(mounts, dir); err != nil {
		t.Fatal(err)
	}
	defer mount.UnmountAll(dir, 0)
	for _, m := range append([]string{"/tmp", "/dev/shm", "/proc", "/sys"}, sandpit.Mountpoints...) {
		if st, err := os.Stat(filepath.Join(dir, m)); err != nil || !st.IsDir() {
			t.Errorf("image lacks mountpoint %s: %v", m, err)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(dir, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), "\nsandbox:x:1000:1000:") {
		t.Errorf("image /etc/passwd lacks the sandbox user: %q, %v", passwd, err)
	}
	a, errA := os.Stat(filepath.Join(dir, "usr/bin/tool"))
	b, errB := os.Stat(filepath.Join(dir, "usr/bin/tool2"))
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		t.Errorf("hardlink lost in the image: %v %v", errA, errB)
	}
}

// An image extended with `images build --packages` is kept by Ensure, and
// rebuilt with its extra packages when its recipe changes.
func TestIntegrationExtendedImageIsKept(t *testing.T) {
	ctx, client, b, r, calls := tinyImage(t, "sandpit.local/test-tiny:extended")
	labels := func() map[string]string {
		t.Helper()
		img, err := client.GetImage(ctx, r.Ref)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := img.Spec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return spec.Config.Labels
	}

	if err := b.Build(ctx, r.WithPackages("more", "tool"), false); err != nil {
		t.Fatal(err)
	}
	if l := labels(); l[LabelExtraPackages] != "more" || l[LabelBase] != r.Key() {
		t.Fatalf("labels %v: want the extra package and the base recipe recorded", l)
	}
	if err := b.Ensure(ctx, r); err != nil {
		t.Fatal(err)
	}
	if *calls != 1 || labels()[LabelExtraPackages] != "more" {
		t.Errorf("Ensure replaced the extended image (bootstrap ran %d times)", *calls)
	}

	newer := r
	newer.Packages = append([]string{"extra"}, r.Packages...)
	if err := b.Ensure(ctx, newer); err != nil {
		t.Fatal(err)
	}
	l := labels()
	if *calls != 2 || l[LabelExtraPackages] != "more" || l[LabelBase] != newer.Key() || l[LabelRecipe] != newer.WithPackages("more").Key() {
		t.Errorf("after a recipe change: bootstrap ran %d times, labels %v; want a rebuild that keeps the extra package", *calls, l)
	}
}

// Replacing an image by one whose layers it shares (a recipe change that
// leaves the rootfs as it was, as tinyBuilder's does) must keep the shared
// snapshot while containerd's garbage collector runs: the image's name
// moved to the new manifest before the new config held the snapshot, and a
// collection in between took the snapshot away (CI caught it once, with
// other tests' deletions running collections: "no snapshot for chain").
// Here a goroutine forces collections back to back.
func TestIntegrationReplaceUnderGC(t *testing.T) {
	ctx, client, b, r, _ := tinyImage(t, "sandpit.local/test-tiny:gc")
	ref := r.Ref
	other := r
	other.Packages = append([]string{"extra"}, r.Packages...)

	stop := make(chan struct{})
	collected := make(chan int)
	go func() {
		n := 0
		defer func() { collected <- n }()
		ls := client.LeasesService()
		for {
			select {
			case <-stop:
				return
			default:
			}
			l, err := ls.Create(ctx, leases.WithRandomID())
			if err != nil {
				return
			}
			if ls.Delete(ctx, l, leases.SynchronousDelete) == nil { // runs a collection
				n++
			}
		}
	}()
	var lost []int
	for i := range 30 {
		want := []Recipe{r, other}[i%2]
		if err := b.Ensure(ctx, want); err != nil {
			t.Fatalf("Ensure %d: %v", i, err)
		}
		img, err := client.GetImage(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := img.IsUnpacked(ctx, DefaultSnapshotter); err != nil || !ok {
			lost = append(lost, i)
		}
	}
	close(stop)
	t.Logf("%d garbage collections ran during 30 replacements", <-collected)
	if len(lost) > 0 {
		t.Errorf("the image was not unpacked after replacements %v of 30: its snapshot was collected", lost)
	}
}
