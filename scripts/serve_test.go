package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serve.sh decides what to start before anything is started: a normal user
// on a cgroup v1 host gets a server that refuses every run (saying why), so
// neither a rootless containerd nor a 1.1 GB image build may start there.
// These run the real serve.sh in a stand-in checkout whose rootless.sh,
// install-deps.sh and bin/sandpit only log how they were called.
func TestServeScriptStartsOnlyWhatRunsCanUse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	script, err := os.ReadFile("serve.sh")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		uid       string
		cgroupV2  bool
		args      []string
		wantCalls []string // each a prefix of one logged call, in order
		notCalls  []string // no call starts with these
		wantOut   string   // in stderr
	}{
		{
			name:      "normal user on cgroup v1: no daemon, no build",
			uid:       "1000",
			args:      []string{"--workspace", "/srv/ws"},
			wantCalls: []string{"sandpit serve --no-start --rootless --build-images=false --state-dir "},
			notCalls:  []string{"rootless.sh start", "rootless.sh exec", "install-deps.sh"},
			wantOut:   "refuses every run",
		},
		{
			name:      "normal user on cgroup v1 accepting unenforced limits: rootless containerd",
			uid:       "1000",
			args:      []string{"--allow-unenforced-limits"},
			wantCalls: []string{"install-deps.sh --no-go --rootless", "rootless.sh start", "rootless.sh exec -- "},
		},
		{
			name:      "normal user on cgroup v2: rootless containerd",
			uid:       "1000",
			cgroupV2:  true,
			wantCalls: []string{"install-deps.sh --no-go --rootless", "rootless.sh start", "rootless.sh exec -- "},
		},
		{
			name:      "root",
			uid:       "0",
			args:      []string{"--workspace", "/srv/ws"},
			wantCalls: []string{"install-deps.sh --no-go", "sandpit serve --workspace /srv/ws"},
			notCalls:  []string{"rootless.sh"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			repo := filepath.Join(dir, "checkout")
			stubs := filepath.Join(dir, "stubs")
			cgroup := filepath.Join(dir, "cgroup")
			calls := filepath.Join(dir, "calls")
			for _, d := range []string{filepath.Join(repo, "scripts"), filepath.Join(repo, "bin"), stubs, cgroup} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tt.cgroupV2 {
				os.WriteFile(filepath.Join(cgroup, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
			}
			write := func(path, body string) {
				t.Helper()
				if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(repo, "scripts", "serve.sh"), string(script))
			logCall := func(name string) string {
				return "#!" + bash + "\necho \"" + name + " $*\" >>" + calls + "\n"
			}
			write(filepath.Join(repo, "scripts", "install-deps.sh"), logCall("install-deps.sh"))
			write(filepath.Join(repo, "scripts", "rootless.sh"), logCall("rootless.sh")+"[ \"$1\" = start ] && echo /run/user/1000/sandpit/containerd.sock\nexit 0\n")
			write(filepath.Join(repo, "bin", "sandpit"), logCall("sandpit"))
			for _, shim := range []string{"sandpit-shim", "sandpit-shim-init", "containerd-shim-sandpit-v1"} {
				write(filepath.Join(repo, "bin", shim), "")
			}
			write(filepath.Join(stubs, "id"), "#!"+bash+"\necho "+tt.uid+"\n")

			cmd := exec.Command(bash, append([]string{filepath.Join(repo, "scripts", "serve.sh")}, tt.args...)...)
			cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"), "HOME="+dir, "XDG_RUNTIME_DIR="+filepath.Join(dir, "run"), "SANDPIT_CGROUP_FS="+cgroup)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("serve.sh: %v\n%s", err, out)
			}
			b, _ := os.ReadFile(calls)
			got := strings.Split(strings.TrimSpace(string(b)), "\n")
			i := 0
			for _, call := range got {
				if i < len(tt.wantCalls) && strings.HasPrefix(call, tt.wantCalls[i]) {
					i++
				}
				for _, not := range tt.notCalls {
					if strings.HasPrefix(call, not) {
						t.Errorf("serve.sh ran %q", call)
					}
				}
			}
			if i < len(tt.wantCalls) {
				t.Errorf("serve.sh did not run %q (in order); it ran:\n%s\noutput:\n%s", tt.wantCalls[i], b, out)
			}
			if !strings.Contains(string(out), tt.wantOut) {
				t.Errorf("output lacks %q:\n%s", tt.wantOut, out)
			}
			// The user's flags come last, so that they win.
			if last := got[len(got)-1]; len(tt.args) > 0 && !strings.HasSuffix(last, strings.Join(tt.args, " ")) {
				t.Errorf("the server was started as %q, not ending with the user's flags %q", last, tt.args)
			}
		})
	}
}
