// Package testruntime builds the runtime configuration every integration
// test uses: the test containerd, its namespace and image, the user
// namespace map, a private state dir and an instance label of its own. One
// place, so a fix (such as unique labels across test processes) reaches
// every test. It is separate from testenv because it imports runtime, which
// package images' own tests cannot.
package testruntime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// Config is a runtime configuration on the test containerd (skipping, or
// failing in CI, without one), with its own instance label and state dir.
func Config(t testing.TB) runtime.Config {
	t.Helper()
	return runtime.Config{
		Address:   testenv.Containerd(t),
		Namespace: testenv.Namespace,
		Instance:  testenv.Instance(t),
		StateDir:  t.TempDir(),
		Languages: runtime.DefaultLanguages(testenv.Image()),
		UserNS:    testenv.IDMap(),
		// SANDPIT_TEST_RUNTIME picks the shim every test runs under
		// (scripts/test.sh runs the runtime tests under both).
		RuntimeName: os.Getenv(EnvRuntime),
		ShimDir:     ShimDir(),
	}
}

// EnvRuntime names the containerd runtime tests run sandboxes under:
// io.containerd.runc.v2 (the default) or sandpit (runtime.RuntimeSandpit).
const EnvRuntime = "SANDPIT_TEST_RUNTIME"

// ShimDir is where tests find sandpit's shim programs: SANDPIT_SHIM_DIR,
// else beside SANDPIT_BIN (scripts/test.sh builds them all into bin/).
func ShimDir() string {
	if d := os.Getenv("SANDPIT_SHIM_DIR"); d != "" {
		return d
	}
	if b := os.Getenv("SANDPIT_BIN"); b != "" {
		return filepath.Dir(b)
	}
	return ""
}

// New is a runtime built from Config after mods; it is closed when the
// test ends.
func New(t testing.TB, mods ...func(*runtime.Config)) *runtime.Runtime {
	t.Helper()
	cfg := Config(t)
	for _, m := range mods {
		m(&cfg)
	}
	r, err := runtime.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
