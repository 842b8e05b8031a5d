package pypi

import (
	"archive/zip"
	"fmt"
	"io"
	"strings"
)

// maxRequiresDist bounds the dependencies one package may declare.
const maxRequiresDist = 1000

// Metadata is what the resolver reads from a wheel's METADATA (core
// metadata, PEP 566/643): its identity and what it needs.
type Metadata struct {
	Name           string // as written
	Version        string
	RequiresPython string
	RequiresDist   []string
	ProvidesExtra  []string
}

// ParseMetadata reads the header fields of a METADATA file (an email-style
// header block; the description after it is ignored).
func ParseMetadata(b []byte) (Metadata, error) {
	var m Metadata
	var key, val string
	flush := func() error {
		if key == "" {
			return nil
		}
		v := strings.TrimSpace(val)
		switch strings.ToLower(key) {
		case "name":
			m.Name = v
		case "version":
			m.Version = v
		case "requires-python":
			m.RequiresPython = v
		case "requires-dist":
			if len(m.RequiresDist) >= maxRequiresDist {
				return limitf("", "METADATA declares over %d dependencies", maxRequiresDist)
			}
			m.RequiresDist = append(m.RequiresDist, v)
		case "provides-extra":
			m.ProvidesExtra = append(m.ProvidesExtra, Normalize(v))
		}
		key, val = "", ""
		return nil
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			break // the body (description) starts
		}
		if line[0] == ' ' || line[0] == '\t' {
			if key != "" {
				val += " " + strings.TrimSpace(line)
			}
			continue
		}
		if err := flush(); err != nil {
			return Metadata{}, err
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, val = k, v
	}
	if err := flush(); err != nil {
		return Metadata{}, err
	}
	if m.Name == "" || m.Version == "" {
		return Metadata{}, fmt.Errorf("%w: METADATA has no Name or Version", ErrBadIndex)
	}
	return m, nil
}

// Dependencies are the Requires-Dist entries that apply to env with the
// given extras. Entries whose marker does not hold are left out; entries
// whose marker cannot be evaluated are left out and listed in skipped with
// the reason. An entry that is not an acceptable requirement (a direct
// URL reference, a malformed line) is an error naming it.
func (m Metadata) Dependencies(extras []string, env Env) (deps []Requirement, skipped []string, err error) {
	for _, line := range m.RequiresDist {
		r, err := parseRequirement(line, true)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s declares a dependency that is refused: %w", m.Name, m.Version, err)
		}
		ok, err := r.Marker.Eval(env, extras)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s (of %s %s): %v", line, m.Name, m.Version, err))
			continue
		}
		if ok {
			r.Marker = nil
			deps = append(deps, r)
		}
	}
	return deps, skipped, nil
}

// ReadWheelMetadata returns the bytes of the METADATA file in the wheel
// at path ({name}-{version}.dist-info/METADATA), at most max bytes. It
// reads nothing else; CheckWheel is what vets the rest.
func ReadWheelMetadata(path string, max int64) ([]byte, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a readable zip: %v", ErrUnsafeWheel, baseName(path), err)
	}
	defer zr.Close()
	var found *zip.File
	for _, f := range zr.File {
		dir, file, ok := strings.Cut(f.Name, "/")
		if !ok || file != "METADATA" || !strings.HasSuffix(dir, ".dist-info") {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%w: %s has more than one .dist-info/METADATA", ErrUnsafeWheel, baseName(path))
		}
		found = f
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s has no .dist-info/METADATA", ErrUnsafeWheel, baseName(path))
	}
	if found.UncompressedSize64 > uint64(max) {
		return nil, limitf("", "the METADATA of %s is %d bytes, over the %d-byte limit", baseName(path), found.UncompressedSize64, max)
	}
	rc, err := found.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsafeWheel, baseName(path), err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: METADATA: %v", ErrUnsafeWheel, baseName(path), err)
	}
	if int64(len(b)) > max {
		return nil, limitf("", "the METADATA of %s is over the %d-byte limit", baseName(path), max)
	}
	return b, nil
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
