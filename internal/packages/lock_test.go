package packages

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// testSHA is a well-formed sha256 hex string, distinct per seed.
func testSHA(seed byte) string {
	return strings.Repeat(fmt.Sprintf("%02x", seed), 32)
}

// testIntegrity is a well-formed sha512 SRI string, distinct per seed.
func testIntegrity(seed byte) string {
	return "sha512-" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{seed}, 64))
}

func pyEntry(name, dist, version string, seed byte) PyEntry {
	fn := dist + "-" + version + "-py3-none-any.whl"
	return PyEntry{
		Name:     name,
		Version:  version,
		Filename: fn,
		URL:      "https://pypi.example/packages/ab/cd/" + fn,
		SHA256:   testSHA(seed),
		Size:     1000 + int64(seed),
	}
}

func jsEntry(name, path, version string, seed byte) JSEntry {
	base := name[strings.LastIndex(name, "/")+1:]
	return JSEntry{
		Name:      name,
		Version:   version,
		Path:      path,
		URL:       "https://registry.example/" + name + "/-/" + base + "-" + version + ".tgz",
		Integrity: testIntegrity(seed),
		SHA256:    testSHA(seed),
		Size:      2000 + int64(seed),
	}
}

// validLock is a well-formed lock, its entries deliberately unsorted.
func validLock() *Lock {
	return &Lock{
		Version: LockVersion,
		Requested: Requested{
			Python:     []string{"requests>=2.31", "foo_bar"},
			JavaScript: []string{"left-pad@^1.3.0", "@types/node", "debug"},
		},
		Python: []PyEntry{
			pyEntry("requests", "requests", "2.31.0", 1),
			pyEntry("foo-bar", "foo_bar", "1.0", 2),
			pyEntry("urllib3", "urllib3", "2.0.7", 3),
		},
		JavaScript: []JSEntry{
			jsEntry("left-pad", "node_modules/left-pad", "1.3.0", 4),
			jsEntry("@types/node", "node_modules/@types/node", "20.1.0", 5),
			jsEntry("debug", "node_modules/debug", "4.3.4", 6),
			jsEntry("ms", "node_modules/debug/node_modules/ms", "2.1.2", 7),
			jsEntry("@scope/inner", "node_modules/debug/node_modules/@scope/inner", "1.0.0", 8),
		},
	}
}

func lockJSON(t *testing.T, l *Lock) []byte {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseLockAccepts(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Lock)
	}{
		{name: "well formed", edit: func(*Lock) {}},
		{name: "python only", edit: func(l *Lock) { l.JavaScript = nil }},
		{name: "javascript only", edit: func(l *Lock) { l.Python = nil }},
		{name: "nothing installed", edit: func(l *Lock) { l.Python, l.JavaScript, l.Requested = nil, nil, Requested{} }},
		{name: "url with a hash fragment", edit: func(l *Lock) { l.Python[0].URL += "#sha256=" + l.Python[0].SHA256 }},
		{name: "wheel with a build tag", edit: func(l *Lock) {
			l.Python[0].Filename = "requests-2.31.0-1-py3-none-any.whl"
			l.Python[0].URL = "https://pypi.example/requests-2.31.0-1-py3-none-any.whl"
		}},
		{name: "exactly the package bound", edit: func(l *Lock) {
			l.Python = nil
			for i := range DefaultMaxLayerPackages {
				l.Python = append(l.Python, pyEntry(fmt.Sprintf("p%d", i), fmt.Sprintf("p%d", i), "1.0", byte(i)))
			}
		}},
		// The npm resolver accepts names published before npm's current
		// rules (validDepName: JSONStream), and Plan writes the lock it
		// resolved: ParseLock must read back what the server wrote.
		{name: "legacy npm name with capitals", edit: func(l *Lock) {
			l.JavaScript = append(l.JavaScript, jsEntry("JSONStream", "node_modules/JSONStream", "1.3.5", 9))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := validLock()
			tt.edit(l)
			got, err := ParseLock(lockJSON(t, l))
			if err != nil {
				t.Fatalf("ParseLock: %v", err)
			}
			if !reflect.DeepEqual(got, l) {
				t.Errorf("ParseLock = %+v, want %+v", got, l)
			}
		})
	}
}

func TestParseLockRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Lock)
		text func([]byte) []byte // applied after edit and marshalling
		want string              // the error names this
	}{
		{name: "unknown top-level field", text: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`{"version"`), []byte(`{"extra":1,"version"`), 1)
		}, want: "extra"},
		{name: "unknown entry field", text: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"name":"requests"`), []byte(`"name":"requests","hook":"x"`), 1)
		}, want: "hook"},
		{name: "version 0", edit: func(l *Lock) { l.Version = 0 }, want: "version 0"},
		{name: "version 2", edit: func(l *Lock) { l.Version = 2 }, want: "version 2"},
		{name: "not json", text: func([]byte) []byte { return []byte("version = 1\n") }, want: "not a sandpit lock"},
		{name: "json array", text: func([]byte) []byte { return []byte("[]") }, want: "not a sandpit lock"},
		{name: "trailing object", text: func(b []byte) []byte { return append(b, "{}"...) }, want: "text after"},
		{name: "trailing word", text: func(b []byte) []byte { return append(b, "\nrm -rf /"...) }, want: "text after"},
		{name: "trailing closing brace", text: func(b []byte) []byte { return append(b, "}"...) }, want: "text after"},
		{name: "trailing closing bracket", text: func(b []byte) []byte { return append(b, "\n]"...) }, want: "text after"},
		{name: "over MaxLockBytes", text: func(b []byte) []byte {
			return append(b, bytes.Repeat([]byte(" "), MaxLockBytes+1-len(b))...)
		}, want: "limit"},

		{name: "python name does not match the filename", edit: func(l *Lock) { l.Python[1].Name = "evil" }, want: "python[1] (evil)"},
		{name: "python name not normalized", edit: func(l *Lock) { l.Python[1].Name = "Foo_Bar" }, want: "python[1] (Foo_Bar)"},
		{name: "python version does not match the filename", edit: func(l *Lock) { l.Python[0].Version = "2.32.0" }, want: "python[0] (requests)"},
		{name: "python filename not a wheel", edit: func(l *Lock) {
			l.Python[0].Filename = "requests-2.31.0.tar.gz"
			l.Python[0].URL = "https://pypi.example/requests-2.31.0.tar.gz"
		}, want: "python[0] (requests)"},
		{name: "python sha256 too short", edit: func(l *Lock) { l.Python[2].SHA256 = "abcd" }, want: "python[2] (urllib3)"},
		{name: "python sha256 upper case", edit: func(l *Lock) { l.Python[2].SHA256 = strings.ToUpper(testSHA(0xab)) }, want: "python[2] (urllib3)"},
		{name: "python sha256 not hex", edit: func(l *Lock) { l.Python[2].SHA256 = strings.Repeat("g", 64) }, want: "python[2] (urllib3)"},
		{name: "python size 0", edit: func(l *Lock) { l.Python[0].Size = 0 }, want: "python[0] (requests)"},
		{name: "python size negative", edit: func(l *Lock) { l.Python[0].Size = -1 }, want: "python[0] (requests)"},
		{name: "python listed twice", edit: func(l *Lock) { l.Python = append(l.Python, l.Python[0]) }, want: "python[3] (requests)"},
		{name: "python url of another file", edit: func(l *Lock) { l.Python[0].URL = "https://pypi.example/evil-1.0-py3-none-any.whl" }, want: "python[0] (requests)"},
		{name: "python url suffix without a slash", edit: func(l *Lock) { l.Python[0].URL = "https://pypi.example/xrequests-2.31.0-py3-none-any.whl" }, want: "python[0] (requests)"},
		// The URL is what ties an entry's name (what the policy checks) to
		// the bytes installed: a query or fragment that merely ends with
		// the filename fetches another file.
		{name: "python url of another file behind a fragment", edit: func(l *Lock) {
			l.Python[0].URL = "https://pypi.example/evil-1.0-py3-none-any.whl#/" + l.Python[0].Filename
		}, want: "python[0] (requests)"},
		{name: "python url of another file behind a query", edit: func(l *Lock) {
			l.Python[0].URL = "https://pypi.example/evil-1.0-py3-none-any.whl?/" + l.Python[0].Filename
		}, want: "python[0] (requests)"},
		{name: "python url with a control character", edit: func(l *Lock) {
			l.Python[0].URL = "https://pypi.example/\x1b[2J/" + l.Python[0].Filename
		}, want: "python[0] (requests)"},

		{name: "js path traversal", edit: func(l *Lock) { l.JavaScript[0].Path = "node_modules/../../etc" }, want: "javascript[0] (left-pad)"},
		{name: "js path traversal ending in the name", edit: func(l *Lock) { l.JavaScript[0].Path = "node_modules/../../node_modules/left-pad" }, want: "javascript[0] (left-pad)"},
		{name: "js path absolute", edit: func(l *Lock) { l.JavaScript[0].Path = "/node_modules/left-pad" }, want: "javascript[0] (left-pad)"},
		{name: "js path outside node_modules", edit: func(l *Lock) { l.JavaScript[0].Path = "left-pad" }, want: "javascript[0] (left-pad)"},
		{name: "js path not ending in the name", edit: func(l *Lock) { l.JavaScript[0].Path = "node_modules/right-pad" }, want: "javascript[0] (left-pad)"},
		{name: "js path ending in a longer name", edit: func(l *Lock) { l.JavaScript[0].Path = "node_modules/xleft-pad" }, want: "javascript[0] (left-pad)"},
		{name: "js path with a trailing slash", edit: func(l *Lock) { l.JavaScript[0].Path = "node_modules/left-pad/" }, want: "javascript[0] (left-pad)"},
		{name: "js path listed twice", edit: func(l *Lock) { l.JavaScript = append(l.JavaScript, l.JavaScript[0]) }, want: "javascript[5] (left-pad)"},
		// The policy checks the name; a name that is a path fragment
		// ("debug/node_modules/ms") matches no rule written for "ms".
		{name: "js name spanning path segments", edit: func(l *Lock) { l.JavaScript[3].Name = "debug/node_modules/ms" }, want: "javascript[3] (debug/node_modules/ms)"},
		{name: "js integrity sha1", edit: func(l *Lock) {
			l.JavaScript[1].Integrity = "sha1-" + base64.StdEncoding.EncodeToString(make([]byte, 20))
		}, want: "javascript[1] (@types/node)"},
		{name: "js integrity too short", edit: func(l *Lock) {
			l.JavaScript[1].Integrity = "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, 63))
		}, want: "javascript[1] (@types/node)"},
		{name: "js integrity too long", edit: func(l *Lock) {
			l.JavaScript[1].Integrity = "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, 65))
		}, want: "javascript[1] (@types/node)"},
		{name: "js integrity empty", edit: func(l *Lock) { l.JavaScript[1].Integrity = "" }, want: "javascript[1] (@types/node)"},
		{name: "js sha256 bad", edit: func(l *Lock) { l.JavaScript[2].SHA256 = "xyz" }, want: "javascript[2] (debug)"},
		{name: "js size 0", edit: func(l *Lock) { l.JavaScript[2].Size = 0 }, want: "javascript[2] (debug)"},
		{name: "js url with a control character", edit: func(l *Lock) { l.JavaScript[0].URL += "\n" }, want: "javascript[0] (left-pad)"},
		{name: "js url with a bidi character", edit: func(l *Lock) { l.JavaScript[0].URL += "\u202e" }, want: "javascript[0] (left-pad)"},
		{name: "js version with a control character", edit: func(l *Lock) { l.JavaScript[0].Version = "1.3.0\x07" }, want: "javascript[0] (left-pad)"},
		// A tarball of another package under this name is refused when
		// it is built, by its package.json (TestTarballIdentity): registries
		// may use any tarball URL.

		{name: "requested python with a control character", edit: func(l *Lock) { l.Requested.Python[0] = "requests\x1b[31m" }, want: "requested"},
		{name: "requested javascript with a newline", edit: func(l *Lock) { l.Requested.JavaScript[0] = "left-pad\nx" }, want: "requested"},
		{name: "requested not ascii", edit: func(l *Lock) { l.Requested.JavaScript[0] = "left-pad\u200f" }, want: "requested"},
		{name: "requested too long", edit: func(l *Lock) { l.Requested.Python[0] = strings.Repeat("a", 2049) }, want: "requested"},

		{name: "too many python entries", edit: func(l *Lock) {
			l.Python = nil
			for i := range DefaultMaxLayerPackages + 1 {
				l.Python = append(l.Python, pyEntry(fmt.Sprintf("p%d", i), fmt.Sprintf("p%d", i), "1.0", byte(i)))
			}
		}, want: fmt.Sprint(DefaultMaxLayerPackages)},
		{name: "too many javascript entries", edit: func(l *Lock) {
			l.JavaScript = nil
			for i := range DefaultMaxLayerPackages + 1 {
				n := fmt.Sprintf("p%d", i)
				l.JavaScript = append(l.JavaScript, jsEntry(n, "node_modules/"+n, "1.0.0", byte(i)))
			}
		}, want: fmt.Sprint(DefaultMaxLayerPackages)},
		{name: "too many requested", edit: func(l *Lock) {
			l.Requested.Python = nil
			for i := range DefaultMaxLayerPackages + 1 {
				l.Requested.Python = append(l.Requested.Python, fmt.Sprintf("p%d", i))
			}
		}, want: fmt.Sprint(DefaultMaxLayerPackages)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := validLock()
			if tt.edit != nil {
				tt.edit(l)
			}
			b := lockJSON(t, l)
			if tt.text != nil {
				b = tt.text(b)
			}
			_, err := ParseLock(b)
			if err == nil {
				t.Fatal("ParseLock accepted it")
			}
			if !errors.Is(err, ErrBadLock) {
				t.Errorf("error %v is not ErrBadLock", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

func TestParseLockSizeBound(t *testing.T) {
	b := lockJSON(t, validLock())
	b = append(b, bytes.Repeat([]byte("\n"), MaxLockBytes-len(b))...)
	if _, err := ParseLock(b); err != nil {
		t.Fatalf("a lock of exactly MaxLockBytes: %v", err)
	}
	if _, err := ParseLock(append(b, '\n')); !errors.Is(err, ErrBadLock) {
		t.Fatalf("a lock one byte over MaxLockBytes: %v, want ErrBadLock", err)
	}
}

func TestLockMarshalRoundTrip(t *testing.T) {
	l := validLock()
	orig := validLock()
	first := l.Marshal()
	if !reflect.DeepEqual(l, orig) {
		t.Errorf("Marshal changed its receiver's Requested: got %q, want %q", l.Requested, orig.Requested)
	}
	if !bytes.HasSuffix(first, []byte("}\n")) || bytes.HasSuffix(first, []byte("\n\n")) {
		t.Errorf("Marshal does not end in exactly one newline: %q", first[max(0, len(first)-8):])
	}
	parsed, err := ParseLock(first)
	if err != nil {
		t.Fatalf("ParseLock(Marshal()): %v\n%s", err, first)
	}
	if !slices.IsSortedFunc(parsed.Python, func(a, b PyEntry) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("python entries not sorted by name: %+v", parsed.Python)
	}
	if !slices.IsSortedFunc(parsed.JavaScript, func(a, b JSEntry) int { return strings.Compare(a.Path, b.Path) }) {
		t.Errorf("javascript entries not sorted by path: %+v", parsed.JavaScript)
	}
	if !slices.IsSorted(parsed.Requested.Python) || !slices.IsSorted(parsed.Requested.JavaScript) {
		t.Errorf("requested not sorted: %+v", parsed.Requested)
	}
	if got, want := len(parsed.Python)+len(parsed.JavaScript), len(orig.Python)+len(orig.JavaScript); got != want {
		t.Errorf("round trip has %d entries, want %d", got, want)
	}
	second := parsed.Marshal()
	if !bytes.Equal(second, first) {
		t.Errorf("Marshal is not stable:\nfirst:\n%s\nsecond:\n%s", first, second)
	}
	if third := validLock().Marshal(); !bytes.Equal(third, first) {
		t.Errorf("Marshal of an equal lock differs:\n%s\n%s", first, third)
	}

	// Version is always the current one, whatever the receiver says.
	z := validLock()
	z.Version = 0
	if _, err := ParseLock(z.Marshal()); err != nil {
		t.Errorf("Marshal of a zero-version lock: %v", err)
	}
}

func TestLockDigest(t *testing.T) {
	base := validLock()
	d := base.Digest()
	if len(d) != 64 || !hexSHA256RE.MatchString(d) {
		t.Fatalf("Digest = %q, want 64 hex digits", d)
	}
	if again := validLock().Digest(); again != d {
		t.Errorf("Digest of an equal lock = %s, want %s", again, d)
	}

	t.Run("ignores requested", func(t *testing.T) {
		l := validLock()
		l.Requested = Requested{Python: []string{"other"}}
		if got := l.Digest(); got != d {
			t.Errorf("Digest changed with Requested: %s, want %s", got, d)
		}
		l.Requested = Requested{}
		if got := l.Digest(); got != d {
			t.Errorf("Digest changed with no Requested: %s, want %s", got, d)
		}
	})

	// Every field of every entry kind changes the digest: reflection, so
	// that a field added later is covered too.
	mutate := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int64, reflect.Int:
			v.SetInt(v.Int() + 1)
		default:
			t.Fatalf("no mutation for a %s field", v.Kind())
		}
	}
	for _, kind := range []string{"python", "javascript"} {
		var typ reflect.Type
		if kind == "python" {
			typ = reflect.TypeFor[PyEntry]()
		} else {
			typ = reflect.TypeFor[JSEntry]()
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			t.Run(kind+" "+f.Name, func(t *testing.T) {
				l := validLock()
				var e reflect.Value
				if kind == "python" {
					e = reflect.ValueOf(&l.Python[1]).Elem()
				} else {
					e = reflect.ValueOf(&l.JavaScript[1]).Elem()
				}
				mutate(e.Field(i))
				if got := l.Digest(); got == d {
					t.Errorf("Digest did not change with %s.%s", kind, f.Name)
				}
			})
		}
	}

	t.Run("entry removed", func(t *testing.T) {
		l := validLock()
		l.JavaScript = l.JavaScript[:len(l.JavaScript)-1]
		if l.Digest() == d {
			t.Error("Digest did not change when an entry was removed")
		}
	})
	t.Run("entries moved between languages", func(t *testing.T) {
		py, js := &Lock{Python: validLock().Python}, &Lock{JavaScript: validLock().JavaScript}
		if (&Lock{}).Digest() == py.Digest() || (&Lock{}).Digest() == js.Digest() || py.Digest() == js.Digest() {
			t.Error("Digest does not tell apart an empty lock, a python-only lock and a javascript-only lock")
		}
	})
}

func TestLockEmpty(t *testing.T) {
	tests := []struct {
		name string
		l    *Lock
		want bool
	}{
		{name: "nil", l: nil, want: true},
		{name: "zero", l: &Lock{}, want: true},
		{name: "only requested", l: &Lock{Requested: Requested{Python: []string{"x"}}}, want: true},
		{name: "python", l: &Lock{Python: validLock().Python}, want: false},
		{name: "javascript", l: &Lock{JavaScript: validLock().JavaScript}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.Empty(); got != tt.want {
				t.Errorf("Empty() = %v, want %v", got, tt.want)
			}
		})
	}
}
