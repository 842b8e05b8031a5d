// Package pypitest serves a PEP 691 (JSON) simple index on loopback with
// wheels it builds, for tests and for `sandpit bench`: a real index a
// server can be pointed at, where no public one is reachable.
package pypitest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Index is a PEP 691 index on 127.0.0.1.
type Index struct {
	srv   *http.Server
	ln    net.Listener
	mu    sync.Mutex
	files map[string][]file // project → files
	blobs map[string][]byte // filename → bytes
	stall map[string]chan struct{}
}

type file struct {
	Filename string            `json:"filename"`
	URL      string            `json:"url"`
	Hashes   map[string]string `json:"hashes"`
	Size     int               `json:"size"`
}

// NewIndex starts an empty index.
func NewIndex() (*Index, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ix := &Index{ln: ln, files: map[string][]file{}, blobs: map[string][]byte{}, stall: map[string]chan struct{}{}}
	ix.srv = &http.Server{Handler: http.HandlerFunc(ix.serve)}
	go ix.srv.Serve(ln)
	return ix, nil
}

// URL is the index's simple API root.
func (ix *Index) URL() string { return "http://" + ix.ln.Addr().String() + "/simple/" }

// Close stops the index.
func (ix *Index) Close() error { return ix.srv.Close() }

func (ix *Index) serve(w http.ResponseWriter, r *http.Request) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	switch {
	case strings.HasPrefix(r.URL.Path, "/simple/"):
		name := strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/")
		files, ok := ix.files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
		json.NewEncoder(w).Encode(map[string]any{"meta": map[string]string{"api-version": "1.1"}, "name": name, "files": files})
	case strings.HasPrefix(r.URL.Path, "/files/"):
		name := strings.TrimPrefix(r.URL.Path, "/files/")
		b, ok := ix.blobs[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if ch := ix.stall[name]; ch != nil {
			// Half the file, then nothing until Release or the client
			// goes: an index that answers slowly.
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.Write(b[:len(b)/2])
			w.(http.Flusher).Flush()
			ix.mu.Unlock()
			select {
			case <-ch:
			case <-r.Context().Done():
			}
			ix.mu.Lock()
			return
		}
		w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

// Add serves data as filename of project; published, when not "", is the
// sha256 the index claims instead of the real one (an index that lies).
func (ix *Index) Add(project, filename string, data []byte, published string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if published == "" {
		s := sha256.Sum256(data)
		published = hex.EncodeToString(s[:])
	}
	ix.files[project] = append(ix.files[project], file{Filename: filename, URL: "../../files/" + filename, Hashes: map[string]string{"sha256": published}, Size: len(data)})
	ix.blobs[filename] = data
}

// Stall makes downloads of filename send half the file and then wait
// until Release (or the client gives up).
func (ix *Index) Stall(filename string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.stall[filename] = make(chan struct{})
}

// Release ends Stall of filename.
func (ix *Index) Release(filename string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ch := ix.stall[filename]; ch != nil {
		close(ch)
		delete(ix.stall, filename)
	}
}

// AddWheel builds a wheel (see Wheel) and serves it.
func (ix *Index) AddWheel(name, version string, requires []string, files map[string][]byte) error {
	fn, data, err := Wheel(name, version, requires, files)
	if err != nil {
		return err
	}
	ix.Add(name, fn, data, "")
	return nil
}

// Wheel builds a py3-none-any wheel of name (a normalized project name)
// with METADATA (its Requires-Dist), WHEEL, files and a RECORD hashing
// each, as an installer checks it.
func Wheel(name, version string, requires []string, files map[string][]byte) (filename string, data []byte, err error) {
	dist := strings.ReplaceAll(name, "-", "_")
	info := dist + "-" + version + ".dist-info/"
	md := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version)
	for _, r := range requires {
		md += "Requires-Dist: " + r + "\n"
	}
	all := map[string][]byte{
		info + "METADATA": []byte(md),
		info + "WHEEL":    []byte("Wheel-Version: 1.0\nGenerator: sandpit-pypitest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
	}
	for k, v := range files {
		all[k] = v
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var record strings.Builder
	for _, path := range names {
		w, err := z.Create(path)
		if err != nil {
			return "", nil, err
		}
		w.Write(all[path])
		s := sha256.Sum256(all[path])
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", path, base64.RawURLEncoding.EncodeToString(s[:]), len(all[path]))
	}
	record.WriteString(info + "RECORD,,\n")
	w, err := z.Create(info + "RECORD")
	if err != nil {
		return "", nil, err
	}
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s-%s-py3-none-any.whl", dist, version), buf.Bytes(), nil
}
