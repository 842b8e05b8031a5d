package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/internal/pypi/pypitest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/mcp"
)

// newWheelIndex serves a PEP 691 index on loopback: the only package
// source a test server is given.
func newWheelIndex(t *testing.T) *pypitest.Index {
	ix, err := pypitest.NewIndex()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	return ix
}

func testWheel(t *testing.T, name, version string, requires []string, files map[string][]byte) (string, []byte) {
	t.Helper()
	fn, data, err := pypitest.Wheel(name, version, requires, files)
	if err != nil {
		t.Fatal(err)
	}
	return fn, data
}

func packagesResult(t *testing.T, r *mcpgo.CallToolResult) mcp.PackagesResult {
	t.Helper()
	if r.IsError {
		t.Fatalf("packages tool error: %s", text(r))
	}
	b, _ := json.Marshal(r.StructuredContent)
	var out mcp.PackagesResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return out
}

func runPy(t *testing.T, c *client.Client, code string, extra ...string) mcp.RunCodeResult {
	t.Helper()
	args := map[string]any{"language": "python", "code": code}
	if len(extra) > 0 {
		args["session"] = extra[0]
	}
	return runResult(t, call(t, c, "run_code", args))
}

// spextC is a CPython extension module written without Python.h (the
// images lack python3-dev): the stable-ABI declarations it uses.
const spextC = `typedef long Py_ssize_t;
typedef struct _object { Py_ssize_t ob_refcnt; void *ob_type; } PyObject;
typedef PyObject *(*PyCFunction)(PyObject *, PyObject *);
typedef struct { const char *ml_name; PyCFunction ml_meth; int ml_flags; const char *ml_doc; } PyMethodDef;
typedef struct { PyObject ob_base; PyObject *(*m_init)(void); Py_ssize_t m_index; PyObject *m_copy; } PyModuleDef_Base;
typedef struct { PyModuleDef_Base m_base; const char *m_name; const char *m_doc; Py_ssize_t m_size;
  PyMethodDef *m_methods; void *m_slots; void *m_traverse; void *m_clear; void *m_free; } PyModuleDef;
extern int PyArg_ParseTuple(PyObject *, const char *, ...);
extern PyObject *PyLong_FromLong(long);
extern PyObject *PyModule_Create2(PyModuleDef *, int);
static PyObject *add(PyObject *self, PyObject *args) {
  long a, b;
  if (!PyArg_ParseTuple(args, "ll", &a, &b)) return 0;
  return PyLong_FromLong(a + b);
}
static PyMethodDef methods[] = {{"add", add, 1, "a + b"}, {0, 0, 0, 0}};
static PyModuleDef def = {{{1, 0}, 0, 0, 0}, "spext", 0, -1, methods, 0, 0, 0, 0};
PyObject *PyInit_spext(void) { return PyModule_Create2(&def, 1013); }
`

// TestPackagesOverMCP: install_packages against a local index, end to
// end: the layer is importable in runs and sessions, recorded in
// sandpit.lock, undone with the run that wrote it, rebuilt by a fresh
// server from the lock, and every hostile or refused package changes
// nothing.
func TestPackagesOverMCP(t *testing.T) {
	ix := newWheelIndex(t)
	add := func(name, version string, requires []string, files map[string][]byte, published string) {
		fn, data := testWheel(t, name, version, requires, files)
		ix.Add(name, fn, data, published)
	}
	add("sp-util", "1.0", nil, map[string][]byte{"sp_util.py": []byte("def shout(s):\n    return s.upper() + '!'\n")}, "")
	for _, v := range []string{"1.0", "2.0"} {
		add("sp-greet", v, []string{"sp-util>=1.0"}, map[string][]byte{"sp_greet/__init__.py": []byte("import sp_util\nVERSION = '" + v + "'\ndef hello():\n    return sp_util.shout('hello ' + VERSION)\n")}, "")
	}
	add("sp-badhash", "1.0", nil, map[string][]byte{"sp_badhash.py": []byte("X = 1\n")}, strings.Repeat("ab", 32))
	add("sp-escape", "1.0", nil, map[string][]byte{"../../escaped.py": []byte("X = 1\n")}, "")
	ix.Add("sp-sdist", "sp-sdist-1.0.tar.gz", []byte("not built here"), "")

	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	args := append(serverArgs(t), "--package-source", "python="+ix.URL(), "--package-cache", cache)
	ws := flagValue(args, "workspace")
	c := startServer(t, nil, args...)

	if r := call(t, c, "list_packages", map[string]any{}); r.IsError || !strings.Contains(text(r), "no packages installed") || !strings.Contains(text(r), "python") {
		t.Fatalf("list_packages before: %s", text(r))
	}
	if res := runPy(t, c, "import sp_greet"); !strings.Contains(res.Stderr, "ModuleNotFoundError") {
		t.Fatalf("importable before any install: %+v", res)
	}
	if r := call(t, c, "run_code", map[string]any{"language": "python", "code": "import sp_greet"}); !strings.Contains(text(r), `install_packages(language="python", packages=["sp_greet"])`) {
		t.Errorf("a missing module's run does not say how to install it: %s", text(r))
	}

	// A CPython extension module compiled in a sandbox of the image (which
	// has no Python.h: spextC declares the stable-ABI calls it makes); the
	// layer must be executable for the interpreter to load it.
	if w := call(t, c, "write_file", map[string]any{"path": "spext.c", "content": spextC}); w.IsError {
		t.Fatal(text(w))
	}
	so := runResult(t, call(t, c, "run_code", map[string]any{"language": "bash", "code": "gcc -shared -fPIC -O2 -o spext.abi3.so spext.c && echo built"}))
	if !strings.Contains(so.Stdout, "built") {
		t.Fatalf("build the extension: %+v", so)
	}
	lib, err := os.ReadFile(filepath.Join(ws, "spext.abi3.so"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"spext.abi3.so", "spext.c"} { // importable from the layer only
		if d := call(t, c, "delete_file", map[string]any{"path": f}); d.IsError {
			t.Fatal(text(d))
		}
	}
	add("sp-native", "1.0", nil, map[string][]byte{
		"sp_native/__init__.py": []byte("from spext import add\n"),
		"spext.abi3.so":         lib,
	}, "")

	// Install: a good requirement with a dependency; two refused ones.
	r := packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-greet==1.0", "https://evil.example/x.whl", "sp_native"}}))
	got := map[string]string{}
	for _, p := range r.Installed {
		got[p.Name] = p.Version
	}
	if got["sp-greet"] != "1.0" || got["sp-util"] != "1.0" || got["sp-native"] != "1.0" || len(r.Refused) != 1 || !strings.Contains(r.Refused[0].Reason, "URL") {
		t.Fatalf("install: %+v", r)
	}
	if r.RunID == "" || r.Files == nil {
		t.Fatalf("the install is no run with workspace changes: %+v", r)
	}
	lock1, err := os.ReadFile(filepath.Join(ws, "sandpit.lock"))
	if err != nil || !bytes.Contains(lock1, []byte(`"sp-greet"`)) {
		t.Fatalf("sandpit.lock: %s %v", lock1, err)
	}

	check := func(want string, session ...string) {
		t.Helper()
		res := runPy(t, c, "import sp_greet, sp_native\nprint(sp_greet.hello(), sp_native.add(2, 3))", session...)
		if res.Status != "success" || !strings.Contains(res.Stdout, want) {
			t.Fatalf("import from the layer: want %q: %+v", want, res)
		}
	}
	check("HELLO 1.0! 5")
	check("HELLO 1.0! 5", "s1")
	if res := runPy(t, c, "open('/opt/sandpit/env/python/sp_util.py', 'a').write('x')"); res.Status == "success" || !strings.Contains(res.Stderr, "Read-only file system") && !strings.Contains(res.Stderr, "Permission denied") {
		t.Fatalf("the layer is writable: %+v", res)
	}

	// Upgrade, then undo the upgrade's run: the previous layer comes back.
	r = packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-greet==2.0"}}))
	if len(r.Installed) != 1 || r.Installed[0].Version != "2.0" {
		t.Fatalf("upgrade: %+v", r)
	}
	if u := call(t, c, "undo_last_run", map[string]any{}); u.IsError {
		t.Fatalf("undo: %s", text(u))
	}
	check("HELLO 1.0! 5")
	if lock, _ := os.ReadFile(filepath.Join(ws, "sandpit.lock")); !bytes.Equal(lock, lock1) {
		t.Fatalf("undo left another lock:\n%s\nwant\n%s", lock, lock1)
	}
	// Upgraded again, the layer of 2.0 is there to reuse.
	packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-greet==2.0"}}))
	check("HELLO 2.0! 5")
	packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-greet==1.0"}}))
	check("HELLO 1.0! 5")

	// Refused whole: nothing changes.
	many := make([]string, 201)
	for i := range many {
		many[i] = fmt.Sprintf("pkg-%d", i)
	}
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"sp-badhash"}, "hash"},
		{[]string{"sp-sdist"}, "sp-sdist"},
		{[]string{"sp-escape"}, "unsafe"},
		{[]string{"no-such-package"}, "no such package"},
		{many, "over the limit of 200"},
		{[]string{"./sp-util", "file:///tmp/x.whl", "sp-util @ https://x/y.whl", "sp\x1butil", "--index-url=https://evil/"}, "nothing to install"},
	} {
		res := call(t, c, "install_packages", map[string]any{"language": "python", "packages": tc.specs})
		if !res.IsError || !strings.Contains(strings.ToLower(text(res)), tc.want) {
			t.Errorf("install %.80q: want an error naming %q, got %s", tc.specs, tc.want, text(res))
		}
		if lock, _ := os.ReadFile(filepath.Join(ws, "sandpit.lock")); !bytes.Equal(lock, lock1) {
			t.Fatalf("a refused install (%.80q) changed the lock", tc.specs)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "..", "escaped.py")); err == nil {
		t.Fatal("a wheel's entry escaped the layer")
	}
	check("HELLO 1.0! 5")
	if res := call(t, c, "install_packages", map[string]any{"language": "javascript", "packages": []string{"left-pad@1.3.0"}}); !res.IsError || !strings.Contains(text(res), "--package-source javascript=") {
		t.Errorf("an unconfigured language does not say how to enable it: %s", text(res))
	}

	// A snapshot taken before an install, restored, takes the layer back.
	snap := structuredMap(t, call(t, c, "create_state_snapshot", map[string]any{"description": "before sp-extra"}))
	add("sp-extra", "1.0", nil, map[string][]byte{"sp_extra.py": []byte("X = 'extra'\n")}, "")
	packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-extra"}}))
	if res := runPy(t, c, "import sp_extra; print(sp_extra.X)"); !strings.Contains(res.Stdout, "extra") {
		t.Fatalf("sp-extra: %+v", res)
	}
	if r := call(t, c, "restore_state_snapshot", map[string]any{"snapshot_id": snap["snapshot_id"]}); r.IsError {
		t.Fatal(text(r))
	}
	if res := runPy(t, c, "import sp_extra"); !strings.Contains(res.Stderr, "ModuleNotFoundError") {
		t.Fatalf("restored a snapshot from before the install, still importable: %+v", res)
	}
	check("HELLO 1.0! 5")

	// Two installs racing into one layer: one waits for the other, and the
	// lock has both.
	add("sp-race-a", "1.0", nil, map[string][]byte{"sp_race_a.py": []byte("X = 'a'\n")}, "")
	add("sp-race-b", "1.0", nil, map[string][]byte{"sp_race_b.py": []byte("X = 'b'\n")}, "")
	var wg sync.WaitGroup
	raced := make([]*mcpgo.CallToolResult, 2)
	for i, name := range []string{"sp-race-a", "sp-race-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raced[i] = callNoFail(c, "install_packages", map[string]any{"language": "python", "packages": []string{name}})
		}()
	}
	wg.Wait()
	for _, r := range raced {
		if r == nil || r.IsError {
			t.Fatalf("racing installs: %v", r)
		}
	}
	if res := runPy(t, c, "import sp_race_a, sp_race_b, sp_greet; print(sp_race_a.X + sp_race_b.X)"); !strings.Contains(res.Stdout, "ab") {
		t.Fatalf("after two racing installs the layer lacks one: %+v", res)
	}
	packagesResult(t, call(t, c, "remove_packages", map[string]any{"language": "python", "packages": []string{"sp-race-a", "sp-race-b"}}))
	lock1, _ = os.ReadFile(filepath.Join(ws, "sandpit.lock"))

	// A broken lock stops runs with what to do; deleting it drops the layer.
	if w := call(t, c, "write_file", map[string]any{"path": "sandpit.lock", "content": "{"}); w.IsError {
		t.Fatal(text(w))
	}
	if res := call(t, c, "run_code", map[string]any{"language": "python", "code": "print(1)"}); !res.IsError || !strings.Contains(text(res), "sandpit.lock") {
		t.Fatalf("a broken lock: %s", text(res))
	}
	os.WriteFile(filepath.Join(ws, "sandpit.lock"), lock1, 0o644)
	check("HELLO 1.0! 5")

	// A fresh server on the same workspace, its layers gone: it rebuilds
	// the layer from the lock (the artifacts from the cache).
	c.Close()
	layers := filepath.Join(filepath.Dir(flagValue(args, "snapshot-dir")), "packages", "layers")
	entries, _ := os.ReadDir(layers)
	if len(entries) == 0 {
		t.Fatalf("no layers in %s", layers)
	}
	for _, e := range entries {
		p := filepath.Join(layers, e.Name())
		filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(q, 0o700)
			}
			return nil
		})
		os.RemoveAll(p)
	}
	c2 := startServer(t, nil, args...)
	if res := runPy(t, c2, "import sp_greet\nprint(sp_greet.hello())"); !strings.Contains(res.Stdout, "HELLO 1.0!") {
		t.Fatalf("a fresh server does not rebuild the layer from the lock: %+v", res)
	}
	l := call(t, c2, "list_packages", map[string]any{})
	if !strings.Contains(text(l), "sp-util 1.0") || !strings.Contains(text(l), "a dependency") {
		t.Fatalf("list_packages: %s", text(l))
	}
	r = packagesResult(t, call(t, c2, "remove_packages", map[string]any{"language": "python", "packages": []string{"sp-greet"}}))
	if len(r.Removed) != 2 {
		t.Fatalf("remove sp-greet takes sp-util, which nothing else needs: %+v", r)
	}
	if res := runPy(t, c2, "import sp_greet"); !strings.Contains(res.Stderr, "ModuleNotFoundError") {
		t.Fatalf("still importable after remove: %+v", res)
	}
	if res := runPy(t, c2, "import sp_native; print(sp_native.add(1, 1))"); !strings.Contains(res.Stdout, "2") {
		t.Fatalf("the package kept is gone: %+v", res)
	}
}

// TestPackagesPolicy: an allowlist holds for dependencies too, and a
// denied package is refused with the policy's line.
func TestPackagesPolicy(t *testing.T) {
	ix := newWheelIndex(t)
	fn, data := testWheel(t, "sp-util", "1.0", nil, map[string][]byte{"sp_util.py": []byte("X = 1\n")})
	ix.Add("sp-util", fn, data, "")
	fn, data = testWheel(t, "sp-greet", "1.0", []string{"sp-util"}, map[string][]byte{"sp_greet.py": []byte("X = 1\n")})
	ix.Add("sp-greet", fn, data, "")
	policy := filepath.Join(t.TempDir(), "policy")
	os.WriteFile(policy, []byte("allow python sp-greet\nallow python sp-util <1\n"), 0o644)
	args := append(serverArgs(t), "--package-source", "python="+ix.URL(), "--package-cache", filepath.Join(t.TempDir(), "cache"), "--package-allow", policy)
	c := startServer(t, nil, args...)
	res := call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-greet"}})
	if !res.IsError || !strings.Contains(text(res), "allowlist") || !strings.Contains(text(res), "sp-util") {
		t.Fatalf("a dependency off the allowlist: %s", text(res))
	}
	if _, err := os.Stat(filepath.Join(flagValue(args, "workspace"), "sandpit.lock")); err == nil {
		t.Fatal("a refused install wrote a lock")
	}
}

// TestPackagesNPMRegistry installs from the real npm registry (which these
// machines reach) and requires the package in a run.
func TestPackagesNPMRegistry(t *testing.T) {
	if os.Getenv("SANDPIT_NPM_OFFLINE") == "1" {
		t.Skip("SANDPIT_NPM_OFFLINE=1: the npm registry is not reachable from this machine")
	}
	args := append(serverArgs(t), "--package-source", "javascript=https://registry.npmjs.org/", "--package-cache", filepath.Join(t.TempDir(), "cache"))
	c := startServer(t, nil, args...)
	r := packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "javascript", "packages": []string{"left-pad@1.3.0", "is-odd@3.0.1"}}))
	if len(r.Installed) != 3 {
		t.Fatalf("left-pad, is-odd and is-number: %+v", r)
	}
	res := runResult(t, call(t, c, "run_code", map[string]any{"language": "javascript", "code": "console.log(require('left-pad')('7', 3, '0'), require('is-odd')(3))"}))
	if res.Status != "success" || !strings.Contains(res.Stdout, "007 true") {
		t.Fatalf("require from the layer: %+v", res)
	}
}

// TestPackagesTenants: over HTTP each tenant has its own layer and lock;
// one tenant's install is nothing to another, who imports nothing of it.
func TestPackagesTenants(t *testing.T) {
	ix := newWheelIndex(t)
	fn, data := testWheel(t, "sp-tenant", "1.0", nil, map[string][]byte{"sp_tenant.py": []byte("X = 'installed'\n")})
	ix.Add("sp-tenant", fn, data, "")
	data2 := filepath.Join(t.TempDir(), "data")
	ta, tb := token(t, data2, "alice"), token(t, data2, "bob")
	srv := startHTTP(t, data2, "--package-source", "python="+ix.URL(), "--package-cache", filepath.Join(t.TempDir(), "cache"))
	alice, bob := httpClient(t, srv.url, ta), httpClient(t, srv.url, tb)
	packagesResult(t, call(t, alice, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-tenant"}}))
	if res := runPy(t, alice, "import sp_tenant; print(sp_tenant.X)"); !strings.Contains(res.Stdout, "installed") {
		t.Fatalf("alice's import: %+v", res)
	}
	if res := runPy(t, bob, "import sp_tenant"); !strings.Contains(res.Stderr, "ModuleNotFoundError") {
		t.Fatalf("bob imports alice's package: %+v", res)
	}
	if l := call(t, bob, "list_packages", map[string]any{}); !strings.Contains(text(l), "no packages installed") {
		t.Fatalf("bob's list shows alice's: %s", text(l))
	}
	if _, err := os.Stat(filepath.Join(data2, "tenants", "alice", "packages", "layers")); err != nil {
		t.Fatalf("alice's layers are not hers: %v", err)
	}
}

// TestPackagesCacheBounded: the shared artifact cache is trimmed to
// --package-cache-max after an install; a layer that must be rebuilt later
// fetches what was trimmed again, verified.
func TestPackagesCacheBounded(t *testing.T) {
	ix := newWheelIndex(t)
	noise := make([]byte, 8<<10) // incompressible: the wheel is over the cap
	rand.Read(noise)
	body := []byte("# " + hex.EncodeToString(noise) + "\n")
	fn, data := testWheel(t, "sp-big", "1.0", nil, map[string][]byte{"sp_big.py": append([]byte("X = 'big'\n"), body...)})
	ix.Add("sp-big", fn, data, "")
	cache := filepath.Join(t.TempDir(), "cache")
	args := append(serverArgs(t), "--package-source", "python="+ix.URL(), "--package-cache", cache, "--package-cache-max", "1KiB")
	c := startServer(t, nil, args...)
	packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-big"}}))
	empty := func() bool {
		des, err := os.ReadDir(filepath.Join(cache, "sha256"))
		return err == nil && len(des) == 0
	}
	if !testenv.Poll(testenv.Patience, empty) {
		t.Fatalf("the cache was not trimmed to 1 KiB")
	}
	layers := filepath.Join(filepath.Dir(flagValue(args, "snapshot-dir")), "packages", "layers")
	des, _ := os.ReadDir(layers)
	for _, e := range des {
		p := filepath.Join(layers, e.Name())
		filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(q, 0o700)
			}
			return nil
		})
		os.RemoveAll(p)
	}
	if res := runPy(t, c, "import sp_big; print(sp_big.X)"); !strings.Contains(res.Stdout, "big") {
		t.Fatalf("the layer was not rebuilt from a trimmed cache: %+v", res)
	}
}

// TestPackagesCancelledInstall: an install whose client goes away while a
// download stalls changes nothing and leaves nothing: no lock, no build
// dirs, no partial download in the cache; the next install works.
func TestPackagesCancelledInstall(t *testing.T) {
	ix := newWheelIndex(t)
	fn, data := testWheel(t, "sp-slow", "1.0", nil, map[string][]byte{"sp_slow.py": []byte("X = 'slow'\n")})
	ix.Add("sp-slow", fn, data, "")
	ix.Stall(fn)
	cache := filepath.Join(t.TempDir(), "cache")
	args := append(serverArgs(t), "--package-source", "python="+ix.URL(), "--package-cache", cache)
	c := startServer(t, nil, args...)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var req mcpgo.CallToolRequest
	req.Params.Name = "install_packages"
	req.Params.Arguments = map[string]any{"language": "python", "packages": []string{"sp-slow"}}
	if res, err := c.CallTool(ctx, req); err == nil && !res.IsError {
		t.Fatalf("an install with a stalled download succeeded: %s", text(res))
	}
	builds := filepath.Join(filepath.Dir(flagValue(args, "snapshot-dir")), "packages", "builds")
	nothingLeft := func() bool {
		b, _ := os.ReadDir(builds)
		tmp, _ := os.ReadDir(filepath.Join(cache, "tmp"))
		sums, _ := os.ReadDir(filepath.Join(cache, "sha256"))
		return len(b) == 0 && len(tmp) == 0 && len(sums) == 0
	}
	if !testenv.Poll(testenv.Patience, nothingLeft) {
		b, _ := os.ReadDir(builds)
		tmp, _ := os.ReadDir(filepath.Join(cache, "tmp"))
		t.Fatalf("a cancelled install left builds %v, partial downloads %v", b, tmp)
	}
	if _, err := os.Stat(filepath.Join(flagValue(args, "workspace"), "sandpit.lock")); err == nil {
		t.Fatal("a cancelled install wrote a lock")
	}
	ix.Release(fn)
	packagesResult(t, call(t, c, "install_packages", map[string]any{"language": "python", "packages": []string{"sp-slow"}}))
	if res := runPy(t, c, "import sp_slow; print(sp_slow.X)"); !strings.Contains(res.Stdout, "slow") {
		t.Fatalf("after the cancelled install: %+v", res)
	}
}
