package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
)

func argErrorf(format string, a ...any) error {
	return sandpit.Newf(sandpit.ErrInvalidArgument, format, a...)
}

// toolHints are what a tool adds when an error of a class carries no hint
// of its own: the stores do not know the tools' names, this layer does.
var toolHints = map[string]map[error]string{
	"read_file":              {sandpit.ErrNotFound: "list_files shows what exists"},
	"delete_file":            {sandpit.ErrNotFound: "list_files shows what exists"},
	"move_file":              {sandpit.ErrNotFound: "list_files shows what exists"},
	"list_files":             {sandpit.ErrNotFound: "list_files without a path shows the workspace root"},
	"run_code":               {sandpit.ErrNotFound: "list_files shows what exists"},
	"restore_state_snapshot": {sandpit.ErrNotFound: "list_state_snapshots shows the ids"},
	"delete_state_snapshot":  {sandpit.ErrNotFound: "list_state_snapshots shows the ids"},
	"diff_state_snapshot":    {sandpit.ErrNotFound: "list_state_snapshots shows the ids"},
	"get_run":                {sandpit.ErrNotFound: "get_execution_history lists the runs still recorded"},
	"validate_json_data":     {sandpit.ErrNotFound: "sandbox://schemas lists the named schemas"},
}

// toolError is the single mapper from Go errors to MCP tool results. An
// error of a class (sandpit.ClassOf) is one the model can act on or should
// know about: it reads the error's text and its hint. Any other error is
// internal: its text may name host paths, so it goes to the log under a
// reference and the model gets only that reference. Handlers never return a
// Go error (that would become a JSON-RPC error the model may never see).
func toolError(log *slog.Logger, tool string, err error) *mcpgo.CallToolResult {
	if errors.Is(err, context.Canceled) {
		// The caller went away (or the server is stopping): nobody reads
		// this result, and nothing is wrong with the server.
		log.Info("tool call cancelled", "tool", tool, "err", err)
		return mcpgo.NewToolResultError(tool + " was cancelled")
	}
	class := sandpit.ClassOf(err)
	if class == nil {
		ref := errorRef()
		log.Error("tool failed", "tool", tool, "ref", ref, "err", err)
		return mcpgo.NewToolResultError(tool + " failed with an internal error (ref " + ref + "; the server log has the details). Retrying may help; if it keeps failing, the server or its host needs attention.")
	}
	if class == sandpit.ErrUnavailable {
		log.Warn("tool failed: unavailable", "tool", tool, "err", err)
	}
	// Messages quote names and values sandpit did not write (an SQLite
	// error names the table the caller asked for), of any length.
	msg := textLines(boundError(err.Error()))
	hint := sandpit.HintOf(err)
	if hint == "" {
		hint = toolHints[tool][class]
	}
	if hint != "" {
		msg += "\nhint: " + textLines(hint)
	}
	return mcpgo.NewToolResultError(msg)
}

// errorRef names one internal error in the log.
func errorRef() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Bounds on what an error quotes back: a value a caller or program gave can
// be of any length (a 4,000-character session name), and the error is read
// by the model.
const (
	maxQuotedRunes = 64   // of each Go-quoted value in an error
	maxErrorRunes  = 1000 // of an error's whole message
)

// boundError shortens what msg quotes: each Go-quoted value (as %q writes
// it, whichever package wrote the error) keeps its first maxQuotedRunes
// characters, then "…" and its length; and the whole message keeps its
// first maxErrorRunes characters, for what an error echoes unquoted.
func boundError(msg string) string {
	var b strings.Builder
	for rest := msg; ; {
		i := strings.IndexByte(rest, '"')
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		rest = rest[i:]
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			b.WriteByte('"')
			rest = rest[1:]
			continue
		}
		rest = rest[len(q):]
		v, _ := strconv.Unquote(q)
		if n := utf8.RuneCountInString(v); n > maxQuotedRunes {
			q = fmt.Sprintf("%s… (%d characters)", strconv.Quote(string([]rune(v)[:maxQuotedRunes])), n)
		}
		b.WriteString(q)
	}
	s := b.String()
	if n := utf8.RuneCountInString(s); n > maxErrorRunes {
		s = fmt.Sprintf("%s… (the message goes on for %d more characters)", string([]rune(s)[:maxErrorRunes]), n-maxErrorRunes)
	}
	return s
}
