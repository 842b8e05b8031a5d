package snapshot

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Benchmarks use 10,000 files; SANDPIT_BENCH_MB sets their total size
// (default 100; the figures are for 1000).
const benchFiles = 10000

func benchEnv(b *testing.B) env {
	b.Helper()
	mb, _ := strconv.Atoi(os.Getenv("SANDPIT_BENCH_MB"))
	if mb <= 0 {
		mb = 100
	}
	e := newEnv(b)
	size := mb << 20 / benchFiles
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, size)
	for i := range benchFiles {
		rng.Read(buf)
		p := filepath.Join(e.ws.Dir(), fmt.Sprintf("d%03d", i%100), fmt.Sprintf("f%05d.bin", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
		own(b, e, p)
		own(b, e, filepath.Dir(p))
	}
	return e
}

func touchOne(b *testing.B, e env, i int) {
	p := filepath.Join(e.ws.Dir(), "d000", "f00000.bin")
	if err := os.WriteFile(p, []byte(fmt.Sprint("changed ", i)), 0o644); err != nil {
		b.Fatal(err)
	}
	own(b, e, p)
}

// own gives p to the workspace owner, as files written by runs are.
func own(b *testing.B, e env, p string) {
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, int(e.ws.Owner().UID), int(e.ws.Owner().GID)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSnapshot(b *testing.B) {
	b.Run("full", func(b *testing.B) {
		e := benchEnv(b)
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			dir := filepath.Join(e.base, fmt.Sprint("store", i))
			s, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := s.Create(b.Context(), e.ws, "full"); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			s.Close()
			os.RemoveAll(dir)
			b.StartTimer()
		}
	})
	b.Run("one-changed", func(b *testing.B) {
		e := benchEnv(b)
		if _, err := e.store.Create(b.Context(), e.ws, "base"); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			touchOne(b, e, i)
			b.StartTimer()
			if _, err := e.store.Create(b.Context(), e.ws, "one"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkRestore(b *testing.B) {
	b.Run("full", func(b *testing.B) {
		e := benchEnv(b)
		snap, err := e.store.Create(b.Context(), e.ws, "base")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			ents, _ := os.ReadDir(e.ws.Dir())
			for _, d := range ents {
				os.RemoveAll(filepath.Join(e.ws.Dir(), d.Name()))
			}
			b.StartTimer()
			if err := e.store.Restore(b.Context(), e.ws, snap.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-changed", func(b *testing.B) {
		e := benchEnv(b)
		snap, err := e.store.Create(b.Context(), e.ws, "base")
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			touchOne(b, e, i)
			b.StartTimer()
			if err := e.store.Restore(b.Context(), e.ws, snap.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRunNoChange is the per-run cost of write-back for a run that
// changes nothing: the undo state (stat walk, nothing re-read) plus the
// overlay mount, merge of an empty upper dir, and unmount.
func BenchmarkRunNoChange(b *testing.B) {
	e := benchEnv(b)
	if _, err := e.store.Create(b.Context(), e.ws, "warm the stat cache"); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		v, err := e.ws.Open(b.Context(), fmt.Sprint("bench-", i))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := v.Close(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
