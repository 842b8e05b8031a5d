package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit/store/snapshot"
)

// SnapshotStore records and restores the workspace. *snapshot.Bound
// implements it.
type SnapshotStore interface {
	Create(ctx context.Context, description string) (snapshot.Snapshot, error)
	List(ctx context.Context) ([]snapshot.Snapshot, error)
	Restore(ctx context.Context, id string) error
	Delete(ctx context.Context, id string) error
	Diff(ctx context.Context, id string) (snapshot.Diff, error)
	UndoLastRun(ctx context.Context) (snapshot.Snapshot, error)
}

// SnapshotInfo describes one snapshot.
type SnapshotInfo struct {
	SnapshotID  string    `json:"snapshot_id"`
	Description string    `json:"description"`
	Created     time.Time `json:"created"`
	Files       int       `json:"files"`
	Bytes       int64     `json:"bytes"`
}

func toSnapshotInfo(s snapshot.Snapshot) SnapshotInfo {
	return SnapshotInfo{SnapshotID: s.ID, Description: s.Description, Created: s.Created.UTC(), Files: s.Files, Bytes: s.Bytes}
}

// CreateSnapshotArgs are create_state_snapshot's arguments.
type CreateSnapshotArgs struct {
	Description string `json:"description,omitempty" jsonschema:"what state this is, to recognise it later"`
}

func createSnapshotTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("create_state_snapshot",
		mcpgo.WithDescription("Record every file of the workspace (content, mode, mtime) as a snapshot you can diff against or restore later. Unchanged content is stored once, so snapshots are cheap."),
		mcpgo.WithInputSchema[CreateSnapshotArgs](),
		mcpgo.WithOutputSchema[SnapshotInfo](),
		mcpgo.WithDestructiveHintAnnotation(false),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a CreateSnapshotArgs) (any, string, error) {
		if len(a.Description) > 1000 {
			return nil, "", argErrorf("description is %d bytes; keep it under 1000", len(a.Description))
		}
		s, err := cfg.Snapshots.Create(ctx, a.Description)
		if err != nil {
			return nil, "", err
		}
		out := toSnapshotInfo(s)
		return out, fmt.Sprintf("snapshot_id: %s (%d files, %d bytes)", textName(out.SnapshotID), out.Files, out.Bytes), nil
	})
}

// ListSnapshotsResult is list_state_snapshots' structured output.
type ListSnapshotsResult struct {
	Snapshots []SnapshotInfo `json:"snapshots" jsonschema:"newest first"`
}

func listSnapshotsTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_state_snapshots",
		mcpgo.WithDescription("List the workspace's snapshots, newest first."),
		mcpgo.WithOutputSchema[ListSnapshotsResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, _ noArgs) (any, string, error) {
		list, err := cfg.Snapshots.List(ctx)
		if err != nil {
			return nil, "", err
		}
		out := ListSnapshotsResult{Snapshots: []SnapshotInfo{}}
		var b strings.Builder
		for _, s := range list {
			i := toSnapshotInfo(s)
			out.Snapshots = append(out.Snapshots, i)
			fmt.Fprintf(&b, "%s  %s  %d files, %d bytes  %s\n", textName(i.SnapshotID), i.Created.Format(time.RFC3339), i.Files, i.Bytes, textLine(i.Description))
		}
		if len(list) == 0 {
			b.WriteString("no snapshots yet: create_state_snapshot records one\n")
		}
		return out, b.String(), nil
	})
}

// SnapshotIDArgs name one snapshot.
type SnapshotIDArgs struct {
	SnapshotID string `json:"snapshot_id" jsonschema:"an id from create_state_snapshot or list_state_snapshots"`
}

// SnapshotActionResult says what a restore or delete did.
type SnapshotActionResult struct {
	SnapshotID string `json:"snapshot_id"`
	Done       string `json:"done" jsonschema:"restored or deleted"`
}

func restoreSnapshotTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("restore_state_snapshot",
		mcpgo.WithDescription("Make the workspace exactly equal to a snapshot, atomically: files not in it are deleted, changed files rewritten, missing ones recreated, modes and mtimes restored. Refused while code is running."),
		mcpgo.WithInputSchema[SnapshotIDArgs](),
		nonBlank("snapshot_id"),
		mcpgo.WithOutputSchema[SnapshotActionResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithIdempotentHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a SnapshotIDArgs) (any, string, error) {
		if err := cfg.Snapshots.Restore(ctx, a.SnapshotID); err != nil {
			return nil, "", err
		}
		return SnapshotActionResult{a.SnapshotID, "restored"}, "workspace restored to " + textName(a.SnapshotID), nil
	})
}

func deleteSnapshotTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("delete_state_snapshot",
		mcpgo.WithDescription("Delete a snapshot and free the stored content no other snapshot uses. The workspace itself is not changed."),
		mcpgo.WithInputSchema[SnapshotIDArgs](),
		nonBlank("snapshot_id"),
		mcpgo.WithOutputSchema[SnapshotActionResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a SnapshotIDArgs) (any, string, error) {
		if err := cfg.Snapshots.Delete(ctx, a.SnapshotID); err != nil {
			return nil, "", err
		}
		return SnapshotActionResult{a.SnapshotID, "deleted"}, "deleted snapshot " + textName(a.SnapshotID), nil
	})
}

// DiffSnapshotResult is diff_state_snapshot's structured output.
type DiffSnapshotResult struct {
	SnapshotID string   `json:"snapshot_id"`
	Added      []string `json:"added" jsonschema:"in the workspace now, not in the snapshot (directories end in /)"`
	Removed    []string `json:"removed" jsonschema:"in the snapshot, gone from the workspace"`
	Changed    []string `json:"changed" jsonschema:"in both, with different content or mode"`
}

func diffSnapshotTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("diff_state_snapshot",
		mcpgo.WithDescription("List what changed in the workspace since a snapshot: files added, removed and changed."),
		mcpgo.WithInputSchema[SnapshotIDArgs](),
		nonBlank("snapshot_id"),
		mcpgo.WithOutputSchema[DiffSnapshotResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a SnapshotIDArgs) (any, string, error) {
		d, err := cfg.Snapshots.Diff(ctx, a.SnapshotID)
		if err != nil {
			return nil, "", err
		}
		out := DiffSnapshotResult{SnapshotID: a.SnapshotID, Added: d.Added, Removed: d.Removed, Changed: d.Changed}
		var b strings.Builder
		for _, l := range []struct {
			sign  string
			paths []string
		}{{"+", d.Added}, {"-", d.Removed}, {"~", d.Changed}} {
			for _, p := range l.paths {
				fmt.Fprintf(&b, "%s %s\n", l.sign, textName(p))
			}
		}
		if b.Len() == 0 {
			b.WriteString("no changes since " + textName(a.SnapshotID) + "\n")
		}
		return out, b.String(), nil
	})
}

// UndoResult is undo_last_run's structured output.
type UndoResult struct {
	Restored string    `json:"restored" jsonschema:"the state the workspace is back to"`
	Created  time.Time `json:"created"`
	Note     string    `json:"note,omitempty" jsonschema:"what undo did not put back"`
}

// undoSessionNote: undo restores files; a session's memory stays as the
// undone call left it.
const undoSessionNote = "undo puts back workspace files only: sessions keep what their calls left in memory (variables, loaded data); close_session starts one afresh"

func undoLastRunTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("undo_last_run",
		mcpgo.WithDescription("Put the workspace back to how it was before the most recent run_code (files the run created, changed or deleted are restored). Call again to go back one more run; a limited number of runs can be undone."),
		mcpgo.WithOutputSchema[UndoResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, _ noArgs) (any, string, error) {
		s, err := cfg.Snapshots.UndoLastRun(ctx)
		if err != nil {
			return nil, "", err
		}
		out := UndoResult{Restored: s.Description, Created: s.Created.UTC()}
		text := "workspace restored to its state " + textLine(s.Description)
		if cfg.Sessions != nil {
			out.Note = undoSessionNote
			text += "\n" + undoSessionNote
		}
		return out, text, nil
	})
}
