package runtime

import "github.com/sandpit-dev/sandpit"

// Sentinels callers branch on with errors.Is; each is of a sandpit error
// class, which is all the MCP boundary looks at. The engine's own
// (ErrUnavailable, ErrImageMissing, …) are in containerd.go.
var (
	ErrInvalidRequest  = sandpit.Define(sandpit.ErrInvalidArgument, "invalid request")
	ErrUnknownLanguage = sandpit.Define(sandpit.ErrInvalidArgument, "unknown language")
)
