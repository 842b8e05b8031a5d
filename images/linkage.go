package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	goruntime "runtime"
	"slices"
	"strings"
)

// archs maps GOARCH to the ELF machine of its binaries and to Debian's
// multiarch triplet, the directory its libraries are in.
var archs = map[string]struct {
	machine elf.Machine
	triplet string
}{
	"amd64": {elf.EM_X86_64, "x86_64-linux-gnu"},
	"arm64": {elf.EM_AARCH64, "aarch64-linux-gnu"},
}

// Bounds on what checkLinkage reads of a rootfs layer: a library larger
// than maxLibrary is refused rather than read into memory, and a symlink
// chain longer than maxSymlinks (the kernel's limit) is a missing file.
const (
	maxLibrary  = 256 << 20
	maxSymlinks = 40
)

// checkELF accepts an executable (or PIE) for the architecture images are
// built for.
func checkELF(f *elf.File) error {
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("ELF type %s is not an executable: %w", f.Type, ErrServerBinary)
	}
	if a, ok := archs[goruntime.GOARCH]; ok && f.Machine != a.machine {
		return fmt.Errorf("it is built for %s, the image for %s (%s): %w", f.Machine, goruntime.GOARCH, a.machine, ErrServerBinary)
	}
	return nil
}

// libDirs are where Debian's loader looks for a library: its ld.so.conf
// (multiarch and /usr/local/lib), then the built-in default dirs.
func libDirs() []string {
	var dirs []string
	if a, ok := archs[goruntime.GOARCH]; ok {
		dirs = append(dirs, "usr/local/lib/"+a.triplet, "lib/"+a.triplet, "usr/lib/"+a.triplet)
	}
	return append(dirs, "usr/local/lib", "lib", "usr/lib", "lib64", "usr/lib64")
}

// checkLinkage is ldd against a rootfs layer: bin's loader and every
// library it needs are in the layer, and those libraries define every
// symbol version bin asks of them. A static binary passes at once.
func checkLinkage(bin *elf.File, layer *os.File) error {
	interp, err := interpreter(bin)
	if err != nil {
		return fmt.Errorf("read its loader: %v: %w", err, ErrServerBinary)
	}
	needed, err := bin.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("read the libraries it needs: %v: %w", err, ErrServerBinary)
	}
	if interp == "" && len(needed) == 0 {
		return nil
	}
	idx, err := indexLayer(layer)
	if err != nil {
		return err
	}
	if interp != "" {
		if _, ok := idx.resolve(interp); !ok {
			return fmt.Errorf("its loader %s is not in the image: %w", interp, ErrServerBinary)
		}
	}
	// A binary without version needs (no .gnu.version_r) has nothing more
	// to check than its libraries' presence.
	vneeds, _ := bin.DynamicVersionNeeds()
	libs := map[string]string{} // library name → its file in the layer
	var missing []string
	for _, name := range needed {
		if file, ok := idx.find(name); ok {
			libs[name] = file
		} else {
			missing = append(missing, name)
		}
	}
	for _, n := range vneeds {
		if _, ok := libs[n.Name]; !ok && !slices.Contains(missing, n.Name) {
			if file, ok := idx.find(n.Name); ok {
				libs[n.Name] = file
			} else {
				missing = append(missing, n.Name)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("it needs %s, which the image does not have: %w", strings.Join(missing, ", "), ErrServerBinary)
	}
	want := map[string]bool{}
	for _, n := range vneeds {
		want[libs[n.Name]] = true
	}
	contents, err := readLayerFiles(layer, want)
	if err != nil {
		return err
	}
	var lacking []string
	for _, n := range vneeds {
		defined := definedVersions(contents[libs[n.Name]])
		for _, d := range n.Needs {
			if !defined[d.Dep] {
				lacking = append(lacking, d.Dep+" of "+n.Name)
			}
		}
	}
	if len(lacking) > 0 {
		slices.Sort(lacking)
		return fmt.Errorf("it needs %s, which the image's libraries do not define (it was linked against newer ones): %w", strings.Join(lacking, ", "), ErrServerBinary)
	}
	return nil
}

// interpreter is the loader bin names (PT_INTERP), or "" for a static one.
func interpreter(bin *elf.File) (string, error) {
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			return strings.TrimRight(string(b), "\x00"), err
		}
	}
	return "", nil
}

// definedVersions are the symbol versions a shared library defines; none
// when it is unreadable or unversioned.
func definedVersions(lib []byte) map[string]bool {
	defined := map[string]bool{}
	f, err := elf.NewFile(bytes.NewReader(lib))
	if err != nil {
		return defined
	}
	vs, err := f.DynamicVersions()
	if err != nil {
		return defined
	}
	for _, v := range vs {
		defined[v.Name] = true
	}
	return defined
}

// layerIndex is a layer's entries by clean relative path: enough to
// resolve paths through its symlinks without unpacking it.
type layerIndex map[string]layerEntry

type layerEntry struct {
	typ  byte
	link string
}

// cleanName is a tar entry's name as a clean path relative to the root
// ("" for the root itself).
func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// indexLayer reads a layer's headers; tar skips the contents with Seek.
func indexLayer(f *os.File) (layerIndex, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read rootfs layer: %w", err)
	}
	idx := layerIndex{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return idx, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read rootfs layer %s: %w", f.Name(), err)
		}
		if name := cleanName(h.Name); name != "" {
			idx[name] = layerEntry{typ: h.Typeflag, link: h.Linkname}
		}
	}
}

// resolve follows p through the layer's symlinks, as the kernel would
// inside the rootfs, to a regular file; ok is false when there is none.
// A hardlink resolves to the entry that holds its content.
func (x layerIndex) resolve(p string) (string, bool) {
	parts := strings.Split(cleanName(p), "/")
	cur, hops := "", 0
	for len(parts) > 0 {
		part := parts[0]
		parts = parts[1:]
		if part == "" {
			continue
		}
		next := path.Join(cur, part)
		e, ok := x[next]
		if !ok {
			return "", false
		}
		if e.typ == tar.TypeSymlink {
			if hops++; hops > maxSymlinks {
				return "", false
			}
			target := e.link
			if !path.IsAbs(target) {
				target = path.Join("/", cur, target)
			}
			parts = append(strings.Split(cleanName(target), "/"), parts...)
			cur = ""
			continue
		}
		cur = next
	}
	e, ok := x[cur]
	if ok && e.typ == tar.TypeLink {
		cur = cleanName(e.link)
		e, ok = x[cur]
	}
	if !ok || e.typ != tar.TypeReg {
		return "", false
	}
	return cur, true
}

// find looks a library up where the loader would.
func (x layerIndex) find(name string) (string, bool) {
	if strings.Contains(name, "/") {
		return x.resolve(name)
	}
	for _, d := range libDirs() {
		if file, ok := x.resolve(path.Join(d, name)); ok {
			return file, true
		}
	}
	return "", false
}

// readLayerFiles reads the contents of the regular files named in want.
func readLayerFiles(f *os.File, want map[string]bool) (map[string][]byte, error) {
	got := map[string][]byte{}
	if len(want) == 0 {
		return got, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read rootfs layer: %w", err)
	}
	tr := tar.NewReader(f)
	for len(got) < len(want) {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read rootfs layer %s: %w", f.Name(), err)
		}
		name := cleanName(h.Name)
		if !want[name] || got[name] != nil {
			continue
		}
		if h.Size > maxLibrary {
			return nil, fmt.Errorf("rootfs layer: library %s is %d MiB, more than the %d MiB checked: %w", name, h.Size>>20, maxLibrary>>20, ErrServerBinary)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read rootfs layer %s: %w", f.Name(), err)
		}
		got[name] = b
	}
	return got, nil
}
