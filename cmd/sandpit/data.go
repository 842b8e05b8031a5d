package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/mcp"
	"github.com/sandpit-dev/sandpit/store/querydb"
	"github.com/sandpit-dev/sandpit/store/validate"
)

// dataFlags are serve's flags for the SQL and validation tools.
func dataFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "db", Usage: "SQLite `FILE` served read-only by describe_schema and query_db", EnvVars: []string{"SANDPIT_DB"}},
		&cli.StringFlag{Name: "schemas", Usage: "`DIR` of *.json JSON Schemas registered by file name for validate_json_data (beside the built-ins config, user, dataset)", EnvVars: []string{"SANDPIT_SCHEMAS"}},
		&cli.DurationFlag{Name: "query-timeout", Value: 5 * time.Second, Usage: "time limit for one query_db query (and one describe_schema call), opening and preparing included"},
		&cli.StringFlag{Name: "query-memory", Value: "64MiB", Usage: "the most memory all running query_db and describe_schema calls together may hold (a query past it fails; history and undo are not charged)"},
		&cli.DurationFlag{Name: "validate-timeout", Value: validate.DefaultLimits.Timeout, Usage: "time limit for one validate_json_data or validate_csv_data call"},
	}
}

// dataConfig opens what the data flags name and fills cfg. Call it after
// cfg.Opener is set, so that query_db can open workspace databases.
// Without --db the SQL tools are still served and answer that no database
// is configured, with a hint.
func dataConfig(c *cli.Context, cfg *mcp.Config) error {
	var open querydb.OpenFunc
	if cfg.Opener != nil {
		open = cfg.Opener.OpenFile
	}
	mem, err := parseSize(c.String("query-memory"))
	if err != nil {
		return fmt.Errorf("--query-memory: %w", err)
	}
	qdb, err := querydb.New(c.String("db"), open, querydb.Options{Timeout: c.Duration("query-timeout"), MaxMemoryBytes: mem})
	if err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	reg, err := validate.NewRegistry(c.String("schemas"), validate.Limits{Timeout: c.Duration("validate-timeout")})
	if err != nil {
		qdb.Close()
		return fmt.Errorf("--schemas: %w", err)
	}
	cfg.QueryDB, cfg.Validator = qdb, reg
	return nil
}
