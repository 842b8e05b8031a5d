// Package validate checks JSON documents against JSON Schema and CSV files
// against column constraints.
//
// Its guarantees: validation never fetches anything over the network (a
// $ref to http(s) or any other unregistered URL is refused, and a file $ref
// must stay inside the schema's own directory); malformed input (bad JSON,
// bad CSV quoting, invalid UTF-8) is reported as errors in the result, never
// a crash; CSV is streamed in constant memory apart from the documented
// caps on unique-value tracking; and every error list is capped, with the
// total count kept.
package validate

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/sandpit-dev/sandpit"
)

// Errors callers branch on with errors.Is.
var (
	// ErrUnknownSchema: no schema is registered under the name.
	ErrUnknownSchema = sandpit.Define(sandpit.ErrNotFound, "unknown schema")
	// ErrBadSchema: the schema is not valid JSON Schema or cannot compile.
	ErrBadSchema = sandpit.Define(sandpit.ErrInvalidArgument, "invalid schema")
	// ErrRemoteRef: the schema refers to something that is not fetched.
	ErrRemoteRef = sandpit.Define(sandpit.ErrInvalidArgument, "schema reference not allowed")
	// ErrBadConstraint: a CSV constraint or option is malformed.
	ErrBadConstraint = sandpit.Define(sandpit.ErrInvalidArgument, "invalid CSV constraint")
	// ErrTooLarge: a document, line or schema file is past its size limit,
	// or validation reached its time or work limit.
	ErrTooLarge = sandpit.Define(sandpit.ErrResourceExhausted, "too large")
	// ErrTimeout: validation ran past its time limit.
	ErrTimeout = sandpit.Define(sandpit.ErrResourceExhausted, "validation timed out")
	// ErrInput: the input cannot be read (not the same as invalid data).
	ErrInput = sandpit.Define(sandpit.ErrInvalidArgument, "cannot read input")
)

//go:embed schemas/*.json
var builtinFS embed.FS

// baseURL names registered schemas: "user" is sandpit:///schemas/user.json,
// so one named schema can $ref another as "user.json".
const baseURL = "sandpit:///schemas/"

// NamedSchema is a registered schema.
type NamedSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Source      string          `json:"source" jsonschema:"builtin or the file it was loaded from"`
	Schema      json.RawMessage `json:"schema"`
}

// Registry holds named schemas: the built-ins (config, user, dataset) and
// any *.json in a configured directory, which may override a built-in.
type Registry struct {
	limits  Limits
	dir     string // "" when none
	byName  map[string]*NamedSchema
	docs    map[string]any // parsed, by name
	mu      sync.Mutex
	compile map[string]*jsonschema.Schema // compiled named schemas
}

// NewRegistry loads the built-ins and every *.json file in dir ("" for
// none). A file that is not valid JSON Schema fails the whole load, so an
// operator sees the mistake at startup rather than at first use. lim bounds
// every validation (zero fields take DefaultLimits).
func NewRegistry(dir string, lim Limits) (*Registry, error) {
	lim.defaults()
	r := &Registry{limits: lim, byName: map[string]*NamedSchema{}, docs: map[string]any{}, compile: map[string]*jsonschema.Schema{}}
	builtins, _ := builtinFS.ReadDir("schemas")
	for _, f := range builtins {
		b, _ := builtinFS.ReadFile("schemas/" + f.Name())
		if err := r.add(strings.TrimSuffix(f.Name(), ".json"), "builtin", b); err != nil {
			return nil, err
		}
	}
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		files, err := filepath.Glob(filepath.Join(abs, "*.json"))
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("schemas directory: %w", err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			if err := r.add(strings.TrimSuffix(filepath.Base(f), ".json"), f, b); err != nil {
				return nil, err
			}
		}
		r.dir = abs
	}
	// Compile each now: a broken schema is an operator error.
	for name := range r.byName {
		if _, err := r.named(name, nil); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Registry) add(name, source string, b []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("schema %s (%s): %w: %v", name, source, ErrBadSchema, err)
	}
	desc := ""
	if m, ok := doc.(map[string]any); ok {
		desc, _ = m["description"].(string)
	}
	r.byName[name] = &NamedSchema{Name: name, Description: desc, Source: source, Schema: json.RawMessage(b)}
	r.docs[name] = doc
	return nil
}

// Limits returns the effective limits.
func (r *Registry) Limits() Limits { return r.limits }

// List returns the registered schemas sorted by name.
func (r *Registry) List() []NamedSchema {
	out := make([]NamedSchema, 0, len(r.byName))
	for _, s := range r.byName {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (r *Registry) names() string {
	var n []string
	for _, s := range r.List() {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// compiler returns a compiler that knows every named schema, refuses every
// other URL except files under allowDir (none when ""), and asserts
// formats: a model writing "format": "email" expects it checked. With a
// budget, every schema object it compiles calls the budget when evaluated.
func (r *Registry) compiler(allowDir string, b *budget) (*jsonschema.Compiler, *loader) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if b != nil {
		c.RegisterVocabulary(budgetVocab(b))
		c.AssertVocabs()
	}
	l := &loader{allowDir: allowDir}
	c.UseLoader(l)
	for name, doc := range r.docs {
		if err := c.AddResource(baseURL+name+".json", doc); err != nil {
			panic(err) // only on duplicate URLs, which the map rules out
		}
	}
	return c, l
}

// named compiles a registered schema: once, without a budget (to check it),
// or afresh for each validation with its budget.
func (r *Registry) named(name string, b *budget) (*jsonschema.Schema, error) {
	if _, ok := r.docs[name]; !ok {
		return nil, fmt.Errorf("%w %q: registered schemas are %s (or pass a schema object)", ErrUnknownSchema, name, r.names())
	}
	if b == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if s, ok := r.compile[name]; ok {
			return s, nil
		}
	}
	c, l := r.compiler(r.dir, b)
	s, err := c.Compile(baseURL + name + ".json")
	if err != nil {
		return nil, l.schemaError(name, err)
	}
	if b == nil {
		r.compile[name] = s
	}
	return s, nil
}

// loader resolves $refs the compiler has no resource for: it refuses all
// of them except file URLs inside allowDir, and remembers the first refusal
// (the compiler's error does not wrap it).
type loader struct {
	allowDir string   // host directory of registered schema files ("" for none)
	open     OpenFunc // opens workspace schema files (nil for none)
	openDir  string   // the workspace directory (as a URL) $refs may reach
	refused  error
}

func (l *loader) Load(url string) (any, error) {
	v, err := l.load(url)
	if err != nil && l.refused == nil {
		l.refused = err
	}
	return v, err
}

func (l *loader) load(url string) (any, error) {
	if l.open != nil && strings.HasPrefix(url, workspaceURL) {
		if !strings.HasPrefix(url, l.openDir) {
			return nil, fmt.Errorf("%w: $ref %s leaves the schema's directory", ErrRemoteRef, strings.TrimPrefix(url, workspaceURL))
		}
		rel := strings.TrimPrefix(url, workspaceURL)
		if i := strings.IndexByte(rel, '#'); i >= 0 {
			rel = rel[:i]
		}
		return loadSchemaFile(l.open, rel)
	}
	if l.allowDir != "" && strings.HasPrefix(url, "file://") {
		path, err := jsonschema.FileLoader{}.ToFile(url)
		if err != nil {
			return nil, err
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, fmt.Errorf("%w: $ref %s: %v", ErrRemoteRef, url, err)
		}
		if rel, err := filepath.Rel(l.allowDir, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, fmt.Errorf("%w: $ref %s leaves the schema's directory", ErrRemoteRef, url)
		}
		return jsonschema.FileLoader{}.Load("file://" + real)
	}
	return nil, fmt.Errorf("%w: $ref %s is not fetched (no network, no files outside the schema's directory); inline the referenced schema under $defs, or reference a registered schema by name, e.g. {\"$ref\": \"user.json\"}", ErrRemoteRef, url)
}

// MaxSchemaBytes is the largest schema file read from the workspace.
const MaxSchemaBytes = 1 << 20

// loadSchemaFile reads and decodes the workspace schema file rel through
// open: one descriptor, no symlink followed, at most MaxSchemaBytes.
func loadSchemaFile(open OpenFunc, rel string) (any, error) {
	f, err := open(rel)
	if err != nil {
		return nil, err // the workspace's own class says why
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSchemaBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: schema file %s: %v", ErrInput, rel, noPath(err))
	}
	if len(b) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: schema file %s is larger than %d bytes", ErrTooLarge, rel, MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: schema file %s is not JSON: %v", ErrBadSchema, rel, err)
	}
	return doc, nil
}

// noPath drops the host path from an OS error: what reaches the model names
// workspace paths only.
func noPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// schemaError keeps the reason a schema failed to compile readable.
func (l *loader) schemaError(name string, err error) error {
	if l.refused != nil {
		return fmt.Errorf("schema %s: %w", name, l.refused)
	}
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		var msgs []string
		for _, leaf := range leaves(ve, nil) {
			where := pointer(leaf.InstanceLocation)
			if where == "" {
				where = "the schema's root"
			}
			msgs = append(msgs, where+": "+leaf.ErrorKind.LocalizedString(printer))
		}
		return fmt.Errorf("%w: schema %s is not valid JSON Schema: %s", ErrBadSchema, name, strings.Join(msgs, "; "))
	}
	msg := strings.ReplaceAll(err.Error(), baseURL, "")
	return fmt.Errorf("%w: schema %s: %s", ErrBadSchema, name, msg)
}

// OpenFunc opens a workspace file for reading without following symlinks
// and returns it only if it is a regular file. *workspace.Workspace's
// OpenFile is one.
type OpenFunc func(rel string) (*os.File, error)

// SchemaRef picks the schema to validate against: exactly one of Name (a
// registered schema), Inline (a decoded JSON object) or Path (a schema file
// in the workspace, opened with Open; its $refs may name files in its own
// directory, opened the same way).
type SchemaRef struct {
	Name   string
	Inline any
	Path   string
	Open   OpenFunc
}

// workspaceURL names workspace schema files: "a/s.json" is
// sandpit:///workspace/a/s.json, so relative $refs resolve inside the
// workspace and are loaded through the opener, never by host path.
const workspaceURL = "sandpit:///workspace/"

// Schema compiles the schema ref points at.
func (r *Registry) Schema(ref SchemaRef) (*jsonschema.Schema, error) { return r.schema(ref, nil) }

func (r *Registry) schema(ref SchemaRef, b *budget) (*jsonschema.Schema, error) {
	set := 0
	for _, b := range []bool{ref.Name != "", ref.Inline != nil, ref.Path != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, fmt.Errorf("%w: give exactly one schema: a registered name (%s), an inline schema object, or a schema file", ErrBadSchema, r.names())
	}
	switch {
	case ref.Name != "":
		return r.named(strings.TrimSuffix(ref.Name, ".json"), b)
	case ref.Path != "":
		if ref.Open == nil {
			return nil, fmt.Errorf("%w: a schema file needs a workspace, and there is none: pass the schema inline", ErrBadSchema)
		}
		rel := path.Clean("/" + ref.Path)[1:]
		url := workspaceURL + rel
		doc, err := loadSchemaFile(ref.Open, ref.Path)
		if err != nil {
			return nil, err
		}
		c, l := r.compiler("", b)
		l.open, l.openDir = ref.Open, workspaceURL+path.Dir(rel)+"/"
		if l.openDir == workspaceURL+"./" {
			l.openDir = workspaceURL
		}
		if err := c.AddResource(url, doc); err != nil {
			return nil, l.schemaError(rel, err)
		}
		s, err := c.Compile(url)
		if err != nil {
			return nil, l.schemaError(rel, err)
		}
		return s, nil
	}
	doc := ref.Inline
	if _, ok := doc.(map[string]any); !ok {
		if _, ok := doc.(bool); !ok {
			return nil, fmt.Errorf("%w: an inline schema must be a JSON object (or true/false), got %T", ErrBadSchema, doc)
		}
	}
	// Round-trip so numbers are json.Number, as the validator expects.
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSchema, err)
	}
	doc, _ = jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	const url = baseURL + "inline/schema.json"
	c, l := r.compiler("", b)
	if err := c.AddResource(url, doc); err != nil {
		return nil, l.schemaError("(inline)", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, l.schemaError("(inline)", err)
	}
	return s, nil
}

// JSONError is one place where a document fails its schema.
type JSONError struct {
	// Line is the 1-based line of a JSONL record, 0 for a single document.
	Line             int    `json:"line,omitempty"`
	InstanceLocation string `json:"instance_location" jsonschema:"JSON Pointer to the failing value; empty for the whole document"`
	SchemaLocation   string `json:"schema_location" jsonschema:"JSON Pointer to the failing keyword in the schema"`
	Message          string `json:"message"`
}

// JSONResult is the outcome of validating JSON or JSONL.
type JSONResult struct {
	Valid      bool        `json:"valid"`
	Records    int         `json:"records" jsonschema:"documents validated: 1 for JSON, the non-blank lines for JSONL"`
	Invalid    int         `json:"invalid_records"`
	ErrorCount int         `json:"error_count" jsonschema:"all errors found, including any not listed"`
	Errors     []JSONError `json:"errors"`
	Truncated  bool        `json:"truncated" jsonschema:"true when more errors were found than listed"`
	// Stopped says why a JSONL validation ended before the last line.
	Stopped string `json:"stopped,omitempty" jsonschema:"set when a limit stopped validation before the end: the counts cover only the lines before it"`
}

// DefaultMaxErrors caps listed errors when the caller gives no cap.
const DefaultMaxErrors = 50

// maxMessageBytes bounds one error's message and instance location: a
// message quotes the failing value, which may be megabytes long.
const maxMessageBytes = 512

var printer = message.NewPrinter(language.English)

// ValidateJSON compiles ref and validates data against it, as one JSON
// document or, when jsonl, one document per line, within the registry's
// limits: the time limit for the whole call (and ctx), the size, value
// count and depth of each document, and the heap the validator may take.
// A single document past a limit is an error (ErrTooLarge, ErrTimeout);
// JSONL stops at the line where the time or heap ran out and says so in
// Stopped.
func (r *Registry) ValidateJSON(ctx context.Context, ref SchemaRef, data io.Reader, jsonl bool, maxErrors int) (*JSONResult, error) {
	lim := r.limits
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	b := &budget{ctx: ctx, maxHeap: uint64(lim.MaxHeapBytes)}
	defer context.AfterFunc(ctx, func() { b.done.Store(true) })()
	s, err := r.schema(ref, b)
	if err != nil {
		return nil, err
	}
	v := &jsonValidation{s: s, b: b, lim: lim, res: newJSONResult(min(maxErrors, lim.MaxErrors))}
	if jsonl {
		return v.lines(data)
	}
	return v.document(data)
}

// jsonValidation is one ValidateJSON call.
type jsonValidation struct {
	s   *jsonschema.Schema
	b   *budget
	lim Limits
	res *jsonRun
}

func (v *jsonValidation) document(data io.Reader) (*JSONResult, error) {
	max := v.lim.MaxDocumentBytes
	b, err := io.ReadAll(io.LimitReader(data, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInput, noPath(err))
	}
	if len(b) > max {
		return nil, sandpit.WithHint(fmt.Errorf("%w: the document is larger than %d bytes", ErrTooLarge, max), "validate it as JSONL, one record per line, or a part of it")
	}
	if err := v.check(b, 0); err != nil {
		return nil, err
	}
	return v.res.done(), nil
}

func (v *jsonValidation) lines(data io.Reader) (*JSONResult, error) {
	sc := bufio.NewScanner(data)
	sc.Buffer(make([]byte, 64<<10), v.lim.MaxDocumentBytes)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if err := v.check(sc.Bytes(), line); err != nil {
			if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrTooLarge) {
				return nil, err
			}
			v.res.Records--
			v.res.Stopped = fmt.Sprintf("stopped at line %d: %v; the counts cover the lines before it", line, err)
			return v.res.done(), nil
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			v.res.add(JSONError{Line: line + 1, Message: fmt.Sprintf("line is longer than %d bytes; JSONL needs one document per line", v.lim.MaxDocumentBytes)})
			return v.res.done(), nil
		}
		return nil, fmt.Errorf("%w: %v", ErrInput, noPath(err))
	}
	return v.res.done(), nil
}

// check validates one document. It returns an error only when a limit
// stopped it; the document's own failures go into the result.
func (v *jsonValidation) check(b []byte, line int) error {
	r := v.res
	r.Records++
	doc, err := decodeLimited(bytes.NewReader(b), v.lim.MaxValues, v.lim.MaxDepth)
	if errors.Is(err, ErrTooLarge) {
		if line == 0 {
			return sandpit.WithHint(fmt.Errorf("%w", err), "validate it as JSONL, one record per line, or a part of it")
		}
		r.Invalid++
		r.add(JSONError{Line: line, Message: err.Error()})
		return nil
	}
	if err != nil {
		r.Invalid++
		r.add(JSONError{Line: line, Message: "not valid JSON: " + syntaxMessage(b, err)})
		return nil
	}
	err, stop := v.b.run(v.s, doc)
	switch {
	case errors.Is(stop, errHeap):
		return sandpit.WithHint(fmt.Errorf("%w: the document fails in so many places that checking it needs more than %d MiB", ErrTooLarge, v.lim.MaxHeapBytes>>20), "validate a part of it, or JSONL records one by one")
	case stop != nil:
		return sandpit.WithHint(fmt.Errorf("%w: validation took longer than %s", ErrTimeout, v.lim.Timeout), "validate a part of it, or simplify the schema")
	case err == nil:
		return nil
	}
	r.Invalid++
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		r.add(JSONError{Line: line, Message: truncate(err.Error())})
		return nil
	}
	for _, leaf := range leaves(ve, nil) {
		if !r.listing() {
			r.add(JSONError{}) // counted, not listed: not worth formatting
			continue
		}
		inst := truncate(pointer(leaf.InstanceLocation))
		where := "the document"
		if inst != "" {
			where = inst
		}
		r.add(JSONError{
			Line:             line,
			InstanceLocation: inst,
			SchemaLocation:   truncate(schemaLocation(leaf)),
			Message:          truncate(where + ": " + leaf.ErrorKind.LocalizedString(printer)),
		})
	}
	return nil
}

// truncate bounds a message or location at maxMessageBytes.
func truncate(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	cut := maxMessageBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d more bytes)", len(s)-cut)
}

type jsonRun struct {
	JSONResult
	max int
}

func newJSONResult(maxErrors int) *jsonRun {
	if maxErrors <= 0 {
		maxErrors = DefaultMaxErrors
	}
	return &jsonRun{JSONResult: JSONResult{Errors: []JSONError{}}, max: maxErrors}
}

// listing reports whether the next error is listed.
func (r *jsonRun) listing() bool { return len(r.Errors) < r.max }

func (r *jsonRun) add(e JSONError) {
	r.ErrorCount++
	if r.listing() {
		r.Errors = append(r.Errors, e)
	} else {
		r.Truncated = true
	}
}

func (r *jsonRun) done() *JSONResult {
	r.Valid = r.ErrorCount == 0 && r.Stopped == ""
	return &r.JSONResult
}

// leaves returns the innermost errors, which name the failing keywords.
func leaves(e *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return append(out, e)
	}
	for _, c := range e.Causes {
		out = leaves(c, out)
	}
	return out
}

// schemaLocation is the failing keyword as a pointer into the schema,
// prefixed by the schema file for named and file schemas.
func schemaLocation(e *jsonschema.ValidationError) string {
	loc := e.SchemaURL + pointer(e.ErrorKind.KeywordPath())
	loc = strings.TrimPrefix(loc, baseURL+"inline/schema.json")
	loc = strings.TrimPrefix(loc, workspaceURL)
	loc = strings.TrimPrefix(loc, baseURL)
	if i := strings.LastIndex(loc, "/"); strings.HasPrefix(loc, "file://") && i >= 0 {
		// A schema file: keep its base name, not the host path.
		if h := strings.Index(loc, "#"); h >= 0 {
			loc = filepath.Base(loc[:h]) + loc[h:]
		}
	}
	if !strings.Contains(loc, "#") && strings.HasPrefix(loc, "/") {
		loc = "#" + loc
	}
	return loc
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

// syntaxMessage adds a line and column to a JSON syntax error.
func syntaxMessage(b []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) && se.Offset > 0 && int(se.Offset) <= len(b) {
		before := b[:se.Offset]
		line := bytes.Count(before, []byte("\n")) + 1
		col := int(se.Offset) - bytes.LastIndexByte(before, '\n') - 1
		return fmt.Sprintf("%v (line %d, column %d)", se, line, col)
	}
	return err.Error()
}
