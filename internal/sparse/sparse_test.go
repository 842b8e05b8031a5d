package sparse

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func blocks(t *testing.T, f *os.File) int64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func TestCopy(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		writes map[int64]string // offset → data
		size   int64
	}{
		{"empty", nil, 0},
		{"dense", map[int64]string{0: "hello, world"}, 12},
		{"hole then a byte", map[int64]string{32<<20 - 1: "x"}, 32 << 20},
		{"data, hole, data", map[int64]string{0: "head", 8 << 20: "middle"}, 8<<20 + 6},
		{"trailing hole", map[int64]string{0: "head"}, 16 << 20},
		{"many extents", map[int64]string{1 << 20: "a", 3 << 20: "b", 5<<20 + 5: "c", 7 << 20: "d"}, 9 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := os.Create(filepath.Join(dir, tt.name+".src"))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			for off, d := range tt.writes {
				if _, err := src.WriteAt([]byte(d), off); err != nil {
					t.Fatal(err)
				}
			}
			if err := src.Truncate(tt.size); err != nil {
				t.Fatal(err)
			}
			dst, err := os.Create(filepath.Join(dir, tt.name+".dst"))
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			h := sha256.New()
			data, err := Copy(t.Context(), dst, src, tt.size, h)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := os.ReadFile(src.Name())
			got, _ := os.ReadFile(dst.Name())
			if !bytes.Equal(got, want) {
				t.Fatalf("copy differs: %d bytes, want %d", len(got), len(want))
			}
			if sum := sha256.Sum256(want); !bytes.Equal(h.Sum(nil), sum[:]) {
				t.Error("the hash is not the content's")
			}
			if b, s := blocks(t, dst), blocks(t, src); b > s+64<<10 {
				t.Errorf("the copy takes %d bytes of disk, the source %d", b, s)
			}
			if data > tt.size || tt.size > 1<<20 && data > 1<<20 {
				t.Errorf("copied %d bytes of data for %d of apparent size", data, tt.size)
			}
		})
	}
}

func TestCopyStops(t *testing.T) {
	dir := t.TempDir()
	src, _ := os.Create(filepath.Join(dir, "src"))
	defer src.Close()
	src.WriteAt([]byte("x"), 1<<30-1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Copy(ctx, nil, src, 1<<30, sha256.New()); !errors.Is(err, context.Canceled) {
		t.Errorf("Copy with a cancelled context = %v", err)
	}
	// A source shorter than the size asked for changed under the copy.
	short, _ := os.Create(filepath.Join(dir, "short"))
	defer short.Close()
	short.Write([]byte("abc"))
	if _, err := Copy(t.Context(), nil, short, 10, nil); !errors.Is(err, ErrChanged) {
		t.Errorf("Copy past the end = %v, want ErrChanged", err)
	}
}
