// Package npm resolves, fetches and checks npm package tarballs from one
// operator-configured registry, on the host side. Nothing here runs
// package code (there are no install scripts, ever) or talks to a sandbox.
//
// Its API, for the install_packages tool (language "javascript"):
//
//	specs: ParseSpec(s) (Spec, error) for each requested "name@range"
//	plan:  (&Resolver{Client: c}).Resolve(ctx, specs) (*Plan, error)
//	fetch: FetchTarball(ctx, c, cache, planned) (path, sha256hex string, err error)
//	check: CheckTarball(path, TarLimits{}) error, then unpack each at
//	       Planned.Path (its top directory stripped) in the sandbox, by
//	       ExtractTarball's rules
//
// The cache is internal/artifact's, the very directory pypi.Cache uses
// (a *pypi.Cache's embedded *artifact.Cache is one).
//
// Its guarantees:
//
//   - A spec is a registry name and a version, range or the dist-tag
//     latest. ParseSpec refuses URLs, git and hosted-git shorthands
//     (git+…, github:, user/repo), file: and paths, tarballs, npm:
//     aliases, other dist-tags, control characters, non-ASCII text,
//     surrounding spaces and names npm would not publish today, each with
//     what to write instead. Dependencies that are not registry versions
//     are refused the same way, naming who depends on them.
//   - Ranges are npm's: caret, tilde, x-ranges, hyphen ranges and ||, with
//     prereleases only when a comparator of the same set names one of the
//     same major.minor.patch.
//   - One Client is one registry. Scoped names are resolved on it too,
//     never on another, so a public package cannot stand in for a private
//     one (dependency confusion). Tarballs come only from the registry's
//     host or hosts the operator lists in Client.AllowHosts, over http or
//     https, never downgrading an https registry to http, and only when
//     the registry publishes a sha512 integrity for them: a version with
//     only a sha1 shasum is refused by name. Redirects obey the same rule.
//   - Every byte kept is verified: FetchTarball streams a tarball into the
//     cache's locked temporary file and keeps it (as sha256/<hex>, with a
//     sha512/<hex> alias that later fetches hit without a request) only
//     when its sha512 is the published one; a mismatch is ErrIntegrity and
//     leaves nothing behind.
//   - Nothing runs. A Plan says which packages have install scripts (or a
//     binding.gyp); they are never run, and a note says so.
//   - CheckTarball refuses a tarball with entries outside one top
//     directory, unsafe names (absolute, "..", "." or empty components,
//     backslashes, control characters) as the tar reader sees them after
//     PAX and GNU long-name headers, links, devices, FIFOs, a global PAX
//     header that sets anything but a comment, duplicates, file/directory
//     clashes, no package.json, too many entries or bytes, or a
//     decompression ratio that marks a gzip bomb, counted as it inflates.
//     ExtractTarball unpacks one that passes into an empty directory
//     through an os.Root, and empties it again on failure.
//
// Everything a registry or a caller can grow is bounded where it arrives,
// and every refusal is an error of one of sandpit's classes (the Err*
// variables say which). Defaults, each a field or constant:
//
//	spec text                    1,000 bytes (MaxSpecLen); name 214 bytes (MaxNameLen); 32 ||-alternatives
//	version text in a packument  256 bytes
//	one packument                32 MiB after decoding (Client.MaxPackumentBytes)
//	one packument request        30 s, headers to last byte (Client.Timeout)
//	dependencies of one version  1,000, all kinds together (more: the version is refused)
//	one tarball                  512 MiB (Client.MaxArtifactBytes), 10 min (Client.DownloadTimeout)
//	redirects                    3 per request (Client.MaxRedirects), on allowed hosts only
//	specs per Resolve            200 (Resolver.MaxSpecs), refused before any request
//	packages in a plan           500 (Resolver.MaxPackages); dependency chain 50 (Resolver.MaxDepth)
//	packument reads and picks    2,000 (Resolver.MaxSteps)
//	packument bytes per Resolve  1 GiB (Resolver.MaxDownloadBytes)
//	a tarball (TarLimits)        512 MiB file; 50,000 entries; 512 MiB unpacked, counted as read;
//	                             200:1 decompression once over 1 MiB; names of 1,024 bytes
//	notes in a Plan              50, then a count
//
// The resolver works as npm does, simply. Per dependency edge it reuses
// the copy Node's module lookup would find from the dependent when that
// copy satisfies the range; otherwise it picks the dist-tag latest when it
// satisfies the range and is not deprecated, else the newest satisfying
// version that is not deprecated, else the newest deprecated one (with a
// note), skipping refused versions (with a note) and refusing when only
// refused ones satisfy. It places a new copy as high in node_modules as
// it can: at the top when no other copy of the name is in the way and no
// package already placed below would then see it instead of the copy it
// relies on; nested under the dependent otherwise
// (node_modules/a/node_modules/b). Cycles end at a copy already placed.
// Dependencies are required; optionalDependencies are resolved, and one
// that fails (or whose own dependencies fail) is left out with a note;
// peerDependencies are not installed: a note names each one the tree does
// not satisfy; devDependencies are ignored. It never backtracks: when a
// range has no version, it reports the conflict with who required it.
// Requests are made one at a time, breadth first, names in order, so a
// Plan depends only on the registry's answers; its Packages are sorted by
// Path.
package npm

import (
	"errors"
	"fmt"

	"github.com/sandpit-dev/sandpit"
)

// Errors callers branch on with errors.Is. Each wrapped error's text says
// what was refused and what to do instead.
var (
	// ErrInvalidSpec: a spec, name or range is not one this package
	// accepts (a URL, git, a path, an alias, a dist-tag, a bad name).
	ErrInvalidSpec = sandpit.Define(sandpit.ErrInvalidArgument, "invalid package spec")
	// ErrNoPackage: the registry has no package of that name.
	ErrNoPackage = sandpit.Define(sandpit.ErrNotFound, "no such package on the registry")
	// ErrNoMatch: the package exists but no version of it satisfies a
	// requested range.
	ErrNoMatch = sandpit.Define(sandpit.ErrNotFound, "no matching version")
	// ErrConflict: the requests, or a dependency's range, cannot be met.
	ErrConflict = sandpit.Define(sandpit.ErrInvalidArgument, "conflicting requirements")
	// ErrRefused: the registry offers a version this package will not
	// fetch (no sha512 integrity, a tarball on another host or scheme, a
	// dependency that is not a registry version).
	ErrRefused = sandpit.Define(sandpit.ErrInvalidArgument, "package refused")
	// ErrUnsafeTarball: a tarball failed CheckTarball.
	ErrUnsafeTarball = sandpit.Define(sandpit.ErrInvalidArgument, "unsafe tarball refused")
	// ErrRegistryUnavailable: the registry did not answer, answered too
	// slowly, or answered with an error status.
	ErrRegistryUnavailable = sandpit.Define(sandpit.ErrUnavailable, "npm registry unavailable")
	// ErrBadRegistry: the registry answered with something unusable (a
	// malformed packument, one of another package, a redirect off its
	// hosts).
	ErrBadRegistry = sandpit.Define(sandpit.ErrUnavailable, "npm registry answered badly")
	// ErrIntegrity: a tarball's bytes do not match its published integrity.
	ErrIntegrity = sandpit.Define(sandpit.ErrUnavailable, "integrity mismatch")
	// ErrTooLarge: a bound was reached (bytes, entries, packages, depth,
	// steps).
	ErrTooLarge = sandpit.Define(sandpit.ErrResourceExhausted, "limit reached")
	// ErrNotConfigured: no registry is configured.
	ErrNotConfigured = sandpit.Define(sandpit.ErrUnavailable, "no npm registry is configured")
)

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
