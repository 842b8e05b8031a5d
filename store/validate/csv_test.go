package validate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestCSVConstraints(t *testing.T) {
	header := "id,name,score,active,joined,seen,code,tier\n"
	tests := []struct {
		name     string
		csv      string
		opts     CSVOptions
		wantErrs []string // "row:column" of each expected error, in order
	}{
		{"valid", header + "1,ada,9.5,true,2024-01-02,2024-01-02T03:04:05Z,AB12,pro\n2,bob,-1,no,2023-12-31,2024-01-02 03:04:05,CD34,free\n",
			CSVOptions{Columns: map[string]Constraint{"id": {Type: "integer", Unique: true}, "score": {Type: "number"}, "active": {Type: "boolean"},
				"joined": {Type: "date"}, "seen": {Type: "datetime"}, "code": {Type: "string", Pattern: "[A-Z]{2}[0-9]{2}"}, "tier": {Type: "enum", Enum: []string{"free", "pro"}}}}, nil},
		{"integer", header + "1,a,,,,,,\nx,b,,,,,,\n1.5,c,,,,,,\n", CSVOptions{Columns: map[string]Constraint{"id": {Type: "integer"}}}, []string{"2:id", "3:id"}},
		{"number min max", header + "1,a,5,,,,,\n2,b,-1,,,,,\n3,c,11,,,,,\n4,d,abc,,,,,\n", CSVOptions{Columns: map[string]Constraint{"score": {Type: "number", Min: 0.0, Max: 10.0}}}, []string{"2:score", "3:score", "4:score"}},
		{"boolean", header + "1,a,,maybe,,,,\n", CSVOptions{Columns: map[string]Constraint{"active": {Type: "bool"}}}, []string{"1:active"}},
		{"date with format and bounds", header + "1,a,,,02/01/2024,,,\n2,b,,,2024-01-02,,,\n3,c,,,31/12/1999,,,\n", CSVOptions{Columns: map[string]Constraint{"joined": {Type: "date", Format: "%d/%m/%Y", Min: "01/01/2000"}}}, []string{"2:joined", "3:joined"}},
		{"datetime", header + "1,a,,,,yesterday,,\n", CSVOptions{Columns: map[string]Constraint{"seen": {Type: "datetime"}}}, []string{"1:seen"}},
		{"string pattern and length", header + "1,a,,,,,ab12,\n2,toolongname,,,,,AB12,\n", CSVOptions{Columns: map[string]Constraint{"code": {Pattern: "[A-Z]{2}[0-9]{2}"}, "name": {Type: "string", Max: 5.0}}}, []string{"1:code", "2:name"}},
		{"enum", header + "1,a,,,,,,gold\n", CSVOptions{Columns: map[string]Constraint{"tier": {Enum: []string{"free", "pro"}}}}, []string{"1:tier"}},
		{"not null", header + "1,,,,,,,\n2,  ,,,,,,\n3,c,,,,,,\n", CSVOptions{Columns: map[string]Constraint{"name": {NotNull: true}}}, []string{"1:name", "2:name"}},
		{"null values", header + "1,NA,,,,,,\n", CSVOptions{NullValues: []string{"", "NA"}, Columns: map[string]Constraint{"name": {NotNull: true}}}, []string{"1:name"}},
		{"unique", header + "1,a,,,,,,\n2,b,,,,,,\n1,c,,,,,,\n", CSVOptions{Columns: map[string]Constraint{"id": {Type: "integer", Unique: true}}}, []string{"3:id"}},
		{"required headers", header + "1,a,,,,,,\n", CSVOptions{RequiredHeaders: []string{"id", "email"}}, []string{"0:email"}},
		{"constraint on a missing column", header, CSVOptions{Columns: map[string]Constraint{"email": {Type: "string"}}}, []string{"0:email"}},
		{"unexpected headers", "id,name,extra\n1,a,x\n", CSVOptions{RequiredHeaders: []string{"id"}, Columns: map[string]Constraint{"name": {}}, RejectUnexpected: true}, []string{"0:extra"}},
		{"unexpected headers allowed", "id,name,extra\n1,a,x\n", CSVOptions{RequiredHeaders: []string{"id"}}, nil},
		{"max rows", "id\n1\n2\n3\n", CSVOptions{MaxRows: 2}, []string{"3:"}},
		{"field count", "a,b\n1,2\n3\n", CSVOptions{}, []string{"2:"}},
		{"bare quote", "a,b\n1,x\"y\n2,3\n", CSVOptions{}, []string{"1:"}},
		{"bare quote with lazy quotes", "a,b\n1,x\"y\n", CSVOptions{LazyQuotes: true}, nil},
		{"semicolon delimiter", "a;b\n1;x\n", CSVOptions{Delimiter: ';', Columns: map[string]Constraint{"a": {Type: "integer"}, "b": {Type: "integer"}}}, []string{"1:b"}},
		{"no header", "1,x\n2,y\n", CSVOptions{NoHeader: true, Columns: map[string]Constraint{"column1": {Type: "integer"}, "column2": {Type: "integer"}}}, []string{"1:column2", "2:column2"}},
		{"invalid utf-8", "a,b\n1,caf\xe9\n", CSVOptions{}, []string{"1:b"}},
		{"quoted fields with newlines and delimiters", "a,b\n1,\"x,\ny\"\n2,\"say \"\"hi\"\"\"\n", CSVOptions{Columns: map[string]Constraint{"a": {Type: "integer", NotNull: true}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := CSV(t.Context(), strings.NewReader(tt.csv), tt.opts, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range res.Errors {
				got = append(got, fmt.Sprintf("%d:%s", e.Row, e.Column))
				if e.Message == "" {
					t.Errorf("error without a message: %+v", e)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.wantErrs, " ") {
				t.Fatalf("errors at %v, want %v:\n%+v", got, tt.wantErrs, res.Errors)
			}
			if res.Valid != (len(tt.wantErrs) == 0) || res.ErrorCount != len(res.Errors) {
				t.Errorf("valid %v, error_count %d", res.Valid, res.ErrorCount)
			}
		})
	}
}

func TestCSVSummary(t *testing.T) {
	var b strings.Builder
	b.WriteString("n,half,flag,day,label,empty\n")
	for i := range 30000 {
		fmt.Fprintf(&b, "%d,%g,%v,2024-01-%02d,item %d,\n", i, float64(i)/2, i%2 == 0, i%28+1, i%7)
	}
	res, err := CSV(t.Context(), strings.NewReader(b.String()), CSVOptions{}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 30000 || !res.Valid {
		t.Fatalf("rows %d valid %v", res.Rows, res.Valid)
	}
	want := []struct {
		typ      string
		distinct int
		exact    bool
	}{{"integer", 30000, false}, {"number", 30000, false}, {"boolean", 2, true}, {"date", 28, true}, {"string", 7, true}, {"empty", 0, true}}
	for i, w := range want {
		c := res.Columns[i]
		if c.InferredType != w.typ || c.DistinctExact != w.exact {
			t.Errorf("%s: %+v, want %+v", c.Name, c, w)
		}
		// The estimate is within 5% (HyperLogLog's error here is ~1.6%).
		if d := float64(c.Distinct - w.distinct); d > 0.05*float64(w.distinct) || d < -0.05*float64(w.distinct) {
			t.Errorf("%s: distinct %d, want about %d", c.Name, c.Distinct, w.distinct)
		}
	}
	if res.Columns[5].Nulls != 30000 {
		t.Errorf("nulls = %d", res.Columns[5].Nulls)
	}
}

func TestCSVErrorsAndOptions(t *testing.T) {
	many := "a\n" + strings.Repeat("x\n", 500)
	res, err := CSV(t.Context(), strings.NewReader(many), CSVOptions{Columns: map[string]Constraint{"a": {Type: "integer"}}, MaxErrors: 10}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 10 || res.ErrorCount != 500 || !res.Truncated {
		t.Fatalf("listed %d of %d", len(res.Errors), res.ErrorCount)
	}
	res, _ = CSV(t.Context(), strings.NewReader("\xff\xfea\x00"), CSVOptions{}, Limits{})
	if res.Valid || !strings.Contains(res.Errors[0].Message, "UTF-16") {
		t.Fatalf("UTF-16: %+v", res)
	}
	res, _ = CSV(t.Context(), strings.NewReader("\xef\xbb\xbfid\n1\n"), CSVOptions{RequiredHeaders: []string{"id"}}, Limits{})
	if !res.Valid {
		t.Fatalf("BOM: %+v", res)
	}
	res, _ = CSV(t.Context(), strings.NewReader(""), CSVOptions{}, Limits{})
	if res.Valid {
		t.Fatal("empty input is valid")
	}
	for _, c := range []struct {
		name string
		opts CSVOptions
	}{
		{"unknown type", CSVOptions{Columns: map[string]Constraint{"a": {Type: "uuid"}}}},
		{"enum without values", CSVOptions{Columns: map[string]Constraint{"a": {Type: "enum"}}}},
		{"bad regex", CSVOptions{Columns: map[string]Constraint{"a": {Pattern: "("}}}},
		{"min on boolean", CSVOptions{Columns: map[string]Constraint{"a": {Type: "boolean", Min: 1.0}}}},
		{"bad date min", CSVOptions{Columns: map[string]Constraint{"a": {Type: "date", Min: "yesterday"}}}},
		{"quote char", CSVOptions{Quote: '\''}},
	} {
		if _, err := CSV(t.Context(), strings.NewReader("a\n1\n"), c.opts, Limits{}); !errors.Is(err, ErrBadConstraint) {
			t.Errorf("%s: err = %v", c.name, err)
		}
	}
}

func TestConstraintJSON(t *testing.T) {
	var m map[string]Constraint
	if err := jsonUnmarshal(`{"a": "integer", "b": {"type": "date", "format": "%d.%m.%Y", "not_null": true}}`, &m); err != nil {
		t.Fatal(err)
	}
	if m["a"].Type != "integer" || m["b"].Format != "%d.%m.%Y" || !m["b"].NotNull {
		t.Fatalf("%+v", m)
	}
}

// csvGen writes rows of a realistic CSV until size bytes, with one bad
// value every 100k rows.
type csvGen struct {
	size, n int64
	row     int
	buf     []byte
}

func (g *csvGen) Read(p []byte) (int, error) {
	if g.n >= g.size && len(g.buf) == 0 {
		return 0, io.EOF
	}
	for len(g.buf) < len(p) && g.n < g.size {
		score := fmt.Sprintf("%d.%d", g.row%100, g.row%10)
		if g.row%100000 == 99999 {
			score = "n/a"
		}
		line := fmt.Sprintf("%d,user_%d,%s,%v,2024-%02d-%02d,\"note, with comma %d\"\n", g.row, g.row, score, g.row%3 == 0, g.row%12+1, g.row%28+1, g.row%1000)
		if g.row == 0 {
			line = "id,name,score,active,day,note\n"
		}
		g.row++
		g.buf = append(g.buf, line...)
		g.n += int64(len(line))
	}
	n := copy(p, g.buf)
	g.buf = g.buf[:copy(g.buf, g.buf[n:])]
	return n, nil
}

// BenchmarkValidateCSV100MB streams a generated 100 MB CSV through every
// constraint type and reports peak heap in use (sampled) next to time.
func BenchmarkValidateCSV100MB(b *testing.B) {
	opts := CSVOptions{
		RequiredHeaders: []string{"id", "name", "score"},
		Columns: map[string]Constraint{
			"id":     {Type: "integer", Unique: true, NotNull: true},
			"name":   {Pattern: "user_[0-9]+"},
			"score":  {Type: "number", Min: 0.0, Max: 100.0},
			"active": {Type: "boolean"},
			"day":    {Type: "date", Format: "%Y-%m-%d"},
		},
	}
	// Generate the file once, so the timing is validation alone.
	path := filepath.Join(b.TempDir(), "big.csv")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	n, _ := io.Copy(w, &csvGen{size: 100 << 20})
	w.Flush()
	f.Close()
	b.SetBytes(n)
	for b.Loop() {
		in, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		stop := make(chan struct{})
		peak := make(chan uint64)
		go samplePeak(stop, peak)
		res, err := CSV(b.Context(), in, opts, Limits{})
		close(stop)
		in.Close()
		p := <-peak
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(p)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(res.Rows), "rows")
		if res.ErrorCount == 0 {
			b.Fatal("the generated bad values were not found")
		}
	}
}

func samplePeak(stop <-chan struct{}, out chan<- uint64) {
	var peak uint64
	var m runtime.MemStats
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
		select {
		case <-stop:
			out <- peak
			return
		case <-tick.C:
		}
	}
}

// TestCSVFile checks a file read through the same streaming path, as the
// MCP tool does for a workspace path.
func TestCSVFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data.csv")
	f, _ := os.Create(path)
	w := bufio.NewWriter(f)
	io.Copy(w, &csvGen{size: 1 << 20})
	w.Flush()
	f.Close()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	res, err := CSV(t.Context(), in, CSVOptions{Columns: map[string]Constraint{"id": {Type: "integer", Unique: true}}}, Limits{})
	if err != nil || !res.Valid || res.Rows < 10000 {
		t.Fatalf("%+v, %v", res, err)
	}
}
