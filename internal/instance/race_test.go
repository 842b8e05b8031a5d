package instance

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// Remove (at a server's clean exit, or the janitor's) races Acquire of the
// same name (a client restarting its server, AcquireFree walking names).
// Whatever the interleaving, at most one process may hold a name at a time,
// and a start must never fail because the dir vanished under it.
func TestRemoveRacesAcquire(t *testing.T) {
	root := t.TempDir()
	const (
		workers = 4
		rounds  = 250 // acquisitions per worker
	)
	var (
		owners atomic.Int32
		wg     sync.WaitGroup
		mu     sync.Mutex
		fails  = map[string]int{}
		first  = map[string]error{}
	)
	fail := func(kind string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if fails[kind]++; fails[kind] == 1 {
			first[kind] = err
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; {
				in, err := Acquire(root, "default")
				if errors.Is(err, ErrBusy) {
					continue
				}
				if err != nil {
					fail("Acquire", err)
					continue
				}
				i++
				if n := owners.Add(1); n != 1 {
					fail("two owners", errors.New(in.Dir()))
				}
				// What a server keeps in its dir, so Remove has work to do.
				os.WriteFile(filepath.Join(in.Dir(), "state"), []byte("x"), 0o644)
				owners.Add(-1)
				if (i+w)%2 == 0 {
					err = in.Remove()
				} else {
					err = in.Release()
				}
				if err != nil {
					fail("Remove/Release", err)
				}
			}
		}()
	}
	wg.Wait()
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.Name() != "default" {
			t.Errorf("left under the root: %s", e.Name())
		}
	}
	for kind, n := range fails {
		t.Errorf("%s: %d times in %d acquisitions, first: %v", kind, n, workers*rounds, first[kind])
	}
}

// A Remove that dies between moving the dir away and deleting it leaves a
// tombstone; Dead deletes it once its remover is gone, and never one whose
// remover lives.
func TestDeadSweepsTombstonesOfDeadRemovers(t *testing.T) {
	root := t.TempDir()
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(root, fmt.Sprintf(".removed-%d-default-123", child.Process.Pid))
	live := filepath.Join(root, fmt.Sprintf(".removed-%d-default-2-456", os.Getpid()))
	for _, d := range []string{filepath.Join(dead, "default"), filepath.Join(live, "default-2")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "lock"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Dead(root)
	if err != nil || len(got) != 0 {
		t.Fatalf("Dead = %v, %v; want no instances (tombstones are none)", got, err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("tombstone of a dead remover still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("tombstone of a live remover: %v, want it left alone", err)
	}
}
