package artifact

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxEntryName bounds an archive entry's name, in bytes.
const MaxEntryName = 1024

// CheckEntryName says why an archive entry's name (a wheel's zip entry, an
// npm tarball's tar entry) is unsafe to unpack, or returns nil: it must be
// a relative, clean UTF-8 path — no leading "/", drive letter, backslash,
// control character, or empty, "." or ".." component — of at most
// MaxEntryName bytes; a trailing "/" (a directory entry) is allowed. One
// rule for every archive a package comes in, so a fix lands in all.
func CheckEntryName(n string) error {
	switch {
	case n == "" || n == "/":
		return fmt.Errorf("an empty name")
	case len(n) > MaxEntryName:
		return fmt.Errorf("a name over %d bytes", MaxEntryName)
	case !utf8.ValidString(n):
		return fmt.Errorf("a name that is not UTF-8")
	case strings.HasPrefix(n, "/"):
		return fmt.Errorf("an absolute path")
	case strings.Contains(n, `\`):
		return fmt.Errorf("a backslash in the name")
	case len(n) >= 2 && n[1] == ':':
		return fmt.Errorf("a drive letter")
	}
	for _, r := range n {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("a control character (%U)", r)
		}
	}
	for c := range strings.SplitSeq(strings.TrimSuffix(n, "/"), "/") {
		switch c {
		case "":
			return fmt.Errorf("an empty path component")
		case ".", "..":
			return fmt.Errorf("a %q path component", c)
		}
	}
	return nil
}
