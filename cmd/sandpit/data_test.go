package main

import (
	"database/sql"
	"flag"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3"
	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/mcp"
)

func TestDataConfig(t *testing.T) {
	good := filepath.Join(t.TempDir(), "ok.db")
	db, _ := sql.Open("sqlite3", good)
	if _, err := db.Exec("CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"nothing", nil, false},
		{"db", []string{"--db", good}, false},
		{"missing db", []string{"--db", filepath.Join(t.TempDir(), "missing.db")}, true},
		{"missing schemas dir", []string{"--schemas", filepath.Join(t.TempDir(), "nope")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := flag.NewFlagSet("serve", flag.ContinueOnError)
			for _, f := range dataFlags() {
				if err := f.Apply(set); err != nil {
					t.Fatal(err)
				}
			}
			if err := set.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			var cfg mcp.Config
			err := dataConfig(cli.NewContext(cli.NewApp(), set, nil), &cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (cfg.QueryDB == nil || cfg.Validator == nil) {
				t.Fatal("cfg not filled")
			}
		})
	}
}
