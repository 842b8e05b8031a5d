package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// serverImageNamespace is this test's own containerd namespace: never the
// server's ("sandpit") nor Kubernetes' ("k8s.io"), so that it cannot touch
// their images.
const serverImageNamespace = "sandpit-server-image-test"

// The server image as an operator makes and uses it: `sandpit images
// server` (the built binary exporting itself, from a real debootstrap of
// the server recipe: minutes on a cold cache, then cached), `ctr images
// import` naming the image from the archive's annotation, and containers
// run from it by ctr: its entrypoint, `sandpit version` on a read-only
// root, and the CA bundle a front door needs for its OAuth issuer.
func TestIntegrationServerImage(t *testing.T) {
	addr := testenv.Containerd(t)
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		testenv.Skip(t, "ctr is not installed (Debian: apt-get install containerd)")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		testenv.Skip(t, "debootstrap is not installed (apt-get install debootstrap)")
	}
	ref := "sandpit.local/sandpit:server-image-test"
	run := func(t *testing.T, timeout time.Duration, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), timeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, ctr, append([]string{"--address", addr, "-n", serverImageNamespace}, args...)...).CombinedOutput()
		return string(out), err
	}
	// purge empties the namespace, which is this test's alone, of what
	// this test or an earlier, killed run left: containers, then images
	// (whatever they were named) and the content and snapshots they held.
	purge := func() {
		out, _ := run(t, time.Minute, "containers", "ls", "-q")
		for _, id := range strings.Fields(out) {
			run(t, time.Minute, "tasks", "rm", "-f", id)
			run(t, time.Minute, "containers", "rm", id)
		}
		out, _ = run(t, time.Minute, "images", "ls", "-q")
		if refs := strings.Fields(out); len(refs) > 0 {
			run(t, time.Minute, append([]string{"images", "rm", "--sync"}, refs...)...)
		}
	}
	purge()
	t.Cleanup(func() {
		purge()
		if out, err := run(t, time.Minute, "namespaces", "rm", serverImageNamespace); err != nil {
			t.Logf("namespace %s not removed: %v: %s", serverImageNamespace, err, out)
		}
	})

	archive := filepath.Join(t.TempDir(), "sandpit.tar")
	start := time.Now()
	export := exec.CommandContext(t.Context(), binPath, "images", "server", "--output", archive, "--ref", ref)
	var stderr strings.Builder
	export.Stderr = &stderr
	out, err := export.Output()
	if err != nil {
		t.Fatalf("sandpit images server: %v\n%s", err, stderr.String())
	}
	if got, want := strings.TrimSpace(string(out)), archive+" "+ref; got != want {
		t.Errorf("sandpit images server printed %q, want %q", got, want)
	}
	st, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exported %s in %v: %.1f MiB", ref, time.Since(start).Round(time.Millisecond), float64(st.Size())/(1<<20))
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(archive), ".*")); len(leftovers) > 0 {
		t.Errorf("the export left %v beside its archive", leftovers)
	}

	if out, err := run(t, 5*time.Minute, "images", "import", archive); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out2, err := run(t, time.Minute, "images", "ls", "-q")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out2)
	}
	if names := strings.Fields(out2); !slices.Contains(names, ref) {
		t.Fatalf("after the import the namespace holds %v, not %s: the archive's name annotation was not used", names, ref)
	}

	want, err := exec.Command(binPath, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string // after the image and container id; none runs the entrypoint
		want string   // in the output
	}{
		{"entrypoint", nil, "USAGE"},
		{"version", []string{"/usr/local/bin/sandpit", "version"}, strings.TrimSpace(string(want))},
		{"CA bundle for the OAuth issuer", []string{"/bin/sh", "-c", "test -s /etc/ssl/certs/ca-certificates.crt && echo ca-ok"}, "ca-ok"},
		// store/workspace's id map execs cat.
		{"cat", []string{"cat", "--version"}, "GNU coreutils"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("server-image-test-%d-%d", os.Getpid(), i)
			args := append([]string{"run", "--rm", "--read-only", ref, id}, tt.args...)
			out, err := run(t, 2*time.Minute, args...)
			if err != nil {
				t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("ctr %s printed %q, want %q in it", strings.Join(args, " "), out, tt.want)
			}
		})
	}
}
