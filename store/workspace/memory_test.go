package workspace

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// The server's memory while it merges a hostile run's changes (issue 12:
// "server peak RSS under a hostile run stays below 256 MiB above idle").
// Each case prepares the run's upper dir, resets the process's peak RSS
// (/proc/self/clear_refs), closes the view, and reads VmHWM: the peak of
// the merge alone, above what the process held before it.
//
// The default sizes keep CI quick; for the README figures:
//
//	SANDPIT_MERGE_RSS_FILES=100000 SANDPIT_MERGE_RSS_SPARSE=60000 \
//	  go test ./store/workspace -run TestMergePeakRSS -v
//
// (as root; the sparse case needs Quota-sized tmpfs memory only).

const mergeRSSBound = 128 << 20 // well under the 256 MiB

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// procStatus reads a "VmXXX:  N kB" line of /proc/self/status, in bytes.
func procStatus(t testing.TB, key string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), key+":"); ok {
			kb, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}

// peakDuring returns how far the process's resident set rose above its level
// at the start while fn ran.
func peakDuring(t testing.TB, fn func()) int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		testenv.Skip(t, fmt.Sprintf("cannot reset the peak RSS: %v", err))
	}
	base := procStatus(t, "VmRSS")
	fn()
	return procStatus(t, "VmHWM") - base
}

func TestMergePeakRSS(t *testing.T) {
	files := envInt("SANDPIT_MERGE_RSS_FILES", 20000)
	sparse := envInt("SANDPIT_MERGE_RSS_SPARSE", 2000)
	tests := []struct {
		name string
		opts Options
		make func(t *testing.T, dir string)
	}{
		{"deep tree of 2000 levels", Options{}, func(t *testing.T, dir string) {
			mkdirChain(t, dir, "d", 2000)
		}},
		{fmt.Sprintf("%d files with 200-byte names", files), Options{MaxFiles: int64(files) + 64}, func(t *testing.T, dir string) {
			for i := range files {
				name := fmt.Sprintf("%06d%s", i, strings.Repeat("f", 194))
				if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
					t.Logf("the run stops at file %d: %v", i, err)
					return
				}
			}
		}},
		{fmt.Sprintf("%d sparse 64 MiB files", sparse), Options{MaxFiles: int64(sparse) + 64}, func(t *testing.T, dir string) {
			for i := range sparse {
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("hole%06d", i)))
				if err == nil {
					_, err = f.WriteAt([]byte{1}, 64<<20-1)
					f.Close()
				}
				if err != nil {
					t.Logf("the run stops at file %d: %v", i, err)
					return
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			needRoot(t)
			tt.opts.Owner = sandboxOwner
			w := newWS(t, tt.opts)
			v := openRun(t, w, "rss")
			tt.make(t, v.Dir())
			var chJSON int
			var mergeMS int64
			var cerr error
			peak := peakDuring(t, func() {
				ch, err := v.Close(t.Context())
				cerr = err
				chJSON = len(mustJSON(ch))
				if ch != nil {
					mergeMS = ch.MergeMS
				}
			})
			disk, apparent := diskBytes(t, w.Dir())
			errLen := 0
			if cerr != nil {
				errLen = len(cerr.Error())
			}
			t.Logf("merge peak RSS +%d MiB, %d ms; changes %d bytes of JSON; error %d bytes; workspace %d MiB on disk, %d MiB apparent",
				peak>>20, mergeMS, chJSON, errLen, disk>>20, apparent>>20)
			if peak > mergeRSSBound {
				t.Errorf("the merge raised the server's RSS by %d MiB, want under %d MiB", peak>>20, mergeRSSBound>>20)
			}
		})
	}
}
