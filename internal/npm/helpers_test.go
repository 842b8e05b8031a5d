package npm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// tpkg is one version a test registry serves.
type tpkg struct {
	name, version  string
	deps, optional map[string]string
	peer           map[string]string
	deprecated     string
	installScript  bool
	sha1Only       bool   // publish a shasum and no integrity
	badIntegrity   bool   // publish an integrity the bytes do not have
	tarballURL     string // link here instead of the registry's own URL
}

// tarEntry is one entry of a tarball a test builds.
type tarEntry struct {
	name     string
	body     string
	typ      byte // 0: a regular file
	mode     int64
	linkname string
	pax      map[string]string
	size     int64 // when set, the header's size instead of len(body)
}

// buildTgz gzips a tar of entries.
func buildTgz(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if e.typ == tar.TypeXGlobalHeader {
			if err := tw.WriteHeader(&tar.Header{Typeflag: e.typ, Name: e.name, PAXRecords: e.pax}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.linkname, PAXRecords: e.pax, ModTime: time.Unix(499162500, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("header %q: %v", e.name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil && e.size == 0 {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil && !strings.Contains(err.Error(), "missed writing") {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// packageTgz is the tarball of p as npm packs it.
func packageTgz(t testing.TB, p *tpkg) []byte {
	pj, _ := json.Marshal(map[string]any{"name": p.name, "version": p.version, "dependencies": p.deps})
	return buildTgz(t, []tarEntry{
		{name: "package/package.json", body: string(pj)},
		{name: "package/index.js", body: fmt.Sprintf("module.exports = %q;\n", p.name+"@"+p.version)},
		{name: "package/bin/run", body: "#!/usr/bin/env node\n", mode: 0o755},
	})
}

func sri(b []byte) string {
	s := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(s[:])
}

// testRegistry is an npm registry on loopback serving what a test built.
type testRegistry struct {
	t        testing.TB
	srv      *httptest.Server
	mu       sync.Mutex
	pkgs     map[string][]*tpkg
	latest   map[string]string
	tarballs map[string][]byte // by URL path
	hits     map[string]int    // requests by URL path
	accept   string            // the last packument request's Accept
	// handler, when set, answers everything; set it with setHandler.
	handler http.Handler
}

func newRegistry(t testing.TB, pkgs ...*tpkg) *testRegistry {
	t.Helper()
	reg := &testRegistry{t: t, pkgs: map[string][]*tpkg{}, latest: map[string]string{}, tarballs: map[string][]byte{}, hits: map[string]int{}}
	for _, p := range pkgs {
		reg.pkgs[p.name] = append(reg.pkgs[p.name], p)
	}
	reg.srv = httptest.NewServer(http.HandlerFunc(reg.serve))
	t.Cleanup(reg.srv.Close)
	return reg
}

func (reg *testRegistry) setHandler(h http.Handler) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	reg.handler = h
}

func (reg *testRegistry) client() *Client { return &Client{BaseURL: reg.srv.URL + "/"} }

func (reg *testRegistry) hit(path string) int {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.hits[path]
}

func tarballPath(p *tpkg) string {
	base := p.name[strings.LastIndex(p.name, "/")+1:]
	return "/" + p.name + "/-/" + base + "-" + p.version + ".tgz"
}

func (reg *testRegistry) serve(w http.ResponseWriter, r *http.Request) {
	reg.mu.Lock()
	reg.hits[r.URL.Path]++
	h := reg.handler
	reg.mu.Unlock()
	if h != nil {
		h.ServeHTTP(w, r)
		return
	}
	if strings.Contains(r.URL.Path, "/-/") {
		reg.mu.Lock()
		b, ok := reg.tarballs[r.URL.Path]
		reg.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	if strings.HasPrefix(name, "@") && !strings.Contains(r.URL.RawPath, "%2f") && !strings.Contains(r.URL.RawPath, "%2F") {
		http.Error(w, "scoped names are asked for as @scope%2fname", http.StatusBadRequest)
		return
	}
	reg.mu.Lock()
	reg.accept = r.Header.Get("Accept")
	reg.mu.Unlock()
	b, ok := reg.packument(name)
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.npm.install-v1+json")
	w.Write(b)
}

// packument builds the abbreviated packument of name, and the tarballs.
func (reg *testRegistry) packument(name string) ([]byte, bool) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	vs, ok := reg.pkgs[name]
	if !ok {
		return nil, false
	}
	versions := map[string]any{}
	latest := ""
	for _, p := range vs {
		tgz := packageTgz(reg.t, p)
		reg.tarballs[tarballPath(p)] = tgz
		sha := sha1.Sum(tgz)
		dist := map[string]any{"shasum": hex.EncodeToString(sha[:]), "tarball": reg.srv.URL + tarballPath(p), "unpackedSize": 123}
		if p.tarballURL != "" {
			dist["tarball"] = p.tarballURL
		}
		switch {
		case p.badIntegrity:
			dist["integrity"] = sri([]byte("other bytes"))
		case !p.sha1Only:
			dist["integrity"] = sri(tgz)
		}
		v := map[string]any{"name": p.name, "version": p.version, "dist": dist}
		if p.deps != nil {
			v["dependencies"] = p.deps
		}
		if p.optional != nil {
			v["optionalDependencies"] = p.optional
		}
		if p.peer != nil {
			v["peerDependencies"] = p.peer
		}
		if p.deprecated != "" {
			v["deprecated"] = p.deprecated
		}
		if p.installScript {
			v["hasInstallScript"] = true
		}
		versions[p.version] = v
		latest = p.version // the last listed, unless set
	}
	if l, ok := reg.latest[name]; ok {
		latest = l
	}
	b, _ := json.Marshal(map[string]any{"name": name, "dist-tags": map[string]string{"latest": latest}, "versions": versions, "modified": "2024-01-01T00:00:00.000Z"})
	return b, true
}

func mustSpecs(t testing.TB, ss ...string) []Spec {
	t.Helper()
	var out []Spec
	for _, s := range ss {
		sp, err := ParseSpec(s)
		if err != nil {
			t.Fatalf("ParseSpec(%q): %v", s, err)
		}
		out = append(out, sp)
	}
	return out
}

// planText is a plan as "path name@version [required by]" lines.
func planText(p *Plan) string {
	var b strings.Builder
	for _, pk := range p.Packages {
		fmt.Fprintf(&b, "%s %s@%s %v\n", pk.Path, pk.Name, pk.Version, pk.RequiredBy)
	}
	return b.String()
}

func writeTemp(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// paxRenamed is a tarball whose entry "package/innocent.js" a local PAX
// header renames to path, hand-made: archive/tar's writer puts the
// header's own name in the record instead.
func paxRenamed(t testing.TB, path string) []byte {
	t.Helper()
	rec := " path=" + path + "\n"
	n := len(rec)
	for len(fmt.Sprint(n+len(fmt.Sprint(n)))) != len(fmt.Sprint(n)) {
		n++
	}
	rec = fmt.Sprint(n+len(fmt.Sprint(n))) + rec
	var hdr [512]byte
	copy(hdr[0:], "PaxHeaders/innocent.js")
	copy(hdr[100:], "0000644\x00")
	copy(hdr[108:], "0000000\x00")
	copy(hdr[116:], "0000000\x00")
	copy(hdr[124:], fmt.Sprintf("%011o\x00", len(rec)))
	copy(hdr[136:], "00000000000\x00")
	hdr[156] = tar.TypeXHeader
	copy(hdr[257:], "ustar\x0000")
	copy(hdr[148:156], "        ")
	sum := 0
	for _, b := range hdr {
		sum += int(b)
	}
	copy(hdr[148:], fmt.Sprintf("%06o\x00 ", sum))
	body := make([]byte, (len(rec)+511)/512*512)
	copy(body, rec)

	var rest bytes.Buffer
	tw := tar.NewWriter(&rest)
	for _, e := range []tarEntry{{name: "package/innocent.js", body: "pwned"}, {name: "package/package.json", body: `{}`}} {
		tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatUSTAR})
		tw.Write([]byte(e.body))
	}
	tw.Close()
	raw := append(append(hdr[:], body...), rest.Bytes()...)
	return gzipped(t, raw)
}
