package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/preview"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// FileStore is the workspace as the file tools see it. *workspace.Workspace
// implements it; every path is relative to the workspace root.
type FileStore interface {
	List(ctx context.Context, path string, recursive bool) (workspace.Listing, error)
	Read(ctx context.Context, path string, offset, limit int64) (workspace.Content, error)
	Write(ctx context.Context, path string, data []byte) (workspace.Entry, error)
	Delete(ctx context.Context, path string) error
	Move(ctx context.Context, from, to string) error
}

// addWorkspaceTools registers the file tools and, with Snapshots, the
// snapshot and undo tools.
func addWorkspaceTools(s *server.MCPServer, cfg Config) {
	tools := []func(Config) (mcpgo.Tool, server.ToolHandlerFunc){listFilesTool, readFileTool, writeFileTool, deleteFileTool, moveFileTool}
	if cfg.Snapshots != nil {
		tools = append(tools, createSnapshotTool, listSnapshotsTool, restoreSnapshotTool, deleteSnapshotTool, diffSnapshotTool, undoLastRunTool)
	}
	for _, t := range tools {
		s.AddTool(t(cfg))
	}
}

// FileEntry is one row of list_files.
type FileEntry struct {
	Path  string    `json:"path" jsonschema:"relative to the workspace root (/workspace in runs)"`
	Type  string    `json:"type" jsonschema:"file, dir, symlink, fifo, socket or device"`
	Size  int64     `json:"size"`
	MTime time.Time `json:"mtime"`
}

// ListFilesArgs are list_files' arguments.
type ListFilesArgs struct {
	Path      string `json:"path,omitempty" jsonschema:"directory to list, relative to the workspace root (default: the root)"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"list subdirectories too"`
	Offset    int    `json:"offset,omitempty" jsonschema:"entries to skip: the next_offset of the page before (default 0)"`
}

// ListFilesResult is list_files' structured output.
type ListFilesResult struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated" jsonschema:"true when there are more entries than shown: page on with next_offset, or list a subdirectory"`
	// Total, More and NextOffset page through a listing too large for one
	// result (maxListingBytes).
	Total      int `json:"total" jsonschema:"entries in the listing (up to the workspace's listing cap)"`
	More       int `json:"more,omitempty" jsonschema:"entries after this page"`
	NextOffset int `json:"next_offset,omitempty" jsonschema:"offset of the next page, when more is not 0"`
}

// maxListingBytes bounds one list_files page: its entries as structured
// content and as text, JSON-encoded. 5,000 entries of 200-byte names were
// 1.6 MB in one result.
const maxListingBytes = 256 << 10

func listFilesTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_files",
		mcpgo.WithDescription(fmt.Sprintf("List files in the workspace (mounted at /workspace in every run) with type, size and modification time. Paths are relative to the workspace root. A page holds at most %d KiB of entries: when more is not 0, call again with offset=next_offset.", maxListingBytes>>10)),
		mcpgo.WithInputSchema[ListFilesArgs](),
		mcpgo.WithOutputSchema[ListFilesResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a ListFilesArgs) (any, string, error) {
		if a.Offset < 0 {
			return nil, "", argErrorf("offset must not be negative")
		}
		ls, err := cfg.Files.List(ctx, a.Path, a.Recursive)
		if err != nil {
			return nil, "", err
		}
		out := ListFilesResult{Path: a.Path, Entries: []FileEntry{}, Total: len(ls.Entries)}
		if out.Path == "" {
			out.Path = "."
		}
		var b strings.Builder
		size, next := 0, min(a.Offset, len(ls.Entries))
		for _, e := range ls.Entries[next:] {
			fe := FileEntry{Path: e.Path, Type: e.Type, Size: e.Size, MTime: e.ModTime.UTC()}
			line := fmt.Sprintf("%-7s %10d  %s  %s\n", e.Type, e.Size, e.ModTime.UTC().Format(time.RFC3339), textName(e.Path))
			n := jsonLen(fe) + jsonLen(line)
			if size+n > maxListingBytes && len(out.Entries) > 0 {
				break
			}
			size += n
			next++
			out.Entries = append(out.Entries, fe)
			b.WriteString(line)
		}
		if out.More = len(ls.Entries) - next; out.More > 0 {
			out.NextOffset = next
		}
		out.Truncated = out.More > 0 || ls.Truncated
		switch {
		case len(ls.Entries) == 0:
			b.WriteString("(empty)\n")
		case len(out.Entries) == 0:
			fmt.Fprintf(&b, "(offset %d is past the last of %d entries)\n", a.Offset, len(ls.Entries))
		}
		if out.More > 0 {
			fmt.Fprintf(&b, "(and %d more: list_files with offset=%d shows the next page)\n", out.More, out.NextOffset)
		}
		if ls.Truncated {
			fmt.Fprintf(&b, "(the listing stops at %d entries: list a subdirectory to see more)\n", len(ls.Entries))
		}
		return out, b.String(), nil
	})
}

// jsonLen is the length of v JSON-encoded (0 when it does not encode).
func jsonLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// ReadFileArgs are read_file's arguments.
type ReadFileArgs struct {
	Path   string `json:"path" jsonschema:"file to read, relative to the workspace root"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start at (default 0)"`
	Limit  int64  `json:"limit,omitempty" jsonschema:"most bytes to return (default and maximum 1 MiB)"`
}

// ReadFileResult is read_file's structured output.
type ReadFileResult struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Encoding   string `json:"encoding" jsonschema:"utf-8 for text, base64 for binary content, image when an image file is returned as image content"`
	Offset     int64  `json:"offset"`
	Bytes      int    `json:"bytes" jsonschema:"bytes returned"`
	Size       int64  `json:"size" jsonschema:"size of the whole file"`
	EOF        bool   `json:"eof" jsonschema:"true when the content reaches the end of the file"`
	NextOffset int64  `json:"next_offset,omitempty" jsonschema:"offset to read the rest from, when eof is false"`
	// Image describes the image block returned instead of content.
	Image *ImageInfo `json:"image,omitempty" jsonschema:"set when the file is returned as image content"`
}

// ImageInfo describes an image returned as image content.
type ImageInfo struct {
	MIMEType     string `json:"mime_type"`
	Width        int    `json:"width" jsonschema:"of the image shown"`
	Height       int    `json:"height"`
	SourceWidth  int    `json:"source_width" jsonschema:"of the file"`
	SourceHeight int    `json:"source_height"`
	Scaled       bool   `json:"scaled" jsonschema:"true when the image shown is smaller than the file (it is always re-encoded from the decoded pixels)"`
}

func readFileTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("read_file",
		mcpgo.WithDescription("Read a file from the workspace: text as UTF-8, binary as base64, and an image (PNG, JPEG, GIF, WebP) as image content, scaled down when large, unless offset or limit ask for its bytes. Large files are read in pieces with offset and limit. FIFOs, devices, sockets and symlinks are refused."),
		mcpgo.WithInputSchema[ReadFileArgs](),
		nonBlank("path"),
		mcpgo.WithOutputSchema[ReadFileResult](),
		mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a ReadFileArgs) (any, string, error) {
		if a.Offset < 0 || a.Limit < 0 {
			return nil, "", argErrorf("offset and limit must not be negative")
		}
		var note string
		if preview.Kind(a.Path) == "raster" && a.Offset == 0 && a.Limit == 0 {
			img, err := cfg.previewFile(ctx, a.Path)
			if err == nil {
				return readImageResult(a.Path, img)
			}
			if sandpit.ClassOf(err) == sandpit.ErrNotFound || sandpit.ClassOf(err) == sandpit.ErrInvalidArgument {
				return nil, "", err // no such file, a path outside the workspace: as for any file
			}
			note = fmt.Sprintf("\n(not shown as an image: %v)", err)
		}
		c, err := cfg.Files.Read(ctx, a.Path, a.Offset, a.Limit)
		if err != nil {
			return nil, "", err
		}
		out := toReadResult(c)
		text := out.Content
		if out.Encoding == "base64" {
			text = fmt.Sprintf("(binary, %d bytes, base64)\n%s", out.Bytes, out.Content)
		}
		if !out.EOF {
			text += fmt.Sprintf("\n(%d of %d bytes shown; read from offset %d for more)", out.NextOffset, out.Size, out.NextOffset)
		}
		return out, text + note, nil
	})
}

// readImageResult is read_file's answer for an image: an image block
// (scaled to the result limits) instead of base64 text.
func readImageResult(p string, img preview.Image) (any, string, error) {
	out := ReadFileResult{Path: p, Encoding: "image", Bytes: len(img.Data), Size: int64(img.SourceBytes), EOF: true,
		Image: &ImageInfo{MIMEType: img.MIMEType, Width: img.Width, Height: img.Height, SourceWidth: img.SourceWidth, SourceHeight: img.SourceHeight, Scaled: img.Scaled}}
	text := fmt.Sprintf("image %s: %d×%d %s, shown below", p, img.SourceWidth, img.SourceHeight, img.MIMEType)
	if img.Scaled {
		text += fmt.Sprintf(" scaled to %d×%d (offset and limit read the file's bytes instead)", img.Width, img.Height)
	}
	return withContent(out, []mcpgo.Content{mcpgo.NewImageContent(base64.StdEncoding.EncodeToString(img.Data), img.MIMEType)}), text, nil
}

// toReadResult picks the encoding: text when the bytes are valid UTF-8
// without NULs (a rune cut by the limit is left for the next read),
// base64 otherwise.
func toReadResult(c workspace.Content) ReadFileResult {
	data := c.Data
	if !c.EOF {
		for k := 1; k <= 3 && k <= len(data); k++ {
			if !utf8.Valid(data) && utf8.Valid(data[:len(data)-k]) {
				data = data[:len(data)-k]
				break
			}
		}
	}
	out := ReadFileResult{Path: c.Path, Offset: c.Offset, Bytes: len(data), Size: c.Size}
	if utf8.Valid(data) && !strings.ContainsRune(string(data), 0) {
		out.Content, out.Encoding = string(data), "utf-8"
	} else {
		data = c.Data
		out.Bytes = len(data)
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	out.EOF = c.Offset+int64(len(data)) >= c.Size
	if !out.EOF {
		out.NextOffset = c.Offset + int64(len(data))
	}
	return out
}

// WriteFileArgs are write_file's arguments.
type WriteFileArgs struct {
	Path     string `json:"path" jsonschema:"file to write, relative to the workspace root; parent directories are created"`
	Content  string `json:"content" jsonschema:"the whole new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64 for binary content"`
}

// WriteFileResult is write_file's structured output.
type WriteFileResult struct {
	Path  string    `json:"path"`
	Bytes int64     `json:"bytes"`
	MTime time.Time `json:"mtime"`
}

func writeFileTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("write_file",
		mcpgo.WithDescription("Create or replace a file in the workspace, atomically (readers and runs see the old or the new content, never a mix). Parent directories are created. Runs see it at /workspace/<path>."),
		mcpgo.WithInputSchema[WriteFileArgs](),
		nonBlank("path"),
		mcpgo.WithOutputSchema[WriteFileResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithIdempotentHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a WriteFileArgs) (any, string, error) {
		var data []byte
		switch strings.ToLower(a.Encoding) {
		case "", "utf-8", "utf8", "text":
			data = []byte(a.Content)
		case "base64":
			var err error
			if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
				return nil, "", argErrorf("content is not valid base64: %v", err)
			}
		default:
			return nil, "", argErrorf("encoding %q is not supported: use utf-8 or base64", a.Encoding)
		}
		e, err := cfg.Files.Write(ctx, a.Path, data)
		if err != nil {
			return nil, "", err
		}
		out := WriteFileResult{Path: e.Path, Bytes: e.Size, MTime: e.ModTime.UTC()}
		return out, fmt.Sprintf("wrote %d bytes to %s", out.Bytes, textName(out.Path)), nil
	})
}

// DeleteFileArgs are delete_file's arguments.
type DeleteFileArgs struct {
	Path string `json:"path" jsonschema:"file or directory (deleted with its content), relative to the workspace root"`
}

// PathResult names the path a tool acted on.
type PathResult struct {
	Path string `json:"path"`
}

func deleteFileTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("delete_file",
		mcpgo.WithDescription("Delete a file, or a directory with everything in it, from the workspace. A symlink is removed itself, never followed."),
		mcpgo.WithInputSchema[DeleteFileArgs](),
		nonBlank("path"),
		mcpgo.WithOutputSchema[PathResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a DeleteFileArgs) (any, string, error) {
		if err := cfg.Files.Delete(ctx, a.Path); err != nil {
			return nil, "", err
		}
		//lint:ignore S1016 the argument and result types only happen to match today
		return PathResult{Path: a.Path}, "deleted " + textName(a.Path), nil
	})
}

// MoveFileArgs are move_file's arguments.
type MoveFileArgs struct {
	From string `json:"from" jsonschema:"existing file or directory, relative to the workspace root"`
	To   string `json:"to" jsonschema:"new path; an existing file there is replaced, parent directories are created"`
}

func moveFileTool(cfg Config) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("move_file",
		mcpgo.WithDescription("Move or rename a file or directory inside the workspace."),
		mcpgo.WithInputSchema[MoveFileArgs](),
		nonBlank("from", "to"),
		mcpgo.WithOutputSchema[PathResult](),
		mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	)
	return tool, handle(cfg, tool, func(ctx context.Context, a MoveFileArgs) (any, string, error) {
		if err := cfg.Files.Move(ctx, a.From, a.To); err != nil {
			return nil, "", err
		}
		return PathResult{Path: a.To}, fmt.Sprintf("moved %s to %s", textName(a.From), textName(a.To)), nil
	})
}
