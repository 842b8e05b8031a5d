package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestMain lets the tests run this binary's main as a child process.
func TestMain(m *testing.M) {
	if os.Getenv("SANDPIT_TEST_LOADER_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// filterFile writes a compiled filter as the shim does: magic, flags, then
// the instructions.
func filterFile(t *testing.T, flags uint32, prog []sockFilter) *os.File {
	t.Helper()
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, [2]uint32{filterMagic, flags})
	for _, ins := range prog {
		binary.Write(&b, binary.LittleEndian, ins.code)
		b.WriteByte(ins.jt)
		b.WriteByte(ins.jf)
		binary.Write(&b, binary.LittleEndian, ins.k)
	}
	p := filepath.Join(t.TempDir(), "filter")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

const (
	bpfRetK         = 0x06
	retAllow uint32 = 0x7fff0000
)

// The loader never runs the program without its filter: a missing or
// malformed filter, or no no_new_privs, ends it with 127 and the reason;
// a good filter is in force in the program it execs.
func TestSeccompLoader(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.Skip(t, "setpriv (util-linux) is needed to set no_new_privs for the child")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	allow := []sockFilter{{code: bpfRetK, k: retAllow}}
	for _, tc := range []struct {
		name   string
		nnp    bool
		filter *os.File // nil: no fd 4
		want   string   // in the output
		code   int
	}{
		{"no filter", true, nil, "seccomp filter", 127},
		{"not a filter", true, filterFile(t, 0, nil), "not a compiled filter", 127},
		{"unknown flags", true, filterFile(t, 1<<9, allow), "unknown seccomp flags", 127},
		{"without no_new_privs", false, filterFile(t, 0, allow), "no_new_privs is not set", 127},
		{"filter loaded", true, filterFile(t, 0, allow), "Seccomp:\t2", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{self, seccompExecMode, "grep", "Seccomp:", "/proc/self/status"}
			if tc.nnp {
				args = append([]string{"setpriv", "--no-new-privs"}, args...)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "SANDPIT_TEST_LOADER_MAIN=1")
			selfF, err := os.Open(self)
			if err != nil {
				t.Fatal(err)
			}
			defer selfF.Close()
			cmd.ExtraFiles = []*os.File{selfF}
			if tc.filter != nil {
				cmd.ExtraFiles = append(cmd.ExtraFiles, tc.filter)
			}
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out, tc.code, tc.want)
			}
			if tc.code != 0 && strings.Contains(string(out), "Seccomp:") {
				t.Errorf("the program ran: %q", out)
			}
		})
	}
}

// seccomp(2) with SECCOMP_FILTER_FLAG_TSYNC returns the id of a thread it
// could not synchronise, and then installs no filter at all: only a zero
// return with no errno means the filter is in force; prctl(PR_GET_SECCOMP)
// must then say SECCOMP_MODE_FILTER.
func TestFilterLoaded(t *testing.T) {
	tests := []struct {
		name string
		ret  uintptr
		e    syscall.Errno
		ok   bool
	}{
		{name: "loaded", ret: 0, ok: true},
		{name: "errno", ret: ^uintptr(0), e: syscall.EINVAL},
		{name: "TSYNC: a thread not synchronised", ret: 4242},
		{name: "TSYNC: thread id 1", ret: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := filterLoaded(tt.ret, tt.e)
			if got := err == nil; got != tt.ok {
				t.Errorf("filterLoaded(%d, %v) = %v; want loaded %v", tt.ret, tt.e, err, tt.ok)
			}
		})
	}
}

func TestInFilterMode(t *testing.T) {
	tests := []struct {
		name string
		mode uintptr
		e    syscall.Errno
		ok   bool
	}{
		{name: "filter", mode: 2, ok: true},
		{name: "disabled", mode: 0},
		{name: "strict", mode: 1},
		{name: "prctl failed", mode: ^uintptr(0), e: syscall.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := inFilterMode(tt.mode, tt.e)
			if got := err == nil; got != tt.ok {
				t.Errorf("inFilterMode(%d, %v) = %v; want ok %v", tt.mode, tt.e, err, tt.ok)
			}
		})
	}
}
