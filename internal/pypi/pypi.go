// Package pypi resolves, fetches and checks Python wheels from one
// operator-configured package index (PEP 503 HTML or PEP 691 JSON), on the
// host side. Nothing here runs package code or talks to a sandbox.
//
// Its guarantees:
//
//   - A requirement is a name, extras and version clauses (a PEP 508
//     subset). ParseRequirement refuses direct references (name @ URL),
//     URLs, paths, VCS links, pip options, environment markers, control
//     characters and non-ASCII text, each with the reason and what to
//     write instead.
//   - Artifacts come only from the index's own host, or hosts the operator
//     lists in Client.AllowHosts (PyPI keeps its files on
//     files.pythonhosted.org), over http or https, never downgrading an
//     https index to http, and only when the index publishes a sha256 for
//     them. Redirects obey the same rule and are at most three.
//   - Every byte kept is verified: Cache.Fetch streams an artifact into a
//     locked temporary file while hashing it and renames it to
//     sha256/<hex> only when the hash matches, so a cache entry is always
//     a whole, verified artifact; a mismatch leaves nothing behind and
//     names the file, the published hash and the received one. PEP 658
//     metadata is verified against its own published hash before it is
//     parsed.
//   - Only wheels are planned. A package whose only distribution that fits
//     is an sdist is refused with an *SdistError naming it: building it
//     would run its setup.py.
//   - CheckWheel refuses a wheel with unsafe entry names (absolute, "..",
//     backslashes, drive letters, control characters), symlinks or other
//     special files, duplicates, file/directory clashes, overlapping
//     entries, too many entries or bytes, a compression ratio that marks a
//     zip bomb, or contents that do not match its RECORD. ExtractWheel
//     unpacks a wheel that passes into an empty directory through an
//     os.Root, hashing as it writes, and empties it again on failure.
//
// Everything an index or a caller can grow is bounded where it arrives,
// and every refusal is an error of one of sandpit's classes (the Err*
// variables say which). Defaults, each a field that can be changed:
//
//	requirement text              1,000 bytes; name 100 characters; 20 version clauses; 20 extras
//	version text                  128 bytes; 20 release numbers; numbers of at most 19 digits
//	index page (one project)      8 MiB after decoding (Client.MaxPageBytes); 10,000 files (Client.MaxFiles)
//	one page or metadata request  30 s, headers to last byte (Client.Timeout)
//	one artifact                  512 MiB (Client.MaxArtifactBytes), 10 min (Client.DownloadTimeout)
//	one METADATA                  4 MiB (Client.MaxMetadataBytes); 1,000 Requires-Dist lines
//	redirects                     3 per request (Client.MaxRedirects), on allowed hosts only
//	requirements per Resolve      200 (Resolver.MaxRequirements), refused before any request
//	packages in a resolution      500 (Resolver.MaxPackages); dependency depth 50 (Resolver.MaxDepth)
//	picks and metadata reads      2,000 (Resolver.MaxSteps)
//	bytes Resolve downloads       1 GiB (Resolver.MaxDownloadBytes)
//	a wheel                       512 MiB file; 50,000 entries; 2 GiB unpacked, counted as read;
//	                              200:1 compression per entry over 1 MiB (WheelLimits)
//	notes in a Plan               50, then a count
//
// The resolver is deliberately simple. Per name it picks the newest
// version whose best wheel fits the target's tags and Python version, is
// not yanked (unless pinned with ==) and satisfies every constraint seen so
// far; it follows dependencies breadth first, evaluating their markers for
// the target and the extras asked; and when a later constraint excludes a
// pick, it picks that package again and withdraws what the old pick
// required. It never backtracks into the packages that imposed a
// constraint: when no version satisfies them all, it reports the conflict
// with each constraint and who imposed it. Requests are made one at a
// time.
package pypi

import (
	"errors"
	"fmt"

	"github.com/sandpit-dev/sandpit"
)

// Errors callers branch on with errors.Is. Each wrapped error's text says
// what was refused and what to do instead.
var (
	// ErrInvalidRequirement: a requirement string is not one this package
	// accepts (a URL, a path, a marker, a bad name or specifier).
	ErrInvalidRequirement = sandpit.Define(sandpit.ErrInvalidArgument, "invalid requirement")
	// ErrInvalidVersion: a version or specifier is not valid PEP 440.
	ErrInvalidVersion = sandpit.Define(sandpit.ErrInvalidArgument, "invalid version")
	// ErrNoProject: the index has no project of that name.
	ErrNoProject = sandpit.Define(sandpit.ErrNotFound, "no such package on the index")
	// ErrNoMatch: the project exists but no file of it fits the request
	// and the target (versions, Python version, platform tags, yanked).
	ErrNoMatch = sandpit.Define(sandpit.ErrNotFound, "no matching wheel")
	// ErrSdistOnly: only a source distribution fits; see SdistError.
	ErrSdistOnly = sandpit.Define(sandpit.ErrInvalidArgument, "source distribution refused")
	// ErrConflict: the requirements cannot all hold at once.
	ErrConflict = sandpit.Define(sandpit.ErrInvalidArgument, "conflicting requirements")
	// ErrRefusedFile: the index offers a file this package will not fetch
	// (another host, another scheme, no sha256, a malformed name).
	ErrRefusedFile = sandpit.Define(sandpit.ErrInvalidArgument, "file refused")
	// ErrUnsafeWheel: a wheel failed CheckWheel.
	ErrUnsafeWheel = sandpit.Define(sandpit.ErrInvalidArgument, "unsafe wheel refused")
	// ErrIndexUnavailable: the index did not answer, answered too slowly,
	// or answered with an error status.
	ErrIndexUnavailable = sandpit.Define(sandpit.ErrUnavailable, "package index unavailable")
	// ErrBadIndex: the index answered with something unusable (malformed
	// page, a redirect off its hosts, metadata that contradicts the file).
	ErrBadIndex = sandpit.Define(sandpit.ErrUnavailable, "package index answered badly")
	// ErrHashMismatch: an artifact's bytes do not match its published hash.
	ErrHashMismatch = sandpit.Define(sandpit.ErrUnavailable, "hash mismatch")
	// ErrTooLarge: a bound was reached (bytes, files, packages, depth).
	ErrTooLarge = sandpit.Define(sandpit.ErrResourceExhausted, "limit reached")
	// ErrNotConfigured: no index is configured.
	ErrNotConfigured = sandpit.Define(sandpit.ErrUnavailable, "no Python package index is configured")
)

// SdistError says that a package has no wheel for the target, only a source
// distribution, which would run setup.py to build. errors.Is(err,
// ErrSdistOnly) holds; callers that offer an opt-in (building inside a
// no-network sandbox) name it in their own message.
type SdistError struct {
	Project  string // normalized name
	Version  string
	Filename string // the sdist that fits
	Target   string // the target, e.g. "CPython 3.11 manylinux_2_35_x86_64"
}

func (e *SdistError) Error() string {
	return fmt.Sprintf("%s: %s %s has no wheel for this environment (%s): only a source distribution (%s), which would run setup.py",
		ErrSdistOnly, e.Project, e.Version, e.Target, e.Filename)
}

// Unwrap makes errors.Is(err, ErrSdistOnly) hold.
func (e *SdistError) Unwrap() error { return ErrSdistOnly }

// limitf wraps ErrTooLarge with a message; the hint says where the limit is.
func limitf(hint, format string, a ...any) error {
	err := fmt.Errorf("%w: %s", ErrTooLarge, fmt.Sprintf(format, a...))
	if hint == "" {
		return err
	}
	return sandpit.WithHint(err, hint)
}

// isClassed reports whether err already carries one of sandpit's classes.
func isClassed(err error) bool { return sandpit.ClassOf(err) != nil }

var errTimeout = errors.New("timeout")
