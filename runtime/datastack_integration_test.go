package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/runtime"
)

// onDataImage runs every language on the data-science image.
func onDataImage(cfg *runtime.Config) { cfg.Languages = runtime.DefaultLanguages(testenv.DataImage()) }

// Every library the image lists imports in a run, matplotlib draws text
// with Agg by default, and its font cache is already there.
func TestDataStackImports(t *testing.T) {
	r := newRuntime(t, onDataImage)
	code := `import os
cached = os.listdir(os.path.expanduser("~/.cache/matplotlib"))
import numpy, pandas, matplotlib, scipy, sklearn, seaborn, statsmodels, sympy, openpyxl, PIL
import matplotlib.pyplot as plt
print("backend", matplotlib.get_backend())
print("cache", any(n.startswith("fontlist") for n in cached))
fig, ax = plt.subplots(figsize=(2, 1), dpi=50)
ax.set_title("héllo")
fig.savefig("/tmp/t.png")
from PIL import Image
print("png", Image.open("/tmp/t.png").size)
print("pandas", pandas.DataFrame({"a": [1, 2, 3]})["a"].sum())
`
	res := run(t, r, sandpit.Request{Language: "python", Code: code})
	if res.Status != sandpit.StatusSuccess {
		t.Fatalf("status %s\nstdout: %s\nstderr: %s", res.Status, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"backend module://sandpit_matplotlib", "cache True", "png (100, 50)", "pandas 6"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.Stdout)
		}
	}
	if res.Stderr != "" {
		t.Errorf("stderr (a font cache rebuild or a backend warning?): %s", res.Stderr)
	}
	langs := r.Languages()
	var libs []string
	for _, l := range langs {
		if l.Name == "python" {
			libs = l.Libraries
		}
	}
	joined := strings.Join(libs, ",")
	for _, want := range []string{"numpy ", "pandas ", "matplotlib ", "sklearn ", "PIL "} {
		if !strings.Contains(joined, want) {
			t.Errorf("python's libraries %v lack %q (from the image labels)", libs, want)
		}
	}
}

// plt.show() saves every open figure as figure-N.png in the working
// directory (there is no display), and closes them.
func TestPlotShowSavesFigures(t *testing.T) {
	r := newRuntime(t, onDataImage)
	code := `import os, matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.figure(figsize=(3, 2), dpi=100)
plt.bar(["a", "b"], [3, 4])
plt.show()
from PIL import Image
print(sorted(n for n in os.listdir(".") if n.startswith("figure-")), Image.open("figure-2.png").size, plt.get_fignums())
`
	res := run(t, r, sandpit.Request{Language: "python", Code: code})
	if res.Status != sandpit.StatusSuccess || !strings.Contains(res.Stdout, "['figure-1.png', 'figure-2.png'] (300, 200) []") {
		t.Errorf("status %s\nstdout: %s\nstderr: %s", res.Status, res.Stdout, res.Stderr)
	}
}

// The pool serves python on the data image, and its waiter has imported
// none of the data stack: that cost is the program's own.
func TestPoolServesDataStack(t *testing.T) {
	r := newRuntime(t, onDataImage, withPool(1, time.Minute))
	waitReady(t, r, "python", 1)
	res := run(t, r, sandpit.Request{Language: "python", Code: "import sys\nprint(sorted(m for m in ('numpy', 'pandas', 'matplotlib') if m in sys.modules))\nimport pandas\nprint(pandas.__version__)"})
	if res.Status != sandpit.StatusSuccess || !strings.HasPrefix(res.Stdout, "[]\n") {
		t.Errorf("status %s\nstdout: %s\nstderr: %s", res.Status, res.Stdout, res.Stderr)
	}
	if st := r.PoolStats()["python"]; st.Claimed != 1 {
		t.Errorf("pool stats %+v: the run was not served by the pool", st)
	}
	if st := r.PoolStats()["javascript"]; st.Created == 0 {
		t.Errorf("javascript shares the image's pool: stats %+v", st)
	}
}

// JavaScript gets the tests every language gets: success, error, exit
// code, stdin, timeout and OOM, cold and pooled.
func TestJavaScript(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		name := "cold"
		mods := []func(*runtime.Config){onDataImage}
		if pooled {
			name = "pooled"
			mods = append(mods, withPool(1, time.Minute))
		}
		t.Run(name, func(t *testing.T) {
			r := newRuntime(t, mods...)
			tests := []struct {
				name      string
				req       sandpit.Request
				status    sandpit.Status
				exit      int
				stdout    string
				stderrHas string
			}{
				{name: "hello", req: sandpit.Request{Language: "javascript", Code: "console.log('hello ' + (6*7))"}, status: sandpit.StatusSuccess, stdout: "hello 42\n"},
				{name: "alias and args", req: sandpit.Request{Language: "Node", Code: "console.log(process.argv.slice(2).join('|'))", Args: []string{"a", "b c"}}, status: sandpit.StatusSuccess, stdout: "a|b c\n"},
				{name: "exception", req: sandpit.Request{Language: "js", Code: "function f() { throw new Error('boom') }\nf()"}, status: sandpit.StatusError, exit: 1, stderrHas: "Error: boom"},
				{name: "syntax error", req: sandpit.Request{Language: "js", Code: "let x = ;"}, status: sandpit.StatusError, exit: 1, stderrHas: "SyntaxError"},
				{name: "exit code", req: sandpit.Request{Language: "javascript", Code: "process.exit(3)"}, status: sandpit.StatusError, exit: 3},
				{name: "stdin", req: sandpit.Request{Language: "javascript", Code: "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(s.toUpperCase().trim()))", Stdin: []byte("hi\n")}, status: sandpit.StatusSuccess, stdout: "HI\n"},
				{name: "timeout", req: sandpit.Request{Language: "javascript", Code: "while (true) {}", Timeout: 2 * time.Second}, status: sandpit.StatusTimeout, exit: 137},
				// Buffers live outside V8's heap: the cgroup, not V8, stops this.
				{name: "oom", req: sandpit.Request{Language: "javascript", Code: "const a = []; while (true) a.push(Buffer.alloc(32 << 20, 1))"}, status: sandpit.StatusOOM, exit: 137},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					if pooled {
						waitReady(t, r, "javascript", 1)
					}
					res := run(t, r, tt.req)
					if res.Status != tt.status || res.ExitCode != tt.exit {
						t.Errorf("status, exit = %s, %d; want %s, %d\nstdout: %s\nstderr: %s", res.Status, res.ExitCode, tt.status, tt.exit, res.Stdout, res.Stderr)
					}
					if tt.stdout != "" && res.Stdout != tt.stdout {
						t.Errorf("stdout = %q, want %q", res.Stdout, tt.stdout)
					}
					if !strings.Contains(res.Stderr, tt.stderrHas) {
						t.Errorf("stderr = %q, want it to contain %q", res.Stderr, tt.stderrHas)
					}
				})
			}
			if pooled {
				if st := r.PoolStats()["javascript"]; st.Claimed == 0 {
					t.Errorf("no javascript run was served by the pool: %+v", st)
				}
			}
		})
	}
}
