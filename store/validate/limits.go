package validate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Limits bound one validation. Zero fields take the defaults.
type Limits struct {
	// Timeout bounds one validate_json_data or validate_csv_data call;
	// default 10s.
	Timeout time.Duration
	// MaxDocumentBytes is the largest JSON document, and the longest JSONL
	// line; default 8 MiB. A workspace file is not read past it.
	MaxDocumentBytes int
	// MaxValues is how many JSON values (objects, arrays, strings, numbers,
	// booleans, nulls) one document may hold; default 100,000. Each value
	// can fail in its own way, and the validator keeps every failure until
	// it returns.
	MaxValues int
	// MaxDepth is how deeply a document may nest; default 256.
	MaxDepth int
	// MaxHeapBytes is how much the Go heap may grow while one document is
	// validated (sampled as it runs) before validation stops; default
	// 96 MiB. Only a document that fails in very many places comes near it.
	MaxHeapBytes int64
	// MaxErrors is the ceiling on a caller's max_errors; default 1000.
	MaxErrors int
	// MaxCSVRecordBytes is the longest CSV record (one row, quoted newlines
	// included); default 1 MiB.
	MaxCSVRecordBytes int
	// MaxCSVColumns is how many columns a CSV file may have; default 2000.
	MaxCSVColumns int
	// MaxUniqueValues is how many distinct values the unique checks of all
	// columns together track (16 bytes each); default 1,000,000. Past it,
	// unique is checked only for the values seen so far and the result
	// says so.
	MaxUniqueValues int
	// MaxDistinctValues is how many distinct values all columns together
	// count exactly for the summary; past it, columns switch to an
	// estimate. Default 200,000.
	MaxDistinctValues int
}

// DefaultLimits are the limits a zero Limits takes.
var DefaultLimits = Limits{
	Timeout:           10 * time.Second,
	MaxDocumentBytes:  8 << 20,
	MaxValues:         100_000,
	MaxDepth:          256,
	MaxHeapBytes:      96 << 20,
	MaxErrors:         1000,
	MaxCSVRecordBytes: 1 << 20,
	MaxCSVColumns:     2000,
	MaxUniqueValues:   1_000_000,
	MaxDistinctValues: 200_000,
}

func (l *Limits) defaults() {
	d := DefaultLimits
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.MaxDocumentBytes <= 0 {
		l.MaxDocumentBytes = d.MaxDocumentBytes
	}
	if l.MaxValues <= 0 {
		l.MaxValues = d.MaxValues
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxHeapBytes <= 0 {
		l.MaxHeapBytes = d.MaxHeapBytes
	}
	if l.MaxErrors <= 0 {
		l.MaxErrors = d.MaxErrors
	}
	if l.MaxCSVRecordBytes <= 0 {
		l.MaxCSVRecordBytes = d.MaxCSVRecordBytes
	}
	if l.MaxCSVColumns <= 0 {
		l.MaxCSVColumns = d.MaxCSVColumns
	}
	if l.MaxUniqueValues <= 0 {
		l.MaxUniqueValues = d.MaxUniqueValues
	}
	if l.MaxDistinctValues <= 0 {
		l.MaxDistinctValues = d.MaxDistinctValues
	}
}

// budget stops a JSON Schema validation from inside: jsonschema takes no
// context and builds every failure before it returns, so the compiled schema
// carries a vocabulary whose keyword-less extension runs at every schema
// object the validator evaluates, and panics (recovered in run) once the
// deadline passed or the heap grew past its limit.
type budget struct {
	done    atomic.Bool // the context ended
	ctx     context.Context
	steps   int
	heap0   uint64
	maxHeap uint64
}

// stopped is the panic value that unwinds a validation.
type stopped struct{ err error }

// heapSample is the Go heap's live-and-unswept object bytes: cheap to read
// (no stop-the-world), and it grows with what the validator allocates.
var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

func heapBytes() uint64 {
	s := make([]metrics.Sample, 1)
	copy(s, heapSample)
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// heapEvery is how many evaluations pass between two heap samples.
const heapEvery = 512

func (b *budget) tick() {
	b.steps++
	if b.done.Load() {
		panic(stopped{b.ctx.Err()})
	}
	if b.steps%heapEvery == 0 && b.maxHeap > 0 {
		if h := heapBytes(); h > b.heap0 && h-b.heap0 > b.maxHeap {
			panic(stopped{errHeap})
		}
	}
}

var errHeap = errors.New("heap limit")

// start arms the budget for one document.
func (b *budget) start() { b.heap0 = heapBytes() }

// run validates doc against s, stopping at the budget's limits.
func (b *budget) run(s *jsonschema.Schema, doc any) (err error, stop error) {
	b.start()
	defer func() {
		if p := recover(); p != nil {
			st, ok := p.(stopped)
			if !ok {
				panic(p)
			}
			stop = st.err
		}
	}()
	return s.Validate(doc), nil
}

// budgetVocab is the vocabulary that hooks b into every schema object.
func budgetVocab(b *budget) *jsonschema.Vocabulary {
	return &jsonschema.Vocabulary{
		URL: "sandpit:///vocab/budget",
		Compile: func(*jsonschema.CompilerContext, map[string]any) (jsonschema.SchemaExt, error) {
			return budgetExt{b}, nil
		},
	}
}

type budgetExt struct{ b *budget }

func (e budgetExt) Validate(*jsonschema.ValidatorContext, any) { e.b.tick() }

// decodeLimited decodes one JSON document the way jsonschema.UnmarshalJSON
// does (numbers as json.Number), refusing more than maxValues values or
// maxDepth levels as it goes, so that the tree it builds stays bounded.
func decodeLimited(r io.Reader, maxValues, maxDepth int) (any, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	n := 0
	var value func(depth int) (any, error)
	value = func(depth int) (any, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		n++
		if n > maxValues {
			return nil, fmt.Errorf("%w: the document holds more than %d values", ErrTooLarge, maxValues)
		}
		switch t := tok.(type) {
		case json.Delim:
			if depth >= maxDepth {
				return nil, fmt.Errorf("%w: the document nests deeper than %d levels", ErrTooLarge, maxDepth)
			}
			switch t {
			case '[':
				arr := []any{}
				for dec.More() {
					v, err := value(depth + 1)
					if err != nil {
						return nil, err
					}
					arr = append(arr, v)
				}
				if _, err := dec.Token(); err != nil {
					return nil, err
				}
				return arr, nil
			case '{':
				obj := map[string]any{}
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return nil, err
					}
					k, _ := kt.(string)
					v, err := value(depth + 1)
					if err != nil {
						return nil, err
					}
					obj[k] = v
				}
				if _, err := dec.Token(); err != nil {
					return nil, err
				}
				return obj, nil
			}
			return nil, fmt.Errorf("unexpected %v", t)
		default:
			return t, nil
		}
	}
	doc, err := value(0)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("invalid character after top-level value")
		}
		return nil, err
	}
	return doc, nil
}
