// Package npm resolves, fetches and checks npm package tarballs from one
// operator-configured registry, on the host side. Nothing here runs
// package code (there are no install scripts, ever) or talks to a sandbox.
//
// DOC-PLACEHOLDER
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
