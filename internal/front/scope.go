package front

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/auth"
)

// toolScopes names the scope each tool needs. A test builds the full MCP
// server and fails when a tool, prompt or resource it registers is missing
// here, so a new tool cannot ship callable by every token by accident; a
// name not here needs every scope (fail closed).
var toolScopes = map[string]string{
	"run_code":                 auth.ScopeRun,
	"list_supported_languages": auth.ScopeRun,
	"list_sessions":            auth.ScopeRun,
	"close_session":            auth.ScopeRun,
	"get_run":                  auth.ScopeRun,
	"cancel_run":               auth.ScopeRun,
	"get_execution_history":    auth.ScopeRun,
	"get_sandbox_metrics":      auth.ScopeRun,
	// An install is a run (the install step) that writes the workspace's
	// lock, as run_code writes the workspace.
	"install_packages": auth.ScopeRun,
	"remove_packages":  auth.ScopeRun,
	"list_packages":    auth.ScopeRun,

	"list_files":             auth.ScopeFiles,
	"read_file":              auth.ScopeFiles,
	"write_file":             auth.ScopeFiles,
	"delete_file":            auth.ScopeFiles,
	"move_file":              auth.ScopeFiles,
	"create_state_snapshot":  auth.ScopeFiles,
	"list_state_snapshots":   auth.ScopeFiles,
	"restore_state_snapshot": auth.ScopeFiles,
	"delete_state_snapshot":  auth.ScopeFiles,
	"diff_state_snapshot":    auth.ScopeFiles,
	"undo_last_run":          auth.ScopeFiles,

	"describe_schema":    auth.ScopeData,
	"query_db":           auth.ScopeData,
	"validate_json_data": auth.ScopeData,
	"validate_csv_data":  auth.ScopeData,
}

// promptScopes names the scope each prompt needs (prompts/get).
var promptScopes = map[string]string{
	"generate_secure_script":    auth.ScopeRun,
	"fix_failed_run":            auth.ScopeRun,
	"diagnose_validation_error": auth.ScopeData,
}

// resourceScopes maps resource URI prefixes to the scope a read (or a
// subscription) needs; the longest matching prefix wins.
var resourceScopes = []struct{ prefix, scope string }{
	{"sandbox://workspace/", auth.ScopeFiles},
	{"sandbox://schemas", auth.ScopeData},
	{"sandbox://runs/", auth.ScopeRun},
	{"sandbox://sessions", auth.ScopeRun},
	{"sandbox://status", auth.ScopeRun},
	{"sandbox://languages", auth.ScopeRun},
	{"sandbox://logs", auth.ScopeRun},
	{"ui://sandpit/run", auth.ScopeRun}, // the MCP App that draws run_code and get_run results
}

// everyScope is what an unknown name needs: all of them.
var everyScope = strings.Join(auth.AllScopes, " ")

// message is the part of a JSON-RPC message the front looks at.
type message struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params struct {
		Name string `json:"name"`
		URI  string `json:"uri"`
	} `json:"params"`
}

// peek decodes what the front needs of body. batch reports a JSON array
// (a JSON-RPC batch); ok is false for anything that is not one JSON object.
func peek(body []byte) (m message, batch, ok bool) {
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) > 0 && t[0] == '[' {
		return m, true, json.Valid(t)
	}
	if len(t) == 0 || t[0] != '{' {
		return m, false, false
	}
	if err := json.Unmarshal(t, &m); err != nil {
		return m, false, false
	}
	return m, false, true
}

// neededScope is the scope (or space-separated scopes) m needs; "" when
// any authenticated principal may send it (initialize, lists, ping,
// notifications: they read nothing of the tenant's data).
func neededScope(m message) string {
	switch m.Method {
	case "tools/call":
		return lookup(toolScopes, m.Params.Name)
	case "prompts/get":
		return lookup(promptScopes, m.Params.Name)
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		return resourceScope(m.Params.URI)
	}
	return ""
}

func lookup(table map[string]string, name string) string {
	if s, ok := table[name]; ok {
		return s
	}
	return everyScope
}

func resourceScope(uri string) string {
	best, scope := -1, everyScope
	for _, r := range resourceScopes {
		if strings.HasPrefix(uri, r.prefix) && len(r.prefix) > best {
			best, scope = len(r.prefix), r.scope
		}
	}
	return scope
}

// holds reports whether p holds every scope in needed (space-separated).
func holds(p auth.Principal, needed string) bool {
	for _, s := range strings.Fields(needed) {
		if !p.Has(s) {
			return false
		}
	}
	return true
}
