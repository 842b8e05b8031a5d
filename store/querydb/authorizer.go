package querydb

import (
	"fmt"
	"strings"
	"sync"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// sqliteRecursive is SQLITE_RECURSIVE (a recursive CTE), which go-sqlite3
// does not export.
const sqliteRecursive = 33

// readPragmas are the PRAGMAs a caller may run. true: the pragma takes a
// table or index name as its argument (and has no setter); false: it is
// allowed only without an argument, because with one it would set a value.
var readPragmas = map[string]bool{
	"table_info":       true,
	"table_xinfo":      true,
	"table_list":       true,
	"index_list":       true,
	"index_info":       true,
	"index_xinfo":      true,
	"foreign_key_list": true,
	"collation_list":   false,
	"function_list":    false,
	"encoding":         false,
	"page_size":        false,
	"page_count":       false,
	"freelist_count":   false,
	"user_version":     false,
	"application_id":   false,
	"schema_version":   false,
	"data_version":     false,
	"foreign_keys":     false,
}

// deniedFunctions can reach outside the database even when reading.
var deniedFunctions = map[string]string{
	"load_extension": "loading extensions is disabled",
	"fts3_tokenizer": "fts3_tokenizer can register native code",
}

// authorizer is a read-only policy for sqlite3_set_authorizer. It records
// the first thing it denied so the error can say what and why.
type authorizer struct {
	mu     sync.Mutex
	reason string
}

func newAuthorizer() *authorizer { return &authorizer{} }

// denied returns the reason for the first denial since the last call and
// clears it.
func (a *authorizer) denied() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.reason
	a.reason = ""
	return r
}

func (a *authorizer) deny(format string, args ...any) int {
	a.mu.Lock()
	if a.reason == "" {
		a.reason = fmt.Sprintf(format, args...)
	}
	a.mu.Unlock()
	return sqlite3.SQLITE_DENY
}

// check is the callback: op is the action code, arg1 and arg2 depend on it
// (https://www.sqlite.org/c3ref/c_alter_table.html), db is the schema name.
func (a *authorizer) check(op int, arg1, arg2, db string) int {
	switch op {
	case sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqliteRecursive:
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_FUNCTION:
		if why, bad := deniedFunctions[strings.ToLower(arg2)]; bad {
			return a.deny("function %s() is not allowed: %s", arg2, why)
		}
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_PRAGMA:
		name := strings.ToLower(arg1)
		withArg, ok := readPragmas[name]
		switch {
		case !ok:
			return a.deny("PRAGMA %s is not on the read-only list (allowed: table_info, table_xinfo, table_list, index_list, index_info, index_xinfo, foreign_key_list, and reading user_version, page_count, encoding and the like)", name)
		case arg2 != "" && !withArg:
			return a.deny("PRAGMA %s = %s would change a setting; read it without a value", name, arg2)
		}
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_INSERT:
		return a.deny("INSERT into %s writes to the database", arg1)
	case sqlite3.SQLITE_UPDATE:
		return a.deny("UPDATE of %s writes to the database", arg1)
	case sqlite3.SQLITE_DELETE:
		return a.deny("DELETE from %s writes to the database", arg1)
	case sqlite3.SQLITE_ATTACH:
		return a.deny("ATTACH opens another database file")
	case sqlite3.SQLITE_DETACH:
		return a.deny("DETACH changes the connection's databases")
	case sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT:
		return a.deny("transactions and savepoints are not needed for reads: each query runs on its own")
	case sqlite3.SQLITE_CREATE_TEMP_TABLE, sqlite3.SQLITE_CREATE_TEMP_INDEX,
		sqlite3.SQLITE_CREATE_TEMP_TRIGGER, sqlite3.SQLITE_CREATE_TEMP_VIEW:
		return a.deny("temporary tables, indexes, views and triggers are not allowed: use a WITH clause (CTE) instead")
	}
	if op == sqlite3.SQLITE_ALTER_TABLE {
		return a.deny("ALTER TABLE %s changes the schema", arg2)
	}
	if name, ok := actionNames[op]; ok {
		return a.deny("%s %s changes the schema", name, arg1)
	}
	return a.deny("operation %d is not a read", op)
}

var actionNames = map[int]string{
	sqlite3.SQLITE_CREATE_INDEX:      "CREATE INDEX",
	sqlite3.SQLITE_CREATE_TABLE:      "CREATE TABLE",
	sqlite3.SQLITE_CREATE_TRIGGER:    "CREATE TRIGGER",
	sqlite3.SQLITE_CREATE_VIEW:       "CREATE VIEW",
	sqlite3.SQLITE_CREATE_VTABLE:     "CREATE VIRTUAL TABLE",
	sqlite3.SQLITE_DROP_INDEX:        "DROP INDEX",
	sqlite3.SQLITE_DROP_TABLE:        "DROP TABLE",
	sqlite3.SQLITE_DROP_TEMP_INDEX:   "DROP INDEX",
	sqlite3.SQLITE_DROP_TEMP_TABLE:   "DROP TABLE",
	sqlite3.SQLITE_DROP_TEMP_TRIGGER: "DROP TRIGGER",
	sqlite3.SQLITE_DROP_TEMP_VIEW:    "DROP VIEW",
	sqlite3.SQLITE_DROP_TRIGGER:      "DROP TRIGGER",
	sqlite3.SQLITE_DROP_VIEW:         "DROP VIEW",
	sqlite3.SQLITE_DROP_VTABLE:       "DROP VIRTUAL TABLE",
	sqlite3.SQLITE_REINDEX:           "REINDEX",
	sqlite3.SQLITE_ANALYZE:           "ANALYZE",
}
