// Package scripts holds tests of the shell scripts beside it.
//
// install-deps.sh decides from the programs it finds, not from package
// names, and never removes a package. These tests run it against a fake
// host: a PATH of fake containerd, runc, dpkg-query, apt-get and id.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost is what a test host has.
type fakeHost struct {
	uid      string
	programs map[string]string // name -> its --version line ("" for none)
	owners   map[string]string // name -> the package dpkg says installed it
	files    bool              // the keyring and CA bundle exist
	aptFails bool              // apt-get install exits 100, as when it would have to remove a package
	aptAdds  []string          // programs apt-get install creates
}

const (
	debianContainerd = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
	debianRunc       = "runc version 1.1.5+ds1"
	dockerContainerd = "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da"
	dockerRunc       = "runc version 1.2.5"
)

// run runs install-deps.sh with args on h and returns its output, whether
// it succeeded, and the apt-get command lines it ran.
func (h fakeHost) run(t *testing.T, args ...string) (out string, ok bool, apt []string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	sbin := filepath.Join(dir, "sbin")
	root := filepath.Join(dir, "root")
	for _, d := range []string{bin, sbin, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The real tools the script uses; nothing else of the host's PATH.
	for _, tool := range []string{"grep", "head", "cut", "readlink", "sort", "sed", "cat", "chmod"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not found", tool)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!"+bash+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fake := func(name, version string) string {
		return "if [ \"$1\" = --version ]; then echo '" + version + "'; fi\n"
	}
	for name, version := range h.programs {
		write(name, fake(name, version))
	}
	var dpkg strings.Builder
	dpkg.WriteString("[ \"$1\" = -S ] || exit 1\ncase $2 in\n")
	for name, pkg := range h.owners {
		dpkg.WriteString("*/" + name + ") echo '" + pkg + ": '$2 ;;\n")
	}
	dpkg.WriteString("*) echo \"dpkg-query: no path found matching pattern $2\" >&2; exit 1 ;;\nesac\n")
	write("dpkg-query", dpkg.String())
	write("id", "echo "+h.uid+"\n")
	aptLog := filepath.Join(dir, "apt.log")
	var apt2 strings.Builder
	apt2.WriteString("echo \"$*\" >>" + aptLog + "\n[ \"$1\" = install ] || exit 0\n")
	if h.aptFails {
		apt2.WriteString("echo 'E: Packages need to be removed but remove is disabled.' >&2; exit 100\n")
	}
	for _, name := range h.aptAdds {
		apt2.WriteString("printf '%s\\n' '#!" + bash + "' \"echo '" + name + " 9.9.9'\" >" + filepath.Join(bin, name) + "; chmod +x " + filepath.Join(bin, name) + "\n")
	}
	write("apt-get", apt2.String())
	if h.files {
		for _, f := range []string{"usr/share/keyrings/debian-archive-keyring.gpg", "etc/ssl/certs/ca-certificates.crt"} {
			p := filepath.Join(root, f)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, nil, 0o644)
		}
	}

	cmd := exec.Command(bash, append([]string{"install-deps.sh"}, args...)...)
	cmd.Env = []string{"PATH=" + bin, "SANDPIT_DEPS_SBIN=" + sbin, "SANDPIT_DEPS_ROOT=" + root, "HOME=" + dir}
	b, err := cmd.CombinedOutput()
	if log, err := os.ReadFile(aptLog); err == nil {
		apt = strings.Split(strings.TrimSpace(string(log)), "\n")
	}
	return string(b), err == nil, apt
}

func TestInstallDeps(t *testing.T) {
	debian := map[string]string{"containerd": debianContainerd, "runc": debianRunc, "debootstrap": "debootstrap 1.0.128+nmu2+deb12u2"}
	debianOwners := map[string]string{"containerd": "containerd", "runc": "runc", "debootstrap": "debootstrap"}
	docker := map[string]string{"containerd": dockerContainerd, "runc": dockerRunc, "debootstrap": "debootstrap 1.0.134"}
	dockerOwners := map[string]string{"containerd": "containerd.io", "runc": "containerd.io", "debootstrap": "debootstrap"}
	without := func(m map[string]string, names ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for _, n := range names {
			delete(out, n)
		}
		return out
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := without(m)
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name    string
		host    fakeHost
		args    []string
		wantOK  bool
		wantOut []string // each in the output
		wantApt string   // the apt-get install line, "" for none
	}{
		{
			name:    "debian packages present",
			host:    fakeHost{uid: "0", programs: debian, owners: debianOwners, files: true},
			wantOK:  true,
			wantOut: []string{"ok: containerd 1.6.20", "package containerd)", "runc 1.1.5"},
		},
		{
			name:    "docker's containerd.io is used, not replaced",
			host:    fakeHost{uid: "0", programs: docker, owners: dockerOwners, files: true},
			wantOK:  true,
			wantOut: []string{"containerd 1.7.27", "package containerd.io", "runc 1.2.5"},
		},
		{
			name:    "docker host missing only debootstrap installs only that, never removing",
			host:    fakeHost{uid: "0", programs: without(docker, "debootstrap"), owners: dockerOwners, files: true, aptAdds: []string{"debootstrap"}},
			wantOK:  true,
			wantOut: []string{"installing debootstrap", "package containerd.io"},
			wantApt: "install -y -qq --no-install-recommends --no-remove debootstrap",
		},
		{
			name:    "bare host as root installs everything",
			host:    fakeHost{uid: "0", programs: map[string]string{}, aptAdds: []string{"containerd", "runc", "debootstrap"}},
			wantOK:  true,
			wantOut: []string{"installing ca-certificates containerd debian-archive-keyring debootstrap runc", "ok: containerd 9.9.9"},
			wantApt: "install -y -qq --no-install-recommends --no-remove ca-certificates containerd debian-archive-keyring debootstrap runc",
		},
		{
			name:    "apt-get would remove a package: stop, remove nothing",
			host:    fakeHost{uid: "0", programs: without(docker, "runc"), owners: dockerOwners, files: true, aptFails: true},
			wantOut: []string{"nothing was removed", "containerd.io"},
			wantApt: "install -y -qq --no-install-recommends --no-remove runc",
		},
		{
			name:    "normal user is told the command, nothing installed",
			host:    fakeHost{uid: "1000", programs: without(debian, "containerd", "runc"), owners: debianOwners, files: true},
			wantOut: []string{"missing: containerd runc", "sudo apt-get install --no-install-recommends containerd runc"},
		},
		{
			name:    "too old containerd is reported, not replaced",
			host:    fakeHost{uid: "0", programs: with(debian, "containerd", "containerd github.com/containerd/containerd 1.5.9~ds1"), owners: debianOwners, files: true},
			wantOut: []string{"containerd 1.5.9", "older than 1.6", "nothing was changed"},
		},
		{
			name:    "rootless needs rootlesskit and the uid map helpers",
			host:    fakeHost{uid: "1000", programs: debian, owners: debianOwners, files: true},
			args:    []string{"--rootless"},
			wantOut: []string{"missing: rootlesskit uidmap"},
		},
		{
			name:   "rootless with everything",
			host:   fakeHost{uid: "1000", programs: with(debian, "rootlesskit", "rootlesskit version 1.1.0", "newuidmap", "", "newgidmap", ""), owners: debianOwners, files: true},
			args:   []string{"--rootless"},
			wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok, apt := tt.host.run(t, append([]string{"--no-go"}, tt.args...)...)
			if ok != tt.wantOK {
				t.Errorf("succeeded = %v, want %v; output:\n%s", ok, tt.wantOK, out)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			var installs []string
			for _, line := range apt {
				if strings.HasPrefix(line, "install") {
					installs = append(installs, line)
				}
				if strings.Contains(line, "remove") && !strings.Contains(line, "--no-remove") {
					t.Errorf("apt-get asked to remove: %q", line)
				}
			}
			got := strings.Join(installs, "\n")
			if got != tt.wantApt {
				t.Errorf("apt-get install runs %q, want %q", got, tt.wantApt)
			}
		})
	}
}
