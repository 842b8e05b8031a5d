package packages

import "github.com/sandpit-dev/sandpit/internal/npm"

// jsRange parses an npm version range of a policy rule.
func jsRange(s string) (npm.Range, error) { return npm.ParseRange(s) }

func jsRangeContains(rng, version string) (bool, error) {
	r, err := npm.ParseRange(rng)
	if err != nil {
		return false, err
	}
	v, err := npm.ParseVersion(version)
	if err != nil {
		return false, err
	}
	return r.Contains(v), nil
}
