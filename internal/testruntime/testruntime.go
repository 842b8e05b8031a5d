// Package testruntime builds the runtime configuration every integration
// test uses: the test containerd, its namespace and image, the user
// namespace map, a private state dir and an instance label of its own. One
// place, so a fix (such as unique labels across test processes) reaches
// every test. It is separate from testenv because it imports runtime, which
// package images' own tests cannot.
package testruntime

import (
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
	}
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
