// Package attacks holds the payloads of sandpit's attack suite
// (runtime/attack_integration_test.go), so that any path that runs code in a
// sandpit sandbox — the runtime directly, or an MCP client calling run_code on
// a server in a cluster — runs the same attacks and judges them the same way.
//
// Each payload prints "blocked ..." (or another safe marker its case names)
// when the defence held and "UNSAFE ..." when it did not. Check passes an
// output only if every safe marker is present and no UNSAFE is, so a payload
// that crashed before reaching its check fails too.
package attacks

import (
	"errors"
	"fmt"
	"strings"
)

// Case is one payload and the markers that prove it was contained.
type Case struct {
	Threat string   // the TestAttack<Threat> it belongs to, e.g. "PrivilegeEscalation"
	Name   string   // the subtest name, e.g. "setuid_binaries_do_not_elevate"
	Lang   string   // a sandpit language: python, bash, c, cpp or javascript
	Code   string   // the payload; Program adds what it needs to run
	Want   []string // every one must appear in stdout+stderr
}

// Program is the source to run for c: its code, after the PySyscall prelude
// when it is Python.
func (c Case) Program() string {
	if c.Lang == "python" {
		return PySyscall + c.Code
	}
	return c.Code
}

// PySyscall is the prelude of every Python payload: sc(name, nr, *args) makes
// a raw syscall and prints "blocked NAME ERRNO" when it fails with one of the
// errnos a refused call gives (EPERM from seccomp or a missing capability,
// ENOSYS, EACCES), or "UNSAFE NAME ..." when it succeeds or reaches the
// kernel. buf(n_or_bytes) is the address of a buffer that lives as long as
// the program.
const PySyscall = `
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
_keep = []
def buf(n_or_bytes):
    b = ctypes.create_string_buffer(n_or_bytes)
    _keep.append(b)
    return ctypes.addressof(b)
def sc(name, nr, *args, ok=("EPERM", "ENOSYS", "EACCES")):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    if r == -1 and e in ok:
        print("blocked", name, e)
    elif r == -1:
        print("UNSAFE", name, "reached the kernel:", e)
    else:
        print("UNSAFE", name, "returned", r)
    sys.stdout.flush()
`

// Check's verdicts, for errors.Is.
var (
	// ErrUnsafe: the output holds an UNSAFE line: the defence failed.
	ErrUnsafe = errors.New("defence failed")
	// ErrMarkerMissing: a safe marker is absent, so the payload never
	// showed that the defence held (it may have crashed first).
	ErrMarkerMissing = errors.New("safe marker missing")
)

// Check judges a payload's output (stdout and stderr together): nil when it
// was contained — no "UNSAFE" anywhere and every marker of want present;
// otherwise an error wrapping ErrUnsafe or ErrMarkerMissing that names what
// was wrong and quotes the output.
func Check(output string, want []string) error {
	if strings.Contains(output, "UNSAFE") {
		return fmt.Errorf("%w; output:\n%s", ErrUnsafe, output)
	}
	var missing []string
	for _, w := range want {
		if !strings.Contains(output, w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %q; output:\n%s", ErrMarkerMissing, missing, output)
	}
	return nil
}

// ByThreat is the Portable cases of one threat (the suffix of its
// TestAttack<Threat>, e.g. "KernelInterfaces"), in the suite's order; none
// for a threat without portable cases or one it does not know.
func ByThreat(threat string) []Case {
	var out []Case
	for _, c := range Portable() {
		if c.Threat == threat {
			out = append(out, c)
		}
	}
	return out
}
