package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/preview"
)

// What a run made comes back as MCP content beside the result's text: the
// images it created or changed as image blocks (scaled down to a bounded
// size), every other file as a resource_link to sandbox://workspace/{path},
// which resources/read serves.

// ContentLimits bound the content blocks a tool result carries and what
// resources/read returns. Zero fields take the defaults.
type ContentLimits struct {
	// MaxImages is how many images one result shows (default 8); the rest
	// are linked, with a note.
	MaxImages int
	// MaxImageEdge is the longest side of an image shown, in pixels
	// (default 1568); larger ones are scaled down.
	MaxImageEdge int
	// MaxImageBytes is the largest image block (default 1 MiB); larger
	// images are re-encoded smaller.
	MaxImageBytes int
	// MaxImageFileBytes is the largest image file read to make one
	// (default 32 MiB); a larger one is linked instead.
	MaxImageFileBytes int64
	// MaxLinks is how many resource links one result carries (default 50).
	MaxLinks int
	// MaxResourceBytes is the largest file resources/read returns
	// (default 8 MiB).
	MaxResourceBytes int64
}

func (l *ContentLimits) defaults() {
	if l.MaxImages <= 0 {
		l.MaxImages = 8
	}
	if l.MaxImageEdge <= 0 {
		l.MaxImageEdge = preview.DefaultLimits.MaxEdge
	}
	if l.MaxImageBytes <= 0 {
		l.MaxImageBytes = preview.DefaultLimits.MaxBytes
	}
	if l.MaxImageFileBytes <= 0 {
		l.MaxImageFileBytes = 32 << 20
	}
	if l.MaxLinks <= 0 {
		l.MaxLinks = 50
	}
	if l.MaxResourceBytes <= 0 {
		l.MaxResourceBytes = 8 << 20
	}
}

func (l ContentLimits) preview() preview.Limits {
	p := preview.DefaultLimits
	p.MaxEdge, p.MaxBytes = l.MaxImageEdge, l.MaxImageBytes
	return p
}

// toolResult is a handler's structured result with content blocks (images,
// resource links) to show after its text; handle unwraps it.
type toolResult struct {
	value   any
	content []mcpgo.Content
}

// withContent returns v with blocks to show beside the text, or v itself
// when there are none. The blocks are cut to fit MaxResultBytes.
func withContent(v any, blocks []mcpgo.Content) any {
	if len(blocks) == 0 {
		return v
	}
	return toolResult{value: v, content: fitResult(v, blocks)}
}

// MaxResultBytes bounds a tool result that carries content blocks (a
// run's images and links, read_file's image) as the client receives it:
// the structured content, its text and every block, JSON-encoded. Eight
// images of just under 1 MiB each made an 11 MB run_code result, and a
// TypeScript client dropped the connection.
const MaxResultBytes = 4 << 20

// resultSlack is what a result holds beyond its structured content, text
// rendering and blocks: the JSON-RPC envelope, the notes runContent adds
// to the text, the budget note.
const resultSlack = 16 << 10

// imageBlock is an image block that knows its workspace path, so that
// fitResult can link the file when the image does not fit. It never
// reaches a client: fitResult turns it into an mcpgo.ImageContent or a
// link.
type imageBlock struct {
	mcpgo.ImageContent
	path string
}

// fitResult returns blocks cut to what fits MaxResultBytes beside v and its
// text: images in order while they fit, the rest linked instead; then links
// while they fit, the rest left out; and first a text block saying what
// was left out, when anything was. The text is a rendering of v: at most
// 7/3 of v's JSON (a name escaped for text, \u202e, is 7 bytes on the wire
// where JSON keeps the 3-byte character), so v and its text are reserved
// 10/3 of v's JSON.
func fitResult(v any, blocks []mcpgo.Content) []mcpgo.Content {
	s := jsonLen(v)
	budget := MaxResultBytes - resultSlack - s - (7*s+2)/3
	var (
		kept, imageLinks, links []mcpgo.Content
		used                    int
		notShown                []string
		notLinked               int
	)
	for _, b := range blocks {
		img, ok := b.(imageBlock)
		if !ok {
			links = append(links, b)
			continue
		}
		if n := jsonLen(img.ImageContent); used+n <= budget {
			used += n
			kept = append(kept, img.ImageContent)
			continue
		}
		notShown = append(notShown, img.path)
		imageLinks = append(imageLinks, mcpgo.NewResourceLink(workspaceURI(img.path), textName(img.path),
			"an image the run wrote, not shown to keep the result within its size limit; read_file shows it", mimeType(img.path, nil)))
	}
	// The images not shown are linked first: they are what the run made
	// to be seen.
	for _, b := range append(imageLinks, links...) {
		if n := jsonLen(b); used+n <= budget {
			used += n
			kept = append(kept, b)
			continue
		}
		notLinked++
	}
	if len(notShown) == 0 && notLinked == 0 {
		return kept
	}
	var note []string
	if len(notShown) > 0 {
		note = append(note, fmt.Sprintf("%d images not shown (%s)", len(notShown), textNames(notShown)))
	}
	if notLinked > 0 {
		note = append(note, fmt.Sprintf("%d files not linked", notLinked))
	}
	text := fmt.Sprintf("result budget: %s, to keep this result within %d MiB; read_file shows an image, list_files lists the files\n",
		strings.Join(note, " and "), MaxResultBytes>>20)
	return append([]mcpgo.Content{mcpgo.NewTextContent(text)}, kept...)
}

// workspaceScheme prefixes the URI of a workspace file.
const workspaceScheme = "sandbox://workspace/"

// workspaceURI is the resource URI of a workspace path, each segment
// percent-encoded.
func workspaceURI(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return workspaceScheme + strings.Join(segs, "/")
}

// runContent turns the files a run created or modified into content blocks
// and the lines the result's text adds about them.
func (cfg Config) runContent(ctx context.Context, ch *sandpit.Changes) ([]mcpgo.Content, []string) {
	if ch == nil || cfg.Files == nil {
		return nil, nil
	}
	lim := cfg.Content
	var (
		blocks      []mcpgo.Content
		notes       []string
		links       []mcpgo.Content
		shown       int
		overImages  int
		overLinks   int
		imageFailed []string
	)
	link := func(p string) {
		if len(links) >= lim.MaxLinks {
			overLinks++
			return
		}
		// The name is text a model and a client's UI read: printed as
		// textName prints it. The URI keeps the exact path, percent-encoded.
		l := mcpgo.NewResourceLink(workspaceURI(p), textName(p), "a workspace file the run wrote; resources/read returns it", mimeType(p, nil))
		links = append(links, l)
	}
	for _, p := range append(append([]string(nil), ch.Created...), ch.Modified...) {
		if preview.Kind(p) != "raster" {
			link(p)
			continue
		}
		if shown >= lim.MaxImages {
			overImages++
			link(p)
			continue
		}
		img, err := cfg.previewFile(ctx, p)
		if err != nil {
			imageFailed = append(imageFailed, fmt.Sprintf("%s (%s)", textName(p), textLine(err.Error())))
			link(p)
			continue
		}
		shown++
		blocks = append(blocks, imageBlock{mcpgo.NewImageContent(base64.StdEncoding.EncodeToString(img.Data), img.MIMEType), p})
		note := fmt.Sprintf("image %s: %d×%d", textName(p), img.SourceWidth, img.SourceHeight)
		if img.Scaled {
			note += fmt.Sprintf(", shown at %d×%d", img.Width, img.Height)
		}
		notes = append(notes, note)
	}
	if overImages > 0 {
		notes = append(notes, fmt.Sprintf("%d more images not shown (at most %d per result); they are linked, and read_file shows one", overImages, lim.MaxImages))
	}
	for _, f := range imageFailed {
		notes = append(notes, "image not shown: "+f)
	}
	if overLinks > 0 {
		notes = append(notes, fmt.Sprintf("%d more files not linked (at most %d per result); list_files shows them", overLinks, lim.MaxLinks))
	}
	return append(blocks, links...), notes
}

// readWhole reads a whole workspace file of at most max bytes, in the
// pieces the file store hands out.
func (cfg Config) readWhole(ctx context.Context, p string, max int64) ([]byte, error) {
	c, err := cfg.Files.Read(ctx, p, 0, 0)
	if err != nil {
		return nil, err
	}
	if c.Size > max {
		return nil, sandpit.Newf(sandpit.ErrResourceExhausted, "%s is %d bytes, over the %d-byte limit", p, c.Size, max)
	}
	data := c.Data
	for !c.EOF && len(c.Data) > 0 {
		if c, err = cfg.Files.Read(ctx, p, int64(len(data)), 0); err != nil {
			return nil, err
		}
		if int64(len(data)+len(c.Data)) > max {
			return nil, sandpit.Newf(sandpit.ErrResourceExhausted, "%s grew past the %d-byte limit while being read", p, max)
		}
		data = append(data, c.Data...)
	}
	return data, nil
}

// previewFile makes the image block of a workspace image.
func (cfg Config) previewFile(ctx context.Context, p string) (preview.Image, error) {
	data, err := cfg.readWhole(ctx, p, cfg.Content.MaxImageFileBytes)
	if err != nil {
		return preview.Image{}, err
	}
	img, err := preview.Make(ctx, data, cfg.Content.preview())
	if errors.Is(err, preview.ErrTooLarge) {
		err = sandpit.Newf(sandpit.ErrResourceExhausted, "%v", err)
	}
	return img, err
}

// mimeTypes are the types sandpit names itself: Go's table depends on the
// host's /etc/mime.types, which may lack them.
var mimeTypes = map[string]string{
	".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain", ".log": "text/plain",
	".md": "text/markdown", ".json": "application/json", ".jsonl": "application/jsonl", ".xml": "application/xml",
	".html": "text/html", ".yaml": "application/yaml", ".yml": "application/yaml", ".toml": "application/toml",
	".py": "text/x-python", ".c": "text/x-c", ".h": "text/x-c", ".cpp": "text/x-c++", ".js": "text/javascript",
	".sh": "text/x-shellscript", ".sql": "application/sql",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
	".svg": "image/svg+xml", ".pdf": "application/pdf", ".zip": "application/zip", ".gz": "application/gzip",
	".xlsx":    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".parquet": "application/vnd.apache.parquet", ".db": "application/vnd.sqlite3", ".sqlite": "application/vnd.sqlite3",
}

// mimeType names the type of the file at p, from its extension, else from
// its first bytes (data, when known).
func mimeType(p string, data []byte) string {
	ext := strings.ToLower(path.Ext(p))
	if t, ok := mimeTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	if data != nil {
		return http.DetectContentType(data)
	}
	return "application/octet-stream"
}

// isText says whether data can be returned as text: valid UTF-8 without
// NULs, and not of a binary type.
func isText(mt string, data []byte) bool {
	if strings.HasPrefix(mt, "image/") && mt != "image/svg+xml" {
		return false
	}
	return utf8.Valid(data) && !strings.ContainsRune(string(data), 0)
}

// addWorkspaceResource serves sandbox://workspace/{path}: a workspace file,
// as text or base64, with its MIME type, up to MaxResourceBytes.
func addWorkspaceResource(s *server.MCPServer, cfg Config) {
	s.AddResourceTemplate(mcpgo.NewResourceTemplate(workspaceScheme+"{+path}", "workspace file",
		mcpgo.WithTemplateDescription(fmt.Sprintf("A file of the workspace (/workspace in runs), whole: text, or base64 for binary content, with its MIME type; at most %d bytes (read_file reads larger files in pieces). run_code links the files each run writes.", cfg.Content.MaxResourceBytes)),
	), func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		rel := strings.TrimPrefix(req.Params.URI, workspaceScheme)
		p, err := url.PathUnescape(rel)
		if err != nil || rel == req.Params.URI {
			return nil, fmt.Errorf("%s: not a workspace URI (sandbox://workspace/PATH, PATH percent-encoded)", req.Params.URI)
		}
		data, err := cfg.readWhole(ctx, p, cfg.Content.MaxResourceBytes)
		if err != nil {
			if sandpit.ClassOf(err) == nil { // internal: its text may name host paths
				cfg.Logger.Error("resources/read failed", "uri", req.Params.URI, "err", err)
				return nil, fmt.Errorf("%s: internal error (the server log has the details)", req.Params.URI)
			}
			return nil, fmt.Errorf("%s: %s", req.Params.URI, sandpit.Describe(err))
		}
		mt := mimeType(p, data)
		if isText(mt, data) {
			return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: req.Params.URI, MIMEType: mt, Text: string(data)}}, nil
		}
		return []mcpgo.ResourceContents{mcpgo.BlobResourceContents{URI: req.Params.URI, MIMEType: mt, Blob: base64.StdEncoding.EncodeToString(data)}}, nil
	})
}
