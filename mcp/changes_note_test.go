package mcp

import (
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// TestChangesNote: the text a model reads says when the workspace lines are
// not the whole story (issue 12 item 2: "and N more", drops, discards).
func TestChangesNote(t *testing.T) {
	tests := []struct {
		name string
		ch   *sandpit.Changes
		want []string
	}{
		{"none", nil, nil},
		{"all listed", &sandpit.Changes{Created: []string{"a"}, CreatedCount: 1}, nil},
		{"truncated", &sandpit.Changes{CreatedCount: 6000, Truncated: true}, []string{"6000 created", "not all listed"}},
		{"dropped", &sandpit.Changes{DroppedCount: 3}, []string{"3 entries did not come back", "files.dropped"}},
		{"discarded", &sandpit.Changes{Discarded: true, Reason: "the server's disk is full"}, []string{"none of the run's changes were applied: the server's disk is full"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := changesNote(tt.ch)
			if len(tt.want) == 0 && got != "" {
				t.Errorf("note = %q, want none", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("note = %q, want it to say %q", got, w)
				}
			}
		})
	}
}
