package artifact

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func sums(b []byte) (string, string) {
	a := sha256.Sum256(b)
	c := sha512.Sum512(b)
	return hex.EncodeToString(a[:]), hex.EncodeToString(c[:])
}

func writeOf(b []byte) func(io.Writer) (int64, error) {
	return func(w io.Writer) (int64, error) {
		n, err := w.Write(b)
		return int64(n), err
	}
}

func accept(string, []byte) error { return nil }

// held lists the names in one of the cache's directories.
func held(t *testing.T, c *Cache, sub string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(c.Dir(), sub))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func TestStoreAliasLookup(t *testing.T) {
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a tarball's bytes")
	want256, want512 := sums(data)
	var seen512 string
	p, got256, n, err := c.Store(writeOf(data), func(s256 string, s512 []byte) error {
		seen512 = hex.EncodeToString(s512)
		return nil
	})
	if err != nil || got256 != want256 || n != int64(len(data)) || seen512 != want512 {
		t.Fatalf("Store = %q, %q, %d, %v (sha512 seen %s)", p, got256, n, err, seen512)
	}
	if b, _ := os.ReadFile(p); string(b) != string(data) {
		t.Fatalf("entry holds %q", b)
	}
	if _, _, ok := c.Lookup("sha512", want512); ok {
		t.Fatal("Lookup found an alias never made")
	}
	if err := c.Alias("sha512", want512, want256); err != nil {
		t.Fatal(err)
	}
	if err := c.Alias("sha512", want512, want256); err != nil { // a second installer
		t.Fatalf("Alias again: %v", err)
	}
	lp, l256, ok := c.Lookup("sha512", want512)
	if !ok || lp != p || l256 != want256 {
		t.Fatalf("Lookup = %q, %q, %v; want %q, %q", lp, l256, ok, p, want256)
	}
	for _, bad := range [][3]string{
		{"md5", want512, want256},
		{"sha512", "../" + want512[3:], want256},
		{"sha512", want512, strings.Repeat("0", 64)}, // not held
	} {
		if err := c.Alias(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("Alias(%q, %q, %q) = nil", bad[0], bad[1], bad[2])
		}
	}

	// GC removes the entry, then its alias: a Lookup misses from the
	// moment the entry is gone.
	res, err := c.GC(0)
	if err != nil || res.Removed != 1 || res.Aliases != 1 {
		t.Fatalf("GC(0) = %+v, %v", res, err)
	}
	if _, _, ok := c.Lookup("sha512", want512); ok {
		t.Fatal("Lookup found a removed entry")
	}
	if got := held(t, c, "sha512"); len(got) != 0 {
		t.Fatalf("sha512/ holds %q after GC", got)
	}
}

// An alias left dangling (its entry removed by another process's GC) is a
// miss, and the next GC removes it.
func TestDanglingAlias(t *testing.T) {
	c, _ := Open(t.TempDir())
	data := []byte("x")
	s256, s512 := sums(data)
	p, _, _, err := c.Store(writeOf(data), accept)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Alias("sha512", s512, s256); err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	if _, _, ok := c.Lookup("sha512", s512); ok {
		t.Fatal("Lookup found a dangling alias")
	}
	if res, _ := c.GC(1 << 30); res.Aliases != 1 {
		t.Fatalf("GC = %+v, want the dangling alias removed", res)
	}
	// Stored again, the alias comes back.
	if _, _, _, err := c.Store(writeOf(data), accept); err != nil {
		t.Fatal(err)
	}
	if err := c.Alias("sha512", s512, s256); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Lookup("sha512", s512); !ok {
		t.Fatal("Lookup missed after storing again")
	}
}

func TestStoreRefusedLeavesNothing(t *testing.T) {
	refused := errors.New("refused")
	tests := []struct {
		name  string
		write func(io.Writer) (int64, error)
		check func(string, []byte) error
	}{
		{"write fails half way", func(w io.Writer) (int64, error) {
			w.Write([]byte("half"))
			return 4, refused
		}, accept},
		{"check refuses", writeOf([]byte("bytes")), func(string, []byte) error { return refused }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := Open(t.TempDir())
			_, _, n, err := c.Store(tt.write, tt.check)
			if !errors.Is(err, refused) {
				t.Fatalf("Store = %v, want the refusal as it is", err)
			}
			if n == 0 {
				t.Error("Store reported 0 bytes written")
			}
			if got := append(held(t, c, "sha256"), held(t, c, "tmp")...); len(got) != 0 {
				t.Fatalf("the cache holds %q", got)
			}
		})
	}
}

// Installers storing and aliasing the same bytes at once, while GCs run,
// all end with a usable entry or a clean miss, never an error or a
// partial file.
func TestConcurrentStores(t *testing.T) {
	c, _ := Open(t.TempDir())
	data := []byte(strings.Repeat("tarball ", 1000))
	s256, s512 := sums(data)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if i%4 == 0 {
					if _, err := c.GC(0); err != nil {
						errs <- err
					}
					continue
				}
				if p, _, ok := c.Lookup("sha512", s512); ok {
					if b, err := os.ReadFile(p); err == nil && string(b) != string(data) {
						errs <- fmt.Errorf("entry holds %d other bytes", len(b))
					}
					continue
				}
				if _, got, _, err := c.Store(writeOf(data), accept); err != nil || got != s256 {
					errs <- fmt.Errorf("Store = %s, %v", got, err)
					continue
				}
				// GC may remove the entry between Store and Alias: then
				// Alias says so, which is a miss, not a fault.
				if err := c.Alias("sha512", s512, s256); err != nil && !strings.Contains(err.Error(), "does not hold it") {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := held(t, c, "tmp"); len(got) != 0 {
		t.Errorf("tmp/ holds %q", got)
	}
}

func TestGCPartial(t *testing.T) {
	c, _ := Open(t.TempDir())
	old := time.Now().Add(-time.Hour)
	p := filepath.Join(c.Dir(), "tmp", "fetch-abandoned")
	os.WriteFile(p, []byte("partial"), 0o600)
	os.Chtimes(p, old, old)
	young := filepath.Join(c.Dir(), "tmp", "fetch-young")
	os.WriteFile(young, []byte("partial"), 0o600)
	res, err := c.GC(1 << 30)
	if err != nil || res.Partial != 1 {
		t.Fatalf("GC = %+v, %v", res, err)
	}
	if got := held(t, c, "tmp"); len(got) != 1 || got[0] != "fetch-young" {
		t.Fatalf("tmp/ holds %q, want the young file only", got)
	}
}
