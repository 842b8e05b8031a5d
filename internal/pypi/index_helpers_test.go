package pypi

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
)

// pkg describes a wheel (or sdist) a test index serves.
type pkg struct {
	name, version  string
	tag            string   // wheel tag, default py3-none-any
	requires       []string // Requires-Dist
	extras         []string // Provides-Extra
	requiresPython string   // in METADATA and on the index
	yanked         bool
	sdist          bool   // serve name-version.tar.gz instead of a wheel
	noMetadata     bool   // no PEP 658 metadata file: the resolver reads the wheel
	hideRP         bool   // Requires-Python in METADATA only, not on the index
	badHash        bool   // publish a hash the bytes do not have
	noHash         bool   // publish no sha256
	url            string // link to this URL instead of the index's own
}

// wheel builds a real wheel in memory: METADATA, WHEEL, a module and
// RECORD with sha256 of each file.
func buildWheel(t testing.TB, p pkg) (filename string, data, metadata []byte) {
	t.Helper()
	tag := p.tag
	if tag == "" {
		tag = "py3-none-any"
	}
	dist := strings.ReplaceAll(Normalize(p.name), "-", "_")
	filename = fmt.Sprintf("%s-%s-%s.whl", dist, p.version, tag)
	var md strings.Builder
	fmt.Fprintf(&md, "Metadata-Version: 2.1\nName: %s\nVersion: %s\n", p.name, p.version)
	if p.requiresPython != "" {
		fmt.Fprintf(&md, "Requires-Python: %s\n", p.requiresPython)
	}
	for _, x := range p.extras {
		fmt.Fprintf(&md, "Provides-Extra: %s\n", x)
	}
	for _, r := range p.requires {
		fmt.Fprintf(&md, "Requires-Dist: %s\n", r)
	}
	md.WriteString("\nA test package.\n\nRequires-Dist: not-a-header\n")
	info := fmt.Sprintf("%s-%s.dist-info", dist, p.version)
	files := []zipFile{
		{name: dist + "/__init__.py", body: fmt.Sprintf("VERSION = %q\n", p.version)},
		{name: info + "/METADATA", body: md.String()},
		{name: info + "/WHEEL", body: "Wheel-Version: 1.0\nGenerator: pypi_test\nRoot-Is-Purelib: true\nTag: " + tag + "\n"},
	}
	files = append(files, zipFile{name: info + "/RECORD", body: record(files, info+"/RECORD")})
	return filename, buildZip(t, files), []byte(md.String())
}

type zipFile struct {
	name   string
	body   string
	mode   fs.FileMode // 0: 0644 regular file
	store  bool        // no compression
	extern uint32      // raw external attributes, when set
}

func buildZip(t testing.TB, files []zipFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate}
		if f.store {
			h.Method = zip.Store
		}
		mode := f.mode
		if mode == 0 {
			mode = 0o644
		}
		h.SetMode(mode)
		if f.extern != 0 {
			h.ExternalAttrs = f.extern
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// record is a RECORD for files, listing itself without a hash.
func record(files []zipFile, self string) string {
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f.name, "/") {
			continue // directories are not listed
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&b, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&b, "%s,,\n", self)
	return b.String()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// served is one file of the test index.
type served struct {
	p                 pkg
	filename          string
	data, metadata    []byte
	published, mdHash string
}

// testIndex is a PEP 503/691 index on loopback serving what a test built.
type testIndex struct {
	t        testing.TB
	json     bool
	srv      *httptest.Server
	mu       sync.Mutex
	projects map[string][]*served
	files    map[string]*served
	requests int
	pages    map[string]int
	// page, when set, answers for a project page instead of the index;
	// handler, when set, answers everything. Set them with setPage and
	// setHandler: the server is already running.
	page    http.HandlerFunc
	handler http.Handler
}

func (ix *testIndex) setPage(h http.HandlerFunc) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.page = h
}

func (ix *testIndex) setHandler(h http.Handler) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.handler = h
}

func newIndex(t testing.TB, asJSON bool, pkgs ...pkg) *testIndex {
	t.Helper()
	ix := &testIndex{t: t, json: asJSON, projects: map[string][]*served{}, files: map[string]*served{}, pages: map[string]int{}}
	for _, p := range pkgs {
		ix.add(p)
	}
	ix.srv = httptest.NewServer(http.HandlerFunc(ix.serve))
	t.Cleanup(ix.srv.Close)
	return ix
}

func (ix *testIndex) add(p pkg) {
	s := &served{p: p}
	if p.sdist {
		s.filename = fmt.Sprintf("%s-%s.tar.gz", p.name, p.version)
		s.data = []byte("not really a tarball: " + s.filename)
	} else {
		s.filename, s.data, s.metadata = buildWheel(ix.t, p)
	}
	s.published = sha(s.data)
	if p.badHash {
		s.published = sha([]byte("something else"))
	}
	if s.metadata != nil {
		s.mdHash = sha(s.metadata)
	}
	n := Normalize(p.name)
	ix.projects[n] = append(ix.projects[n], s)
	ix.files[s.filename] = s
}

func (ix *testIndex) client() *Client {
	return &Client{BaseURL: ix.srv.URL + "/simple/"}
}

func (ix *testIndex) count() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.requests
}

func (ix *testIndex) serve(w http.ResponseWriter, r *http.Request) {
	ix.mu.Lock()
	ix.requests++
	page, handler := ix.page, ix.handler
	ix.mu.Unlock()
	if handler != nil {
		handler.ServeHTTP(w, r)
		return
	}
	ix.serveIndex(w, r, page)
}

func (ix *testIndex) serveIndex(w http.ResponseWriter, r *http.Request, page http.HandlerFunc) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/simple/"):
		name := strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/")
		ix.mu.Lock()
		ix.pages[name]++
		ix.mu.Unlock()
		if page != nil {
			page(w, r)
			return
		}
		files, ok := ix.projects[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if ix.json && strings.Contains(r.Header.Get("Accept"), "application/vnd.pypi.simple.v1+json") {
			ix.serveJSON(w, name, files)
		} else {
			ix.serveHTML(w, name, files)
		}
	case strings.HasPrefix(r.URL.Path, "/files/"):
		fn := strings.TrimPrefix(r.URL.Path, "/files/")
		if s, ok := ix.files[strings.TrimSuffix(fn, ".metadata")]; ok && strings.HasSuffix(fn, ".metadata") && !s.p.noMetadata && s.metadata != nil {
			w.Write(s.metadata)
			return
		}
		s, ok := ix.files[fn]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(s.data)
	default:
		http.NotFound(w, r)
	}
}

func (ix *testIndex) href(s *served) string {
	if s.p.url != "" {
		return s.p.url
	}
	return "../../files/" + s.filename // relative: resolved against the page
}

func (ix *testIndex) serveJSON(w http.ResponseWriter, name string, files []*served) {
	type jf struct {
		Filename       string            `json:"filename"`
		URL            string            `json:"url"`
		Hashes         map[string]string `json:"hashes"`
		RequiresPython *string           `json:"requires-python,omitempty"`
		Yanked         any               `json:"yanked"`
		CoreMetadata   any               `json:"core-metadata"`
		Size           int               `json:"size"`
	}
	var out []jf
	for _, s := range files {
		f := jf{Filename: s.filename, URL: ix.href(s), Hashes: map[string]string{}, Yanked: false, CoreMetadata: false, Size: len(s.data)}
		if !s.p.noHash {
			f.Hashes["sha256"] = s.published
		}
		if s.p.requiresPython != "" && !s.p.hideRP {
			rp := s.p.requiresPython
			f.RequiresPython = &rp
		}
		if s.p.yanked {
			f.Yanked = "broken release"
		}
		if !s.p.noMetadata && s.metadata != nil {
			f.CoreMetadata = map[string]string{"sha256": s.mdHash}
		}
		out = append(out, f)
	}
	w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
	json.NewEncoder(w).Encode(map[string]any{"meta": map[string]string{"api-version": "1.1"}, "name": name, "files": out})
}

func (ix *testIndex) serveHTML(w http.ResponseWriter, name string, files []*served) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>Links for %s</title></head><body>\n<h1>Links for %s</h1>\n<!-- <a href=\"/files/commented-out.whl\">x</a> -->\n", name, name)
	sorted := append([]*served(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].filename < sorted[j].filename })
	for _, s := range sorted {
		href := ix.href(s)
		if !s.p.noHash {
			href += "#sha256=" + s.published
		}
		attrs := ""
		if s.p.requiresPython != "" && !s.p.hideRP {
			attrs += fmt.Sprintf(` data-requires-python="%s"`, html.EscapeString(s.p.requiresPython))
		}
		if s.p.yanked {
			attrs += ` data-yanked="broken release"`
		}
		if !s.p.noMetadata && s.metadata != nil {
			attrs += fmt.Sprintf(` data-dist-info-metadata="sha256=%s" data-core-metadata='sha256=%s'`, s.mdHash, s.mdHash)
		}
		fmt.Fprintf(w, "<A HREF=\"%s\"%s>%s</A><br/>\n", html.EscapeString(href), attrs, s.filename)
	}
	fmt.Fprint(w, "</body></html>\n")
}

func mustReq(t testing.TB, ss ...string) []Requirement {
	t.Helper()
	var out []Requirement
	for _, s := range ss {
		r, err := ParseRequirement(s)
		if err != nil {
			t.Fatalf("ParseRequirement(%q): %v", s, err)
		}
		out = append(out, r)
	}
	return out
}

func target(t testing.TB) Target {
	t.Helper()
	tg, err := LinuxTarget("3.11.9", "2.35", "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// flavours runs f against a JSON and an HTML index.
func flavours(t *testing.T, f func(t *testing.T, asJSON bool)) {
	for _, asJSON := range []bool{true, false} {
		name := "html"
		if asJSON {
			name = "json"
		}
		t.Run(name, func(t *testing.T) { f(t, asJSON) })
	}
}
