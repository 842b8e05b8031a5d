package main

import (
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/sandpit-dev/sandpit/internal/host"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// The default state dir gets a tmpfs where /run is on disk; a --state-dir
// given on the command line never does: its owner (the bench's servers, a
// test) removes it afterwards, which a mount would prevent.
func TestStateOnTmpfsDefaultOnly(t *testing.T) {
	run := testenv.RunOnDisk(t)
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{"default", nil, true},
		{"given", []string{"--state-dir", filepath.Join(run, "given")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			def := filepath.Join(run, tc.name, "state")
			dir := def
			if len(tc.args) > 0 {
				dir = tc.args[1]
			}
			app := &cli.App{
				Flags:  []cli.Flag{&cli.StringFlag{Name: "state-dir", Value: def}},
				Action: func(c *cli.Context) error { stateOnTmpfs(c); return nil },
			}
			if err := app.Run(append([]string{"sandpit"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			got, err := host.OnTmpfs(dir)
			if tc.want && (err != nil || !got) || !tc.want && got {
				t.Fatalf("%s on a tmpfs: %v (%v); want %v", dir, got, err, tc.want)
			}
		})
	}
}
