package validate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"math/bits"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Caps that keep CSV validation in bounded memory whatever the input size;
// Limits bounds the rest (record size, columns, unique and distinct values
// across all columns, time).
const (
	// exactDistinct is how many distinct values per column are counted
	// exactly; past it (or past Limits.MaxDistinctValues for all columns)
	// the summary switches to a HyperLogLog estimate (about 1.6% standard
	// error, 4 KiB per column).
	exactDistinct = 10_000
	maxValueShown = 80
	// maxNameShown bounds a header name in the result and its errors.
	maxNameShown = 128
	// maxHeadersListed bounds the header list quoted in an error.
	maxHeadersListed = 20
)

// Constraint restricts one CSV column. In JSON it is either a type name
// ("integer") or an object ({"type": "date", "format": "%d/%m/%Y"}).
type Constraint struct {
	// Type is integer, number, boolean, date, datetime, string or enum
	// (aliases: int, float, decimal, bool, timestamp, text, str).
	Type string `json:"type,omitempty"`
	// Format is the layout of a date or datetime, strftime style (%Y-%m-%d)
	// or Go style (2006-01-02). Dates default to %Y-%m-%d; datetimes to
	// RFC 3339 or "%Y-%m-%d %H:%M:%S".
	Format  string   `json:"format,omitempty"`
	Pattern string   `json:"pattern,omitempty" jsonschema:"regular expression (RE2) the whole value must match"`
	Enum    []string `json:"enum,omitempty" jsonschema:"the allowed values"`
	NotNull bool     `json:"not_null,omitempty"`
	Unique  bool     `json:"unique,omitempty"`
	// Min and Max bound numbers (integer, number), dates and datetimes (a
	// value in the column's format) or, for strings, the length.
	Min any `json:"min,omitempty"`
	Max any `json:"max,omitempty"`
}

// UnmarshalJSON accepts a bare type name as well as an object.
func (c *Constraint) UnmarshalJSON(b []byte) error {
	var name string
	if json.Unmarshal(b, &name) == nil {
		*c = Constraint{Type: name}
		return nil
	}
	type plain Constraint
	return json.Unmarshal(b, (*plain)(c))
}

// CSVOptions configure one CSV validation.
type CSVOptions struct {
	Delimiter  rune // default ','
	Quote      rune // only '"' (the default) is supported by encoding/csv
	NoHeader   bool // the first row is data; columns are named column1, column2, ...
	LazyQuotes bool // allow a quote in an unquoted field and a stray quote in a quoted one
	// RequiredHeaders must all be present.
	RequiredHeaders []string
	// RejectUnexpected makes any header that is neither required nor
	// constrained an error.
	RejectUnexpected bool
	Columns          map[string]Constraint
	// NullValues are the values that count as null (after trimming
	// spaces); default just the empty string.
	NullValues []string
	MaxRows    int // 0: no limit
	MaxErrors  int // 0: DefaultMaxErrors
}

// CSVError is one problem, located by row and column.
type CSVError struct {
	// Row is the 1-based data row (the header is row 0); Line is the line
	// in the file where the record starts. Both 0 for file-level errors.
	Row     int    `json:"row"`
	Line    int    `json:"line,omitempty"`
	Column  string `json:"column,omitempty"`
	Value   string `json:"value,omitempty"`
	Message string `json:"message"`
}

// ColumnSummary describes one column's data.
type ColumnSummary struct {
	Name          string `json:"name"`
	InferredType  string `json:"inferred_type" jsonschema:"integer, number, boolean, date, datetime, string, or empty when all null"`
	Nulls         int    `json:"nulls"`
	Distinct      int    `json:"distinct" jsonschema:"distinct non-null values: exact when distinct_exact, else a HyperLogLog estimate"`
	DistinctExact bool   `json:"distinct_exact"`
}

// CSVResult is the outcome of a CSV validation.
type CSVResult struct {
	Valid      bool            `json:"valid"`
	Rows       int             `json:"rows" jsonschema:"data rows, not counting the header"`
	Headers    []string        `json:"headers"`
	Columns    []ColumnSummary `json:"columns"`
	ErrorCount int             `json:"error_count" jsonschema:"all errors found, including any not listed"`
	Errors     []CSVError      `json:"errors"`
	Truncated  bool            `json:"truncated" jsonschema:"true when more errors were found than listed"`
	Notes      []string        `json:"notes,omitempty"`
	// Stopped says why validation ended before the end of the input.
	Stopped string `json:"stopped,omitempty" jsonschema:"set when a limit stopped validation before the end: the counts cover only the rows before it"`
}

type colType int

const (
	tString colType = iota
	tInteger
	tNumber
	tBoolean
	tDate
	tDatetime
	tEnum
)

var typeNames = map[string]colType{
	"string": tString, "str": tString, "text": tString,
	"integer": tInteger, "int": tInteger,
	"number": tNumber, "float": tNumber, "decimal": tNumber, "double": tNumber,
	"boolean": tBoolean, "bool": tBoolean,
	"date": tDate, "datetime": tDatetime, "timestamp": tDatetime, "date-time": tDatetime,
	"enum": tEnum,
}

// rule is a compiled Constraint.
type rule struct {
	typ      colType
	name     string
	layouts  []string
	pattern  *regexp.Regexp
	enum     map[string]bool
	notNull  bool
	unique   bool
	min, max *float64 // numbers, string lengths, or Unix nanoseconds for times
	seen     map[uint64]int32
	full     bool // seen no longer grows: the shared unique budget is spent
}

func compileRule(col string, c Constraint) (*rule, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: column %q: %s", ErrBadConstraint, col, fmt.Sprintf(format, a...))
	}
	r := &rule{notNull: c.NotNull, unique: c.Unique}
	if c.Unique {
		r.seen = map[uint64]int32{}
	}
	name := strings.ToLower(strings.TrimSpace(c.Type))
	switch {
	case name == "" && len(c.Enum) > 0:
		name = "enum"
	case name == "":
		name = "string"
	}
	t, ok := typeNames[name]
	if !ok {
		return nil, bad("unknown type %q: use integer, number, boolean, date, datetime, string or enum", c.Type)
	}
	r.typ, r.name = t, name
	switch t {
	case tDate:
		r.layouts = []string{"2006-01-02"}
	case tDatetime:
		r.layouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02 15:04"}
	}
	if c.Format != "" {
		if t != tDate && t != tDatetime {
			return nil, bad("format applies to date and datetime, not %s", name)
		}
		r.layouts = []string{goLayout(c.Format)}
	}
	if c.Pattern != "" {
		re, err := regexp.Compile(`^(?:` + c.Pattern + `)$`)
		if err != nil {
			return nil, bad("pattern: %v", err)
		}
		r.pattern = re
	}
	if len(c.Enum) > 0 || t == tEnum {
		if len(c.Enum) == 0 {
			return nil, bad("type enum needs enum: the list of allowed values")
		}
		r.enum = map[string]bool{}
		for _, v := range c.Enum {
			r.enum[v] = true
		}
	}
	for _, b := range []struct {
		v   any
		dst **float64
		key string
	}{{c.Min, &r.min, "min"}, {c.Max, &r.max, "max"}} {
		if b.v == nil {
			continue
		}
		switch t {
		case tDate, tDatetime:
			s, ok := b.v.(string)
			if !ok {
				return nil, bad("%s must be a %s in the column's format, got %v", b.key, name, b.v)
			}
			tm, ok := r.parseTime(s)
			if !ok {
				return nil, bad("%s %q does not match the format %s", b.key, s, r.layouts[0])
			}
			f := float64(tm.UnixNano())
			*b.dst = &f
		case tBoolean, tEnum:
			return nil, bad("%s does not apply to %s", b.key, name)
		default:
			f, ok := toFloat(b.v)
			if !ok {
				return nil, bad("%s must be a number, got %v", b.key, b.v)
			}
			*b.dst = &f
		}
	}
	return r, nil
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case float64:
		return v, true
	case int:
		return float64(v), true
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return 0, false
}

var strftime = strings.NewReplacer(
	"%Y", "2006", "%y", "06", "%m", "01", "%d", "02", "%e", "_2", "%H", "15", "%I", "03",
	"%M", "04", "%S", "05", "%p", "PM", "%b", "Jan", "%B", "January", "%a", "Mon", "%A", "Monday",
	"%z", "-0700", "%Z", "MST", "%f", "000000", "%j", "002", "%%", "%",
	"YYYY", "2006", "MM", "01", "DD", "02", "HH", "15", "mm", "04", "ss", "05",
)

// goLayout accepts strftime (%Y-%m-%d), the common YYYY-MM-DD spelling, or
// a Go layout as is.
func goLayout(f string) string {
	if strings.Contains(f, "2006") {
		return f
	}
	return strftime.Replace(f)
}

func (r *rule) parseTime(s string) (time.Time, bool) {
	for _, l := range r.layouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// check returns the problem with v, "" when none. v is not null.
func (r *rule) check(v string) string {
	var n float64
	switch r.typ {
	case tInteger:
		i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return "not an integer"
		}
		n = float64(i)
	case tNumber:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return "not a number"
		}
		n = f
	case tBoolean:
		if _, ok := boolValues[strings.ToLower(strings.TrimSpace(v))]; !ok {
			return "not a boolean (use true/false, yes/no, 1/0)"
		}
	case tDate, tDatetime:
		t, ok := r.parseTime(strings.TrimSpace(v))
		if !ok {
			return fmt.Sprintf("not a %s in the format %s", r.name, r.layouts[0])
		}
		n = float64(t.UnixNano())
	case tString, tEnum:
		n = float64(utf8.RuneCountInString(v))
	}
	if r.enum != nil && !r.enum[v] {
		return fmt.Sprintf("not one of the allowed values %s", enumList(r.enum))
	}
	if r.pattern != nil && !r.pattern.MatchString(v) {
		return fmt.Sprintf("does not match the pattern %s", r.pattern)
	}
	what := "value"
	if r.typ == tString || r.typ == tEnum {
		what = "length"
	}
	if r.min != nil && n < *r.min {
		return fmt.Sprintf("%s is below the minimum %s", what, r.bound(*r.min))
	}
	if r.max != nil && n > *r.max {
		return fmt.Sprintf("%s is above the maximum %s", what, r.bound(*r.max))
	}
	return ""
}

func (r *rule) bound(f float64) string {
	if r.typ == tDate || r.typ == tDatetime {
		return time.Unix(0, int64(f)).UTC().Format(r.layouts[0])
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func enumList(m map[string]bool) string {
	var vs []string
	for v := range m {
		vs = append(vs, strconv.Quote(v))
	}
	sort.Strings(vs)
	if len(vs) > 20 {
		vs = append(vs[:20], "...")
	}
	return "[" + strings.Join(vs, ", ") + "]"
}

var boolValues = map[string]bool{"true": true, "false": false, "t": true, "f": false, "yes": true, "no": false, "y": true, "n": false, "1": true, "0": false}

// column accumulates one column's summary.
type column struct {
	name                                     string
	rule                                     *rule
	nulls, values                            int
	isInt, isNum, isBool, isDate, isDatetime bool
	exact                                    map[uint64]struct{}
	hll                                      *hll
}

// observe records a non-null value; left is the exact-distinct budget all
// columns share.
func (c *column) observe(seed maphash.Seed, v string, left *int) {
	c.values++
	h := maphash.String(seed, v)
	if c.hll == nil {
		if _, ok := c.exact[h]; !ok {
			c.exact[h] = struct{}{}
			*left--
		}
		if len(c.exact) > exactDistinct || *left <= 0 {
			c.hll = newHLL()
			for k := range c.exact {
				c.hll.add(k)
			}
			c.exact = nil
		}
	} else {
		c.hll.add(h)
	}
	t := strings.TrimSpace(v)
	if c.isInt {
		if _, err := strconv.ParseInt(t, 10, 64); err != nil {
			c.isInt = false
		}
	}
	if c.isNum && !c.isInt {
		if _, err := strconv.ParseFloat(t, 64); err != nil {
			c.isNum = false
		}
	}
	if c.isBool {
		if _, ok := boolValues[strings.ToLower(t)]; !ok {
			c.isBool = false
		}
	}
	if c.isDate {
		if _, err := time.Parse("2006-01-02", t); err != nil {
			c.isDate = false
		}
	}
	if c.isDatetime {
		if _, err := time.Parse(time.RFC3339Nano, t); err != nil {
			if _, err := time.Parse("2006-01-02 15:04:05", t); err != nil {
				c.isDatetime = false
			}
		}
	}
}

func (c *column) summary() ColumnSummary {
	s := ColumnSummary{Name: shortName(c.name), Nulls: c.nulls}
	if c.hll == nil {
		s.Distinct, s.DistinctExact = len(c.exact), true
	} else {
		s.Distinct = int(c.hll.estimate())
	}
	switch {
	case c.values == 0:
		s.InferredType = "empty"
	case c.isInt:
		s.InferredType = "integer"
	case c.isNum:
		s.InferredType = "number"
	case c.isBool:
		s.InferredType = "boolean"
	case c.isDate:
		s.InferredType = "date"
	case c.isDatetime:
		s.InferredType = "datetime"
	default:
		s.InferredType = "string"
	}
	return s
}

// ValidateCSV validates CSV read from data within the registry's limits:
// the time limit for the whole call (and ctx), the record size, the number
// of columns, and the values tracked for unique and distinct counts.
func (r *Registry) ValidateCSV(ctx context.Context, data io.Reader, opts CSVOptions) (*CSVResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.limits.Timeout)
	defer cancel()
	return CSV(ctx, data, opts, r.limits)
}

// errRecordTooLong is what the record guard returns past the record limit.
var errRecordTooLong = errors.New("record too long")

// recordGuard lets encoding/csv read at most limit bytes: CSV moves limit
// forward after each record, so one record (a line, or a quoted field with
// newlines in it) can never make the reader buffer more than the record
// limit plus what bufio reads ahead.
type recordGuard struct {
	r        io.Reader
	n, limit int64
}

func (g *recordGuard) Read(p []byte) (int, error) {
	if g.n >= g.limit {
		return 0, errRecordTooLong
	}
	if rem := g.limit - g.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	m, err := g.r.Read(p)
	g.n += int64(m)
	return m, err
}

// ctxEvery is how many records pass between two checks of the deadline.
const ctxEvery = 1024

// CSV validates CSV read from data, streaming it: memory stays bounded by
// the record limit, the per-column summaries and the unique and distinct
// caps, and time by ctx. Past a limit, the result so far is returned with
// Stopped saying why.
func CSV(ctx context.Context, data io.Reader, opts CSVOptions, lim Limits) (*CSVResult, error) {
	lim.defaults()
	if opts.Delimiter == 0 {
		opts.Delimiter = ','
	}
	if opts.Quote != 0 && opts.Quote != '"' {
		return nil, fmt.Errorf("%w: quote %q is not supported: only '\"' can quote fields (set lazy_quotes to accept stray quotes)", ErrBadConstraint, opts.Quote)
	}
	if opts.Delimiter == '"' || opts.Delimiter == '\n' || opts.Delimiter == '\r' || !utf8.ValidRune(opts.Delimiter) {
		return nil, fmt.Errorf("%w: delimiter %q cannot separate fields", ErrBadConstraint, opts.Delimiter)
	}
	if opts.MaxErrors <= 0 {
		opts.MaxErrors = DefaultMaxErrors
	}
	opts.MaxErrors = min(opts.MaxErrors, lim.MaxErrors)
	nulls := map[string]bool{"": true}
	if opts.NullValues != nil {
		nulls = map[string]bool{}
		for _, v := range opts.NullValues {
			nulls[strings.TrimSpace(v)] = true
		}
	}
	rules := map[string]*rule{}
	for col, c := range opts.Columns {
		r, err := compileRule(col, c)
		if err != nil {
			return nil, err
		}
		rules[col] = r
	}

	res := &CSVResult{Errors: []CSVError{}, Headers: []string{}, Columns: []ColumnSummary{}}
	add := func(e CSVError) {
		res.ErrorCount++
		if len(res.Errors) < opts.MaxErrors {
			if len(e.Value) > maxValueShown {
				e.Value = e.Value[:maxValueShown] + "..."
			}
			e.Value = strings.ToValidUTF8(e.Value, "\uFFFD")
			e.Column = shortName(e.Column)
			res.Errors = append(res.Errors, e)
		} else {
			res.Truncated = true
		}
	}

	const readAhead = 64 << 10
	guard := &recordGuard{r: data, limit: int64(lim.MaxCSVRecordBytes) + readAhead}
	br := bufio.NewReaderSize(guard, readAhead)
	var bom int64 // bytes skipped before the CSV reader's offsets start
	if head, _ := br.Peek(3); bytes.HasPrefix(head, []byte{0xEF, 0xBB, 0xBF}) {
		br.Discard(3)
		bom = 3
		res.Notes = append(res.Notes, "skipped a UTF-8 byte order mark")
	} else if bytes.HasPrefix(head, []byte{0xFF, 0xFE}) || bytes.HasPrefix(head, []byte{0xFE, 0xFF}) {
		add(CSVError{Message: "the file is UTF-16 (it starts with a UTF-16 byte order mark): convert it to UTF-8"})
		res.Valid = false
		return res, nil
	}
	cr := csv.NewReader(br)
	cr.Comma = opts.Delimiter
	cr.LazyQuotes = opts.LazyQuotes
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true

	seed := maphash.MakeSeed()
	var cols []*column
	byName := map[string]int{}
	row := 0
	// next moves the guard past the record just read.
	next := func() { guard.limit = bom + cr.InputOffset() + int64(lim.MaxCSVRecordBytes) + readAhead }
	uniqueLeft, distinctLeft := lim.MaxUniqueValues, lim.MaxDistinctValues
	stop := func(why string) (*CSVResult, error) {
		res.Stopped = why
		res.Rows = row
		return finish(res, cols), nil
	}
	tooLong := func(what string) (*CSVResult, error) {
		add(CSVError{Row: row + 1, Message: fmt.Sprintf("%s is longer than %d bytes (hint: check the delimiter and quoting; an unclosed quote makes the rest of the file one field)", what, lim.MaxCSVRecordBytes)})
		return stop(fmt.Sprintf("stopped at a record longer than %d bytes", lim.MaxCSVRecordBytes))
	}
	tooWide := func(n int) (*CSVResult, error) {
		add(CSVError{Message: fmt.Sprintf("the file has %d columns; at most %d are validated", n, lim.MaxCSVColumns)})
		return stop(fmt.Sprintf("stopped: more than %d columns", lim.MaxCSVColumns))
	}
	if !opts.NoHeader {
		rec, err := cr.Read()
		next()
		if err == io.EOF {
			add(CSVError{Message: "the CSV is empty: expected a header row"})
			return finish(res, cols), nil
		}
		if errors.Is(err, errRecordTooLong) {
			return tooLong("the header")
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				add(CSVError{Line: pe.StartLine, Message: "header: " + pe.Err.Error()})
				return finish(res, cols), nil
			}
			return nil, fmt.Errorf("%w: %v", ErrInput, noPath(err))
		}
		if len(rec) > lim.MaxCSVColumns {
			return tooWide(len(rec))
		}
		for i, h := range rec {
			h = strings.TrimSpace(h)
			if !utf8.ValidString(h) {
				add(CSVError{Line: 1, Column: strings.ToValidUTF8(h, "\uFFFD"), Message: fmt.Sprintf("header %d is not valid UTF-8: convert the file to UTF-8", i+1)})
			}
			if h == "" {
				add(CSVError{Line: 1, Message: fmt.Sprintf("header %d is empty", i+1)})
			}
			if _, dup := byName[h]; dup {
				add(CSVError{Line: 1, Column: h, Message: fmt.Sprintf("header %q appears more than once", h)})
			}
			byName[h] = i
			cols = append(cols, newColumn(h, rules[h]))
			res.Headers = append(res.Headers, shortName(h))
		}
		expected := map[string]bool{}
		for _, h := range opts.RequiredHeaders {
			expected[h] = true
			if _, ok := byName[h]; !ok {
				add(CSVError{Column: h, Message: fmt.Sprintf("required header %q is missing (headers are %s)", shortName(h), headerList(res.Headers))})
			}
		}
		for col := range rules {
			expected[col] = true
			if _, ok := byName[col]; !ok {
				add(CSVError{Column: col, Message: fmt.Sprintf("type_constraints names column %q, which is not in the header", col)})
			}
		}
		if opts.RejectUnexpected {
			for _, h := range res.Headers {
				if !expected[h] {
					add(CSVError{Column: h, Message: fmt.Sprintf("unexpected header %q: it is neither required nor constrained", h)})
				}
			}
		}
	}

	lastLine := 0
	for {
		if row%ctxEvery == 0 && ctx.Err() != nil {
			return stop(fmt.Sprintf("stopped after %d rows: the time limit was reached; the counts cover the rows before it", row))
		}
		rec, err := cr.Read()
		next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errRecordTooLong) {
			return tooLong(fmt.Sprintf("row %d", row+1))
		}
		if err != nil {
			var pe *csv.ParseError
			if !errors.As(err, &pe) {
				return nil, fmt.Errorf("%w: %v", ErrInput, noPath(err))
			}
			row++
			hint := ""
			if errors.Is(pe.Err, csv.ErrBareQuote) || errors.Is(pe.Err, csv.ErrQuote) {
				hint = " (quote fields that contain quotes, doubling inner quotes, or set lazy_quotes)"
			}
			add(CSVError{Row: row, Line: pe.StartLine, Message: pe.Err.Error() + hint})
			if pe.StartLine <= lastLine && pe.Line <= lastLine {
				break // no progress: stop rather than loop
			}
			lastLine = max(pe.Line, pe.StartLine)
			continue
		}
		// FieldPos panics after a failed Read (a quote left open at the
		// end of the file): ask only for a record that was read.
		line, _ := cr.FieldPos(0)
		lastLine = line
		row++
		if opts.MaxRows > 0 && row == opts.MaxRows+1 {
			add(CSVError{Row: row, Line: line, Message: fmt.Sprintf("more than max_rows=%d data rows", opts.MaxRows)})
		}
		if cols == nil { // no header: name the columns after the first record
			if len(rec) > lim.MaxCSVColumns {
				return tooWide(len(rec))
			}
			for i := range rec {
				name := "column" + strconv.Itoa(i+1)
				byName[name] = i
				cols = append(cols, newColumn(name, rules[name]))
				res.Headers = append(res.Headers, name)
			}
			for col := range rules {
				if _, ok := byName[col]; !ok {
					add(CSVError{Column: col, Message: fmt.Sprintf("type_constraints names column %q, but without a header the columns are column1..column%d", col, len(cols))})
				}
			}
		}
		if len(rec) != len(cols) {
			add(CSVError{Row: row, Line: line, Message: fmt.Sprintf("row has %d fields, the header has %d", len(rec), len(cols))})
		}
		for i, c := range cols {
			v := ""
			if i < len(rec) {
				v = rec[i]
			}
			if !utf8.ValidString(v) {
				add(CSVError{Row: row, Line: line, Column: c.name, Value: v, Message: "not valid UTF-8 (hint: the file may be Latin-1 or Windows-1252; convert it to UTF-8)"})
				continue
			}
			if nulls[strings.TrimSpace(v)] {
				c.nulls++
				if c.rule != nil && c.rule.notNull {
					add(CSVError{Row: row, Line: line, Column: c.name, Message: "is empty but the column is not_null"})
				}
				continue
			}
			c.observe(seed, v, &distinctLeft)
			r := c.rule
			if r == nil {
				continue
			}
			if msg := r.check(v); msg != "" {
				add(CSVError{Row: row, Line: line, Column: c.name, Value: v, Message: msg})
			}
			if r.unique {
				h := maphash.String(seed, v)
				if first, dup := r.seen[h]; dup {
					add(CSVError{Row: row, Line: line, Column: c.name, Value: v, Message: fmt.Sprintf("duplicate value in a unique column (first seen in row %d)", first)})
				} else if uniqueLeft > 0 {
					r.seen[h] = int32(min(row, math.MaxInt32))
					uniqueLeft--
				} else if !r.full {
					// Stop growing: duplicates of the values seen so far
					// are still found, new values are no longer tracked.
					r.full = true
					res.Notes = append(res.Notes, fmt.Sprintf("column %q: unique is checked only against the values seen up to row %d (all unique columns together track at most %d distinct values)", shortName(c.name), row, lim.MaxUniqueValues))
				}
			}
		}
	}
	res.Rows = row
	return finish(res, cols), nil
}

// shortName bounds a header name for the result.
func shortName(s string) string {
	if len(s) <= maxNameShown {
		return s
	}
	cut := maxNameShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// headerList quotes the first headers for an error message.
func headerList(h []string) string {
	if len(h) <= maxHeadersListed {
		return strings.Join(h, ", ")
	}
	return strings.Join(h[:maxHeadersListed], ", ") + fmt.Sprintf(", ... and %d more", len(h)-maxHeadersListed)
}

func newColumn(name string, r *rule) *column {
	return &column{name: name, rule: r, isInt: true, isNum: true, isBool: true, isDate: true, isDatetime: true, exact: map[uint64]struct{}{}}
}

func finish(res *CSVResult, cols []*column) *CSVResult {
	for _, c := range cols {
		res.Columns = append(res.Columns, c.summary())
	}
	res.Valid = res.ErrorCount == 0
	return res
}

// hll is a HyperLogLog sketch with 2^12 registers.
type hll struct{ reg [1 << 12]uint8 }

func newHLL() *hll { return &hll{} }

func (h *hll) add(x uint64) {
	idx := x >> 52
	rank := uint8(bits.LeadingZeros64(x<<12|1<<11)) + 1
	if rank > h.reg[idx] {
		h.reg[idx] = rank
	}
}

func (h *hll) estimate() float64 {
	const m = float64(len(h.reg))
	sum, zeros := 0.0, 0
	for _, r := range h.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return math.Round(e)
}
