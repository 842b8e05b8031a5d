package packages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/pypi"
)

// TestLayersGCSparesHeld: the layers GC keeps the current layer and the
// most recently used, and never removes one a run holds (Layer's release
// not yet called), however old.
func TestLayersGCSparesHeld(t *testing.T) {
	dir := t.TempDir()
	cache, err := pypi.OpenCache(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Dir: filepath.Join(dir, "ws"), Cache: cache,
		Run: func(context.Context, sandpit.Request) (*sandpit.Result, error) {
			return nil, errors.New("no runs here")
		}})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(m.cfg.Dir, "layers")
	old := time.Now().Add(-time.Hour)
	var names []string
	for i := range keepLayers + 4 {
		name := fmt.Sprintf("layer-%02d", i)
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Join(p, "python"), 0o755); err != nil {
			t.Fatal(err)
		}
		mt := old.Add(time.Duration(i) * time.Minute) // layer-00 is the oldest
		os.Chtimes(p, mt, mt)
		names = append(names, name)
	}
	release, ok := m.hold(filepath.Join(root, "layer-00"))
	if !ok {
		t.Fatal("hold of an existing layer failed")
	}
	os.Chtimes(filepath.Join(root, "layer-00"), old, old) // hold refreshed it: make it the oldest again
	m.gcLayers("layer-01")
	exists := func(name string) bool { _, err := os.Stat(filepath.Join(root, name)); return err == nil }
	if !exists("layer-00") {
		t.Error("the GC removed a layer a run holds")
	}
	if !exists("layer-01") {
		t.Error("the GC removed the current layer")
	}
	for _, n := range names[len(names)-keepLayers+2:] {
		if !exists(n) {
			t.Errorf("the GC removed %s, one of the most recently used", n)
		}
	}
	if exists("layer-02") {
		t.Error("the GC kept an old unheld layer beyond the ones it keeps")
	}
	release()
	release() // twice is once
	m.gcLayers("layer-01")
	if exists("layer-00") {
		t.Error("a released old layer survived the GC")
	}
	if _, ok := m.hold(filepath.Join(root, "layer-00")); ok {
		t.Error("held a layer that is gone")
	}
}
