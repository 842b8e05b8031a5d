package pypi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

func TestFiles(t *testing.T) {
	flavours(t, func(t *testing.T, asJSON bool) {
		ix := newIndex(t, asJSON,
			pkg{name: "Demo.Pkg", version: "1.0", requiresPython: ">=3.8"},
			pkg{name: "Demo.Pkg", version: "1.1", yanked: true, noMetadata: true},
			pkg{name: "Demo.Pkg", version: "1.2", sdist: true},
			pkg{name: "Demo.Pkg", version: "1.3", noHash: true},
			pkg{name: "Demo.Pkg", version: "1.4", url: "https://evil.example/files/demo_pkg-1.4-py3-none-any.whl"},
			pkg{name: "Demo.Pkg", version: "1.5", url: "ftp://" + "127.0.0.1/demo_pkg-1.5-py3-none-any.whl"},
		)
		files, err := ix.client().Files(t.Context(), "demo_pkg")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]File{}
		for _, f := range files {
			got[f.Version.String()] = f
		}
		if len(got) != 6 {
			t.Fatalf("got %d files: %+v", len(files), files)
		}
		f := got["1.0"]
		if f.Refused != "" || f.Kind != KindWheel || f.RequiresPython != ">=3.8" || f.Yanked || f.MetadataSHA256 == "" || f.SHA256 != sha(ix.files[f.Filename].data) {
			t.Errorf("1.0: %+v", f)
		}
		if want := ix.srv.URL + "/files/demo_pkg-1.0-py3-none-any.whl"; f.URL != want {
			t.Errorf("URL %s, want %s (resolved against the page)", f.URL, want)
		}
		if f := got["1.1"]; !f.Yanked || f.YankedReason != "broken release" || f.MetadataSHA256 != "" || f.Refused != "" {
			t.Errorf("1.1: %+v", f)
		}
		if f := got["1.2"]; f.Kind != KindSdist || f.Refused != "" {
			t.Errorf("1.2: %+v", f)
		}
		for v, want := range map[string]string{"1.3": "no sha256", "1.4": `on host "evil.example", not the index's`, "1.5": `scheme is "ftp"`} {
			if f := got[v]; !strings.Contains(f.Refused, want) {
				t.Errorf("%s refused %q, want %q", v, f.Refused, want)
			}
		}
	})
}

func TestFilesAllowHosts(t *testing.T) {
	ix := newIndex(t, true, pkg{name: "m", version: "1.0", url: "https://mirror.example/m-1.0-py3-none-any.whl"})
	c := ix.client()
	c.AllowHosts = []string{"mirror.example"}
	files, err := c.Files(t.Context(), "m")
	if err != nil || len(files) != 1 || files[0].Refused != "" {
		t.Fatalf("Files = %+v, %v", files, err)
	}
}

func TestFilesRefusesHostilePages(t *testing.T) {
	wheel := "x-1.0-py3-none-any.whl"
	hash := strings.Repeat("a", 64)
	tests := []struct {
		name        string
		contentType string
		body        string
		want        error
		say         string
	}{
		{"JSON of another project", "application/vnd.pypi.simple.v1+json",
			`{"meta":{"api-version":"1.0"},"name":"other","files":[]}`, ErrBadIndex, "page of \"other\""},
		{"JSON of an unknown major version", "application/vnd.pypi.simple.v1+json",
			`{"meta":{"api-version":"2.0"},"name":"x","files":[]}`, ErrBadIndex, "API version"},
		{"malformed JSON", "application/vnd.pypi.simple.v1+json", `{"meta":`, ErrBadIndex, "not PEP 691 JSON"},
		{"too many files (JSON)", "application/vnd.pypi.simple.v1+json",
			`{"meta":{"api-version":"1.0"},"name":"x","files":[{},{},{},{}]}`, ErrTooLarge, "4 files for x, over the 3-file limit"},
		{"too many files (HTML)", "text/html", strings.Repeat(`<a href="x.whl">x</a>`, 4), ErrTooLarge, "over 3 files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex(t, true)
			ix.setPage(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				fmt.Fprint(w, tt.body)
			})
			c := ix.client()
			c.MaxFiles = 3
			_, err := c.Files(t.Context(), "x")
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("Files = %v, want %v saying %q", err, tt.want, tt.say)
			}
		})
	}
	t.Run("HTML entries each refused", func(t *testing.T) {
		ix := newIndex(t, false)
		ix.setPage(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<a href="/f/%[1]s#md5=abc">%[1]s</a>
<a href="/f/y-1.0-py3-none-any.whl#sha256=%[2]s">y-1.0-py3-none-any.whl</a>
<a href="/f/other.whl#sha256=%[2]s">%[1]s</a>
<a href="javascript:alert(1)">%[1]s</a>
<a href="/f/x-1.0.exe#sha256=%[2]s">x-1.0.exe</a>
<a href='/f/%[1]s#sha256=%[2]s' data-requires-python='&gt;=3.7'><b>%[1]s</b></a>`, wheel, hash)
		})
		files, err := ix.client().Files(t.Context(), "x")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"no sha256", "a wheel of y, not x", "another file", `scheme is "javascript"`, "neither a wheel nor an sdist", ""}
		if len(files) != len(want) {
			t.Fatalf("%d files, want %d: %+v", len(files), len(want), files)
		}
		for i, f := range files {
			if want[i] == "" && f.Refused != "" || !strings.Contains(f.Refused, want[i]) {
				t.Errorf("file %d refused %q, want %q", i, f.Refused, want[i])
			}
		}
		if last := files[len(files)-1]; last.RequiresPython != ">=3.7" || last.Filename != wheel || last.SHA256 != hash {
			t.Errorf("last file %+v", last)
		}
	})
}

func TestFilesNotFound(t *testing.T) {
	ix := newIndex(t, true)
	_, err := ix.client().Files(t.Context(), "nope")
	if !errors.Is(err, ErrNoProject) || !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("Files = %v, want ErrNoProject", err)
	}
}

func TestFilesInvalidName(t *testing.T) {
	ix := newIndex(t, true)
	for _, name := range []string{"../etc", "a/b", "x\x00", "", strings.Repeat("a", 101)} {
		if _, err := ix.client().Files(t.Context(), name); !errors.Is(err, ErrInvalidRequirement) {
			t.Errorf("Files(%q) = %v, want ErrInvalidRequirement", name, err)
		}
	}
	if n := ix.count(); n != 0 {
		t.Errorf("%d requests reached the index", n)
	}
}

func TestNotConfigured(t *testing.T) {
	_, err := (&Client{}).Files(t.Context(), "x")
	if !errors.Is(err, ErrNotConfigured) || !strings.Contains(sandpit.HintOf(err), "--package-source python=URL") {
		t.Fatalf("Files = %v (hint %q)", err, sandpit.HintOf(err))
	}
	_, err = (&Client{BaseURL: "file:///srv/simple"}).Files(t.Context(), "x")
	if !errors.Is(err, ErrNotConfigured) {
		t.Fatalf("a file: index = %v", err)
	}
}

// The index blocks until the request gives up: the client's timeout ends
// the call with ErrUnavailable, long before the generous bound.
func TestSlowIndex(t *testing.T) {
	ix := newIndex(t, true)
	ix.setPage(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c := ix.client()
	c.Timeout = 200 * time.Millisecond
	start := time.Now()
	_, err := c.Files(t.Context(), "x")
	if !errors.Is(err, ErrIndexUnavailable) || !errors.Is(err, sandpit.ErrUnavailable) || !strings.Contains(err.Error(), "within 200ms") {
		t.Fatalf("Files = %v, want ErrIndexUnavailable after the timeout", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("took %s", d)
	}
}

// The body stalls after the headers: the timeout covers reading it too.
func TestSlowIndexBody(t *testing.T) {
	ix := newIndex(t, true)
	ix.setPage(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := ix.client()
	c.Timeout = 200 * time.Millisecond
	if _, err := c.Files(t.Context(), "x"); !errors.Is(err, ErrIndexUnavailable) {
		t.Fatalf("Files = %v, want ErrIndexUnavailable", err)
	}
}

func TestCallerCancels(t *testing.T) {
	ix := newIndex(t, true)
	ctx, cancel := context.WithCancel(t.Context())
	ix.setPage(func(w http.ResponseWriter, r *http.Request) {
		cancel()
		<-r.Context().Done()
	})
	if _, err := ix.client().Files(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Files = %v, want context.Canceled", err)
	}
}

func TestIndexDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := (&Client{BaseURL: url + "/simple/"}).Files(t.Context(), "x")
	if !errors.Is(err, ErrIndexUnavailable) {
		t.Fatalf("Files = %v, want ErrIndexUnavailable", err)
	}
	ix := newIndex(t, true)
	ix.setPage(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	if _, err := ix.client().Files(t.Context(), "x"); !errors.Is(err, ErrIndexUnavailable) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Files = %v, want ErrIndexUnavailable naming 503", err)
	}
}

// A page one byte over the bound is refused, whether its length is
// declared or not; one at the bound is read.
func TestPageBound(t *testing.T) {
	const limit = 64 << 10
	page := func(n int) string {
		return `<a href="/files/x-1.0-py3-none-any.whl#sha256=` + strings.Repeat("a", 64) + `">x-1.0-py3-none-any.whl</a>` +
			strings.Repeat(" ", n-len(`<a href="/files/x-1.0-py3-none-any.whl#sha256=`)-64-len(`">x-1.0-py3-none-any.whl</a>`))
	}
	tests := []struct {
		name     string
		size     int
		declared bool
		wantErr  bool
	}{
		{"at the bound", limit, true, false},
		{"one past, declared", limit + 1, true, true},
		{"one past, chunked", limit + 1, false, true},
		{"huge, chunked", 64 << 20, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex(t, false)
			ix.setPage(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				if tt.declared {
					w.Header().Set("Content-Length", fmt.Sprint(tt.size))
					fmt.Fprint(w, page(tt.size))
					return
				}
				// Chunked: no length; written in pieces until the client stops reading.
				chunk := strings.Repeat(" ", 32<<10)
				fmt.Fprint(w, page(len(chunk)))
				for n := len(chunk); n < tt.size; n += len(chunk) {
					if _, err := fmt.Fprint(w, chunk); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			})
			c := ix.client()
			c.MaxPageBytes = limit
			files, err := c.Files(t.Context(), "x")
			if !tt.wantErr {
				if err != nil || len(files) != 1 {
					t.Fatalf("Files = %v, %v", files, err)
				}
				return
			}
			if !errors.Is(err, ErrTooLarge) || !errors.Is(err, sandpit.ErrResourceExhausted) || !strings.Contains(err.Error(), "65536-byte limit") {
				t.Fatalf("Files = %v, want ErrTooLarge", err)
			}
		})
	}
}

func TestRedirects(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the other host was contacted")
	}))
	defer other.Close()
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		want    string // "" for success
	}{
		{"same host", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/real/x/", http.StatusFound)
		}, ""},
		{"another host", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/simple/x/", http.StatusFound)
		}, "not the index's"},
		{"endless", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.Path+"x/", http.StatusFound)
		}, "more than 3 redirects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex(t, false, pkg{name: "x", version: "1.0"})
			mux := http.NewServeMux()
			mux.HandleFunc("/simple/", tt.handler)
			mux.HandleFunc("/real/x/", func(w http.ResponseWriter, r *http.Request) {
				ix.serveHTML(w, "x", ix.projects["x"])
			})
			mux.HandleFunc("/files/", func(w http.ResponseWriter, r *http.Request) { ix.serveIndex(w, r, nil) })
			ix.setHandler(mux)
			files, err := ix.client().Files(t.Context(), "x")
			if tt.want == "" {
				if err != nil || len(files) != 1 || files[0].Refused != "" {
					t.Fatalf("Files = %+v, %v", files, err)
				}
				// Relative links resolve against the page it ended on.
				if want := ix.srv.URL + "/files/x-1.0-py3-none-any.whl"; files[0].URL != want {
					t.Errorf("URL %s, want %s", files[0].URL, want)
				}
				return
			}
			if !errors.Is(err, ErrBadIndex) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Files = %v, want ErrBadIndex saying %q", err, tt.want)
			}
		})
	}
}

func TestDownload(t *testing.T) {
	ix := newIndex(t, true, pkg{name: "good", version: "1.0"}, pkg{name: "bad", version: "1.0", badHash: true})
	c := ix.client()
	files := func(name string) File {
		fs, err := c.Files(t.Context(), name)
		if err != nil || len(fs) != 1 {
			t.Fatalf("Files(%s) = %v, %v", name, fs, err)
		}
		return fs[0]
	}
	var buf bytes.Buffer
	good := files("good")
	n, err := c.Download(t.Context(), good, &buf)
	if err != nil || n != int64(buf.Len()) || sha(buf.Bytes()) != good.SHA256 {
		t.Fatalf("Download = %d, %v", n, err)
	}
	bad := files("bad")
	_, err = c.Download(t.Context(), bad, &bytes.Buffer{})
	if !errors.Is(err, ErrHashMismatch) || !strings.Contains(err.Error(), bad.Filename) || !strings.Contains(err.Error(), bad.SHA256) || !strings.Contains(err.Error(), sha(ix.files[bad.Filename].data)) {
		t.Fatalf("Download = %v, want ErrHashMismatch naming the file and both hashes", err)
	}
	c.MaxArtifactBytes = int64(len(ix.files[good.Filename].data)) - 1
	if _, err := c.Download(t.Context(), good, &bytes.Buffer{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Download over the bound = %v, want ErrTooLarge", err)
	}
	refused := good
	refused.URL = "https://evil.example/good-1.0-py3-none-any.whl"
	if _, err := c.Download(t.Context(), refused, &bytes.Buffer{}); !errors.Is(err, ErrRefusedFile) {
		t.Fatalf("Download from another host = %v, want ErrRefusedFile", err)
	}
}

func TestMetadataVerified(t *testing.T) {
	ix := newIndex(t, true, pkg{name: "m", version: "1.0", requires: []string{"dep>=1"}})
	c := ix.client()
	fs, err := c.Files(t.Context(), "m")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Metadata(t.Context(), fs[0])
	if err != nil || !bytes.Contains(b, []byte("Requires-Dist: dep>=1")) {
		t.Fatalf("Metadata = %q, %v", b, err)
	}
	lie := fs[0]
	lie.MetadataSHA256 = strings.Repeat("0", 64)
	if _, err := c.Metadata(t.Context(), lie); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("Metadata with a wrong hash = %v, want ErrHashMismatch", err)
	}
}

func TestCacheFetch(t *testing.T) {
	ix := newIndex(t, true, pkg{name: "good", version: "1.0"}, pkg{name: "bad", version: "1.0", badHash: true})
	c := ix.client()
	cache, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := c.Files(t.Context(), "good")
	p, err := cache.Fetch(t.Context(), c, fs[0])
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || sha(b) != fs[0].SHA256 || filepath.Base(p) != fs[0].SHA256 {
		t.Fatalf("cache entry %s: %v", p, err)
	}
	before := ix.count()
	if p2, err := cache.Fetch(t.Context(), c, fs[0]); err != nil || p2 != p || ix.count() != before {
		t.Fatalf("second Fetch = %s, %v after %d requests", p2, err, ix.count()-before)
	}
	if err := CheckWheel(p); err != nil {
		t.Errorf("CheckWheel(cached) = %v", err)
	}

	bad, _ := c.Files(t.Context(), "bad")
	if _, err := cache.Fetch(t.Context(), c, bad[0]); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("Fetch = %v, want ErrHashMismatch", err)
	}
	assertCacheHolds(t, cache, fs[0].SHA256)
}

// assertCacheHolds: the cache holds exactly the entries named, and no
// partial download.
func assertCacheHolds(t *testing.T, c *Cache, sums ...string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(c.Dir(), "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if fmt.Sprint(got) != fmt.Sprint(sums) {
		t.Errorf("cache holds %v, want %v", got, sums)
	}
	if tmp, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(tmp) != 0 {
		t.Errorf("partial downloads left: %v", tmp)
	}
}

// An https index whose page links to plain http on its own host: refused,
// and the caller's HTTPClient (here, one trusting the test certificate)
// is what makes the requests.
func TestHTTPSDowngradeRefused(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
		fmt.Fprintf(w, `{"meta":{"api-version":"1.0"},"name":"x","files":[
			{"filename":"x-1.0-py3-none-any.whl","url":"%[1]s/f/x-1.0-py3-none-any.whl","hashes":{"sha256":"%[3]s"}},
			{"filename":"x-1.1-py3-none-any.whl","url":"%[2]s/f/x-1.1-py3-none-any.whl","hashes":{"sha256":"%[3]s"}}]}`,
			"https://"+r.Host, "http://"+r.Host, strings.Repeat("b", 64))
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL + "/simple", HTTPClient: srv.Client()}
	files, err := c.Files(t.Context(), "x")
	if err != nil || len(files) != 2 {
		t.Fatalf("Files = %+v, %v", files, err)
	}
	if files[0].Refused != "" || !strings.Contains(files[1].Refused, "downgrades https to http") {
		t.Errorf("refused %q and %q", files[0].Refused, files[1].Refused)
	}
}
