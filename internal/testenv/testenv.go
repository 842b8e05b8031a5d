// Package testenv tells integration tests whether a real containerd is
// available, and fails instead of skipping when CI says it must be.
//
// Tests that need containerd call Containerd(t). Locally, without the
// environment below, they skip with the reason. In CI (scripts/test.sh)
// SANDPIT_REQUIRE_INTEGRATION=1 turns every such skip into a failure, so the
// suite can never pass by skipping its containerd tests.
package testenv

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandpit-dev/sandpit/oci"
)

// DefaultImage is the image `sandpit images build` makes (images.DefaultRef;
// a test in package images keeps the two equal).
const DefaultImage = "sandpit.local/toolchain:bookworm"

// Image is the image ref integration tests run.
func Image() string {
	if ref := os.Getenv(EnvImage); ref != "" {
		return ref
	}
	return DefaultImage
}

// DefaultDataImage is the catalog's data-science image (a test in package
// images keeps the two equal): the toolchain plus Debian's data stack.
const DefaultDataImage = "sandpit.local/datascience:bookworm"

// DataImage is the image ref tests of the data stack, plots and JavaScript
// run on; `sandpit images build` (what CI runs) builds it.
func DataImage() string {
	if ref := os.Getenv(EnvDataImage); ref != "" {
		return ref
	}
	return DefaultDataImage
}

// IDMap is the user namespace map tests run with: the server's default,
// unless SANDPIT_TEST_USERNS=0 turns user namespaces off.
func IDMap() *oci.IDMap {
	if os.Getenv("SANDPIT_TEST_USERNS") == "0" {
		return nil
	}
	m := oci.DefaultIDMap()
	return &m
}

// Env names shared with scripts/test.sh.
const (
	EnvAddress   = "SANDPIT_TEST_CONTAINERD" // containerd socket for tests
	EnvRequire   = "SANDPIT_REQUIRE_INTEGRATION"
	EnvImage     = "SANDPIT_TEST_IMAGE"      // image ref override
	EnvDataImage = "SANDPIT_TEST_DATA_IMAGE" // data-science image ref override
)

// Namespace is the containerd namespace integration tests use. It is the
// server's own, so that tests run against the images `sandpit images build`
// imported; each test's runtime uses its own instance label so janitors in
// parallel test binaries never touch each other's sandboxes.
const Namespace = "sandpit"

// Containerd returns the socket of the containerd that integration tests
// must use, or skips (fails, in CI) with the reason it is unavailable.
func Containerd(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddress)
	reason := ""
	switch {
	case addr == "":
		reason = EnvAddress + " is not set (run the suite with scripts/test.sh, which starts a private containerd)"
	case os.Geteuid() != 0:
		reason = "integration tests need root to create containers"
	default:
		if _, err := os.Stat(addr); err != nil {
			reason = "containerd socket " + addr + " is missing: " + err.Error()
		}
	}
	if reason != "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("integration test cannot run: %s", reason)
		}
		t.Skipf("skipping integration test: %s", reason)
	}
	return addr
}

var instanceSeq atomic.Int64

// Instance returns an instance label no other test, and no other test
// process, uses: a runtime's janitor sweeps everything of its instance, so
// two `go test` runs of one package (a developer beside CI) would otherwise
// delete each other's live sandboxes.
func Instance(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("test-%s-%d-%d", name, os.Getpid(), instanceSeq.Add(1))
}

// Skip skips the test with reason, or fails it when CI requires every
// integration test to run (SANDPIT_REQUIRE_INTEGRATION=1): a missing
// privilege or tool must never be how the suite passes there.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("test cannot run: %s", reason)
	}
	t.Skip(reason)
}

// NeedRoot skips (fails, in CI) unless the test runs as root.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, why+" needs root")
	}
}
