package validate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// Regression tests for the review of 2026-11-30 (M3): every input is past
// a bound, and the assertions are generous upper bounds that the unbounded
// code exceeded many times over (a 2 MiB document took 3.5 s and +444 MiB
// of Go heap, 8 MiB took 28 s and +1.5 GiB). Time is bounded as the CPU the
// call used, not the wall clock, which a loaded host stretches; and cases
// about a size hold the time limit out of the way (an hour), so that a slow
// host cannot make them stop for time instead.

// peakHeap runs f and reports how far the Go heap grew above where it was
// (sampled every 2 ms). Tests that use it do not run in parallel.
func peakHeap(f func()) int64 {
	goruntime.GC()
	var base goruntime.MemStats
	goruntime.ReadMemStats(&base)
	var top atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var m goruntime.MemStats
		for {
			goruntime.ReadMemStats(&m)
			if m.HeapAlloc > top.Load() {
				top.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	return max(0, int64(top.Load())-int64(base.HeapAlloc))
}

// ones is the review's document: [1,1,...] of about n bytes.
func ones(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("1,", n/2), ",") + "]"
}

// exponential is a schema of depth n whose every level tries both branches
// of an anyOf on the level below: 2^n evaluations for one string.
func exponential(n int) map[string]any {
	defs := map[string]any{"a0": map[string]any{"type": "integer"}}
	for i := 1; i <= n; i++ {
		below := map[string]any{"$ref": fmt.Sprintf("#/$defs/a%d", i-1)}
		defs[fmt.Sprintf("a%d", i)] = map[string]any{"anyOf": []any{below, map[string]any{"allOf": []any{below}}}}
	}
	return map[string]any{"$defs": defs, "$ref": fmt.Sprintf("#/$defs/a%d", n)}
}

func TestJSONValidationBounded(t *testing.T) {
	strings20 := []any{}
	for i := range 20 {
		strings20 = append(strings20, map[string]any{"type": "string", "minLength": float64(i)})
	}
	items := func(s map[string]any) SchemaRef {
		return SchemaRef{Inline: map[string]any{"type": "array", "items": s}}
	}
	tests := []struct {
		name    string
		ref     SchemaRef
		data    io.Reader
		jsonl   bool
		lim     Limits
		wantErr error // nil: a result, listing at most max errors
		maxCPU  time.Duration
	}{
		// The review's M3 trigger, at the two sizes it measured.
		{"2 MiB of failing items", items(map[string]any{"type": "string"}), strings.NewReader(ones(2 << 20)), false, Limits{Timeout: time.Hour}, ErrTooLarge, 5 * time.Second},
		{"8 MiB of failing items", items(map[string]any{"type": "string"}), strings.NewReader(ones(8 << 20)), false, Limits{Timeout: time.Hour}, ErrTooLarge, 5 * time.Second},
		// A 64 MiB file is not read past the size limit.
		{"64 MiB document", items(map[string]any{"type": "string"}), io.MultiReader(strings.NewReader("["), strings.NewReader(strings.Repeat("1,", 32<<20))), false, Limits{Timeout: time.Hour}, ErrTooLarge, 5 * time.Second},
		// Under the value limit, each item fails 20 ways: the heap limit
		// stops it (1.8 million errors would need about 800 MiB).
		{"many failures per value", items(map[string]any{"anyOf": strings20}), strings.NewReader(ones(180_000)), false, Limits{Timeout: time.Hour}, ErrTooLarge, 10 * time.Second},
		// A schema that takes 2^40 steps for one value stops at the time limit.
		// (Or at the heap limit, whichever comes first: both are
		// ResourceExhausted.)
		{"exponential schema", SchemaRef{Inline: exponential(40)}, strings.NewReader(`"x"`), false, Limits{Timeout: time.Second}, sandpit.ErrResourceExhausted, 5 * time.Second},
		// JSONL: each line is bounded on its own, and the call stops at
		// the time limit with what it found so far.
		{"JSONL lines past the value limit", items(map[string]any{"type": "string"}), strings.NewReader(ones(2<<20) + "\n" + ones(2<<20) + "\n[\"ok\"]\n"), true, Limits{Timeout: time.Hour}, nil, 6 * time.Second},
		{"JSONL at the time limit", SchemaRef{Inline: exponential(40)}, strings.NewReader("\"x\"\n\"y\"\n"), true, Limits{Timeout: time.Second}, nil, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRegistry("", tt.lim)
			if err != nil {
				t.Fatal(err)
			}
			var res *JSONResult
			start, cpu0 := time.Now(), testenv.CPUTime(t)
			heap := peakHeap(func() { res, err = r.ValidateJSON(t.Context(), tt.ref, tt.data, tt.jsonl, 1_000_000) })
			elapsed, cpu := time.Since(start), testenv.CPUTime(t)-cpu0
			t.Logf("%s (CPU %s), Go heap +%d MiB: %v", elapsed.Round(time.Millisecond), cpu.Round(time.Millisecond), heap>>20, err)
			switch {
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && err != nil:
				t.Errorf("err = %v, want a result", err)
			case res != nil:
				t.Logf("valid %v, %d records, %d errors, %d listed, stopped: %q", res.Valid, res.Records, res.ErrorCount, len(res.Errors), res.Stopped)
				if len(res.Errors) > r.Limits().MaxErrors || res.Valid {
					t.Errorf("%d errors listed (max %d), valid %v", len(res.Errors), r.Limits().MaxErrors, res.Valid)
				}
			}
			if cpu > tt.maxCPU {
				t.Errorf("took %s of CPU, want under %s", cpu, tt.maxCPU)
			}
			if limit := int64(192 << 20); heap > limit {
				t.Errorf("Go heap grew by %d MiB, want under %d", heap>>20, limit>>20)
			}
		})
	}
}

// A failing value is quoted in its message: a 4 MiB string must not make a
// 4 MiB message.
func TestJSONErrorMessagesBounded(t *testing.T) {
	r, err := NewRegistry("", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"a": "` + strings.Repeat("x", 4<<20) + `"}`
	ref := SchemaRef{Inline: map[string]any{"properties": map[string]any{"a": map[string]any{"pattern": "^y"}}}}
	res, err := r.ValidateJSON(t.Context(), ref, strings.NewReader(doc), false, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors {
		if n := len(e.Message) + len(e.InstanceLocation) + len(e.SchemaLocation); n > 2*maxMessageBytes {
			t.Errorf("error of %d bytes: %.100s", n, e.Message)
		}
	}
}

// endless yields the same bytes over and over, up to n bytes.
type endless struct {
	chunk []byte
	n     int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && e.n > 0 {
		c := copy(p[k:], e.chunk)
		if int64(c) > e.n {
			c = int(e.n)
		}
		k += c
		e.n -= int64(c)
	}
	return k, nil
}

// rows generates n CSV rows of cols distinct integers each.
type rows struct {
	i, n, cols int
	buf        bytes.Buffer
}

func (r *rows) Read(p []byte) (int, error) {
	for r.buf.Len() < len(p) && r.i < r.n {
		for c := range r.cols {
			if c > 0 {
				r.buf.WriteByte(',')
			}
			fmt.Fprintf(&r.buf, "%d", r.i*r.cols+c)
		}
		r.buf.WriteByte('\n')
		r.i++
	}
	if r.buf.Len() == 0 {
		return 0, io.EOF
	}
	return r.buf.Read(p)
}

func TestCSVValidationBounded(t *testing.T) {
	header := func(n int) string {
		h := make([]string, n)
		for i := range h {
			h[i] = fmt.Sprintf("c%d", i)
		}
		return strings.Join(h, ",") + "\n"
	}
	unique := func(n int) map[string]Constraint {
		m := map[string]Constraint{}
		for i := range n {
			m[fmt.Sprintf("c%d", i)] = Constraint{Type: "integer", Unique: true}
		}
		return m
	}
	tests := []struct {
		name        string
		data        io.Reader
		opts        CSVOptions
		lim         Limits
		wantStopped bool
		maxCPU      time.Duration
		maxHeap     int64
	}{
		// One 64 MiB record (no newline): encoding/csv buffers a whole
		// record, so the reader must refuse to feed it one this long.
		{"64 MiB record", io.MultiReader(strings.NewReader("a\n\""), &endless{chunk: []byte("xxxxxxxx"), n: 64 << 20}), CSVOptions{}, Limits{Timeout: time.Hour}, true, 5 * time.Second, 16 << 20},
		// 10 unique columns of 150,000 distinct values: 1,500,000 values
		// tracked before (up to 1,000,000 per column); a budget of 50,000
		// for all columns now.
		{"unique columns share a budget", io.MultiReader(strings.NewReader(header(10)), &rows{n: 150_000, cols: 10}), CSVOptions{Columns: unique(10)}, Limits{MaxUniqueValues: 50_000, Timeout: time.Hour}, false, 20 * time.Second, 32 << 20},
		// 100,000 columns.
		{"too many columns", strings.NewReader(header(100_000) + "1\n"), CSVOptions{}, Limits{Timeout: time.Hour}, true, 5 * time.Second, 64 << 20},
		// 2 GiB of rows stop at the time limit.
		{"time limit", io.MultiReader(strings.NewReader("a,b\n"), &endless{chunk: []byte("1,2\n"), n: 2 << 30}), CSVOptions{}, Limits{Timeout: time.Second}, true, 5 * time.Second, 16 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRegistry("", tt.lim)
			if err != nil {
				t.Fatal(err)
			}
			var res *CSVResult
			start, cpu0 := time.Now(), testenv.CPUTime(t)
			heap := peakHeap(func() { res, err = r.ValidateCSV(t.Context(), tt.data, tt.opts) })
			elapsed, cpu := time.Since(start), testenv.CPUTime(t)-cpu0
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s (CPU %s), Go heap +%d MiB: %d rows, %d errors, stopped %q, notes %d", elapsed.Round(time.Millisecond), cpu.Round(time.Millisecond), heap>>20, res.Rows, res.ErrorCount, res.Stopped, len(res.Notes))
			if (res.Stopped != "") != tt.wantStopped {
				t.Errorf("stopped = %q, want stopped %v", res.Stopped, tt.wantStopped)
			}
			if cpu > tt.maxCPU {
				t.Errorf("took %s of CPU, want under %s", cpu, tt.maxCPU)
			}
			if heap > tt.maxHeap {
				t.Errorf("Go heap grew by %d MiB, want under %d", heap>>20, tt.maxHeap>>20)
			}
		})
	}
}

// A quote left open at the end of the file made encoding/csv's FieldPos
// panic after the failed Read (found while bounding record sizes).
func TestCSVQuoteOpenAtEnd(t *testing.T) {
	for _, in := range []string{"a\n\"xxx", "a,b\n1,\"2\n"} {
		res, err := CSV(t.Context(), strings.NewReader(in), CSVOptions{}, Limits{})
		if err != nil || res.Valid || res.ErrorCount != 1 {
			t.Errorf("%q: %+v, %v; want one error", in, res, err)
		}
	}
}
