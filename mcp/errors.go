package mcp

import (
	"errors"
	"fmt"
	"log/slog"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/runtime"
)

// ArgError is a bad argument the model can correct; its text is shown as is.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

func argErrorf(format string, a ...any) error {
	return &ArgError{Msg: fmt.Sprintf(format, a...)}
}

// toolError is the single mapper from Go errors to MCP tool results. Every
// error a caller can act on becomes an isError result the model reads; only a
// nil result with an error (a broken server) would become a JSON-RPC error,
// and handlers never return one.
func toolError(log *slog.Logger, tool string, err error) *mcpgo.CallToolResult {
	var ae *ArgError
	switch {
	case errors.As(err, &ae):
		return mcpgo.NewToolResultError(ae.Msg)
	case errors.Is(err, runtime.ErrInvalidRequest),
		errors.Is(err, runtime.ErrUnknownLanguage):
		return mcpgo.NewToolResultError(err.Error())
	case errors.Is(err, runtime.ErrImageMissing),
		errors.Is(err, runtime.ErrUnavailable),
		errors.Is(err, runtime.ErrLimitsUnenforceable):
		log.Warn("tool failed: sandbox unavailable", "tool", tool, "err", err)
		return mcpgo.NewToolResultError(err.Error())
	case isDataError(err): // data.go: refused SQL, timeouts, bad schemas or constraints...
		return mcpgo.NewToolResultError(err.Error())
	case isWorkspaceError(err): // snapshots.go: outside the workspace, not found, too large, unknown snapshot...
		return mcpgo.NewToolResultError(err.Error())
	}
	log.Error("tool failed", "tool", tool, "err", err)
	return mcpgo.NewToolResultError(tool + " failed: " + err.Error())
}
