package attacks

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// all is every case the package makes: the portable ones and the
// host-dependent ones for sample host values.
func all() []Case {
	cases := Portable()
	cases = append(cases, HostListeners(netip.MustParseAddrPort("192.0.2.2:443"), netip.MustParseAddrPort("[2001:db8::1]:6443"))...)
	return append(cases, HostAbstractSocket("@sandpit-attack-x"), HostProcess(4242))
}

func TestCasesWellFormed(t *testing.T) {
	langs := map[string]bool{"python": true, "bash": true, "c": true, "cpp": true, "javascript": true}
	seen := map[string]bool{}
	for _, c := range all() {
		id := c.Threat + "/" + c.Name
		if c.Threat == "" || c.Name == "" || c.Code == "" {
			t.Errorf("%q: empty threat, name or code", id)
		}
		if !langs[c.Lang] {
			t.Errorf("%s: language %q, want one of python, bash, c, cpp, javascript", id, c.Lang)
		}
		if len(c.Want) == 0 {
			t.Errorf("%s: no safe marker: Check would pass a payload that printed nothing", id)
		}
		for _, w := range c.Want {
			if w == "" || strings.Contains(w, "UNSAFE") {
				t.Errorf("%s: safe marker %q is empty or contains UNSAFE", id, w)
			}
		}
		if seen[id] {
			t.Errorf("%s: name used twice in its threat", id)
		}
		seen[id] = true
	}
}

func TestPortableHasNoHostCases(t *testing.T) {
	host := map[string]bool{}
	for _, c := range append(HostListeners(netip.MustParseAddrPort("192.0.2.2:1")), HostAbstractSocket("@a"), HostProcess(1)) {
		host[c.Threat+"/"+c.Name] = true
	}
	for _, c := range Portable() {
		if host[c.Threat+"/"+c.Name] {
			t.Errorf("%s/%s is in Portable but needs a host value", c.Threat, c.Name)
		}
	}
}

func TestByThreat(t *testing.T) {
	n := 0
	for _, threat := range []string{"Network", "ReadOnlyFilesystem", "PrivilegeEscalation", "KernelInterfaces", "ProcessIsolation", "EscapeCVEs", "SyscallABI"} {
		cases := ByThreat(threat)
		if len(cases) == 0 {
			t.Errorf("ByThreat(%q) is empty", threat)
		}
		for _, c := range cases {
			if c.Threat != threat {
				t.Errorf("ByThreat(%q) holds %s/%s", threat, c.Threat, c.Name)
			}
		}
		n += len(cases)
	}
	if got, want := n, len(Portable()); got != want {
		t.Errorf("the threats hold %d cases, Portable %d: a threat is missing from this list", got, want)
	}
	if got := ByThreat("NoSuchThreat"); len(got) != 0 {
		t.Errorf("ByThreat of an unknown threat = %d cases, want none", len(got))
	}
}

func TestHostListenersNames(t *testing.T) {
	cases := HostListeners(netip.MustParseAddrPort("192.0.2.2:80"), netip.MustParseAddrPort("[::ffff:192.0.2.3]:81"), netip.MustParseAddrPort("[2001:db8::1]:82"))
	for i, want := range []struct{ name, addr string }{
		{"tcp_to_host_listener", `("192.0.2.2", 80)`},
		{"tcp_to_host_listener_2", `("192.0.2.3", 81)`}, // unmapped: tried as IPv4
		{"tcp_to_host_listener_3", `("2001:db8::1", 82)`},
	} {
		if got := cases[i]; got.Name != want.name || got.Threat != "Network" || !strings.Contains(got.Code, want.addr) {
			t.Errorf("case %d: %s/%s connecting by\n%s\nwant Network/%s connecting to %s", i, got.Threat, got.Name, got.Code, want.name, want.addr)
		}
	}
}

func TestHostAbstractSocketRejectsUnquotable(t *testing.T) {
	for _, name := range []string{"@", `@a"b`, `@a\b`, "@a b", "@a\nb"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("HostAbstractSocket(%q) did not panic", name)
				}
			}()
			HostAbstractSocket(name)
		}()
	}
	if got := HostAbstractSocket("@/containerd-shim/x.sock").Code; !strings.Contains(got, `s.connect("\0/containerd-shim/x.sock")`) {
		t.Errorf("payload does not connect to the abstract name:\n%s", got)
	}
}

func TestProgram(t *testing.T) {
	if got := (Case{Lang: "python", Code: "sc('x', 1)"}).Program(); got != PySyscall+"sc('x', 1)" {
		t.Errorf("python program = %q, want the prelude then the code", got)
	}
	if got := (Case{Lang: "bash", Code: "echo hi"}).Program(); got != "echo hi" {
		t.Errorf("bash program = %q, want the code alone", got)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		output string
		want   []string
		err    error // nil: contained
	}{
		{"contained", "blocked keyctl EPERM\nblocked add_key EPERM\n", []string{"blocked keyctl", "blocked add_key"}, nil},
		{"unsafe line", "blocked keyctl EPERM\nUNSAFE add_key returned 3\n", []string{"blocked keyctl"}, ErrUnsafe},
		{"unsafe beside every marker", "blocked a\nblocked b\nUNSAFE c\n", []string{"blocked a", "blocked b"}, ErrUnsafe},
		{"unsafe on stderr tail", "blocked\nTraceback…\nUNSAFE", []string{"blocked"}, ErrUnsafe},
		{"marker missing", "blocked keyctl EPERM\n", []string{"blocked keyctl", "blocked add_key"}, ErrMarkerMissing},
		{"crashed before its check", "Traceback (most recent call last):\nNameError: sc\n", []string{"blocked"}, ErrMarkerMissing},
		{"empty output", "", []string{"blocked"}, ErrMarkerMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.output, tt.want)
			if tt.err == nil {
				if err != nil {
					t.Errorf("Check = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("Check = %v, want %v", err, tt.err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.output) {
				t.Errorf("Check's error %q does not quote the output", err)
			}
		})
	}
	if err := Check("blocked x", []string{"blocked add_key", "blocked x"}); err == nil || !strings.Contains(err.Error(), `"blocked add_key"`) || strings.Contains(err.Error(), `["blocked add_key" "blocked x"]`) {
		t.Errorf("Check = %v, want it to name only the missing marker", err)
	}
}
