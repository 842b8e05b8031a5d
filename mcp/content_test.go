package mcp

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"maps"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/store/workspace"
)

// writingRunner stands for a run that wrote files into the workspace: its
// code names a scenario, whose files it writes and reports as created.
type writingRunner struct {
	ws    *workspace.Workspace
	files map[string]map[string][]byte // code → path → content
}

func (r *writingRunner) Run(ctx context.Context, req sandpit.Request) (*sandpit.Result, error) {
	ch := &sandpit.Changes{Created: []string{}, Modified: []string{}, Deleted: []string{}}
	for p, data := range r.files[req.Code] {
		if _, err := r.ws.Write(ctx, p, data); err != nil {
			return nil, err
		}
		ch.Created = append(ch.Created, p)
	}
	// Stable order, as a merge reports it.
	sortStrings(ch.Created)
	return &sandpit.Result{ID: "run-1", Language: req.Language, Status: sandpit.StatusSuccess, Limits: testLimits, Files: ch}, nil
}

func (r *writingRunner) Languages() []sandpit.Language {
	return []sandpit.Language{{Name: "python", Version: "3.11.2", Image: "img", Libraries: []string{"numpy 1.24.2", "pandas 1.5.3"}}}
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func pngOf(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 100, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bigGrayPNG is a w×h grayscale PNG, written row by row (small on disk).
func bigGrayPNG(t testing.TB, w, h int) []byte {
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, body []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(body)))
		out.Write(n[:])
		out.WriteString(typ)
		out.Write(body)
		binary.BigEndian.PutUint32(n[:], crc32.ChecksumIEEE(append([]byte(typ), body...)))
		out.Write(n[:])
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8] = 8
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	row := make([]byte, 1+w)
	for y := 0; y < h; y++ {
		zw.Write(row)
	}
	zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return out.Bytes()
}

func contentFixture(t *testing.T, files map[string]map[string][]byte, limits ContentLimits) fixture {
	t.Helper()
	ws, err := workspace.Open(filepath.Join(t.TempDir(), "ws"), workspace.Options{MaxReadBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	return newFixture(t, func(c *Config) {
		c.Runner = &writingRunner{ws: ws, files: files}
		c.Workspace, c.Files = ws, ws
		c.Content = limits
	})
}

func blocks(res *mcpgo.CallToolResult) (images []mcpgo.ImageContent, links []mcpgo.ResourceLink) {
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcpgo.ImageContent:
			images = append(images, c)
		case mcpgo.ResourceLink:
			links = append(links, c)
		}
	}
	return images, links
}

func decodedSize(t *testing.T, img mcpgo.ImageContent) (int, int, int) {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil {
		t.Fatal(err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil || "image/"+format != img.MIMEType {
		t.Fatalf("image block (%s) does not decode as its type: %s %v", img.MIMEType, format, err)
	}
	return cfg.Width, cfg.Height, len(b)
}

func TestRunReturnsImagesAndLinks(t *testing.T) {
	csv := []byte("a,b\n1,2\n")
	f := contentFixture(t, map[string]map[string][]byte{
		"plot": {"chart.png": pngOf(t, 640, 480), "data.csv": csv, "out/result.json": []byte(`{"ok":true}`)},
		"huge": {"huge.png": bigGrayPNG(t, 10000, 10000)},
		"many": func() map[string][]byte {
			m := map[string][]byte{}
			small := pngOf(t, 8, 8)
			for i := range 100 {
				m[fmt.Sprintf("fig%03d.png", i)] = small
			}
			return m
		}(),
		"bad": {"broken.png": []byte("not a png at all")},
	}, ContentLimits{})

	t.Run("chart and csv", func(t *testing.T) {
		res := f.call(t, "run_code", map[string]any{"language": "python", "code": "plot"}, nil)
		images, links := blocks(res)
		if len(images) != 1 {
			t.Fatalf("%d image blocks, want 1: %s", len(images), text(res))
		}
		if w, h, _ := decodedSize(t, images[0]); w != 640 || h != 480 || images[0].MIMEType != "image/png" {
			t.Errorf("image %d×%d %s, want the 640×480 PNG itself", w, h, images[0].MIMEType)
		}
		want := map[string]string{"sandbox://workspace/data.csv": "text/csv", "sandbox://workspace/out/result.json": "application/json"}
		if len(links) != len(want) {
			t.Fatalf("links %+v, want %v", links, want)
		}
		for _, l := range links {
			if want[l.URI] != l.MIMEType {
				t.Errorf("link %s (%s) unexpected", l.URI, l.MIMEType)
			}
		}
		if !strings.Contains(text(res), "image chart.png: 640×480") {
			t.Errorf("text lacks the image note: %s", text(res))
		}
		// The text block comes first, for clients that show only it.
		if _, ok := res.Content[0].(mcpgo.TextContent); !ok {
			t.Errorf("first block is %T", res.Content[0])
		}
		// The link reads back as the file's bytes.
		rr := mcpgo.ReadResourceRequest{}
		rr.Params.URI = "sandbox://workspace/data.csv"
		got, err := f.c.ReadResource(t.Context(), rr)
		if err != nil {
			t.Fatal(err)
		}
		if tc, ok := got.Contents[0].(mcpgo.TextResourceContents); !ok || tc.Text != string(csv) || tc.MIMEType != "text/csv" {
			t.Errorf("resources/read data.csv = %#v", got.Contents[0])
		}
	})
	t.Run("10000x10000 png is scaled", func(t *testing.T) {
		res := f.call(t, "run_code", map[string]any{"language": "python", "code": "huge"}, nil)
		images, _ := blocks(res)
		if len(images) != 1 {
			t.Fatalf("%d image blocks: %s", len(images), text(res))
		}
		w, h, n := decodedSize(t, images[0])
		if w != 1568 || h != 1568 || n > 1<<20 {
			t.Errorf("image %d×%d, %d bytes; want 1568×1568 within 1 MiB", w, h, n)
		}
		if !strings.Contains(text(res), "10000×10000, shown at 1568×1568") {
			t.Errorf("text: %s", text(res))
		}
	})
	t.Run("100 images are capped with a note", func(t *testing.T) {
		res := f.call(t, "run_code", map[string]any{"language": "python", "code": "many"}, nil)
		images, links := blocks(res)
		if len(images) != 8 || len(links) != 50 {
			t.Errorf("%d images and %d links, want 8 and 50", len(images), len(links))
		}
		for _, want := range []string{"92 more images not shown (at most 8 per result)", "42 more files not linked (at most 50 per result)"} {
			if !strings.Contains(text(res), want) {
				t.Errorf("text lacks %q: %s", want, text(res))
			}
		}
	})
	t.Run("an unreadable image is linked with the reason", func(t *testing.T) {
		res := f.call(t, "run_code", map[string]any{"language": "python", "code": "bad"}, nil)
		images, links := blocks(res)
		if len(images) != 0 || len(links) != 1 || !strings.Contains(text(res), "image not shown: broken.png") {
			t.Errorf("%d images, links %+v, text %s", len(images), links, text(res))
		}
	})
}

func TestWorkspaceResource(t *testing.T) {
	f := contentFixture(t, map[string]map[string][]byte{"w": {
		"my dir/a b.txt": []byte("spaced"),
		"blob.bin":       {0, 1, 2, 255},
		"big.txt":        bytes.Repeat([]byte("x"), 3000),
		"pic.png":        pngOf(t, 3000, 10),
	}}, ContentLimits{MaxResourceBytes: 2048})
	res := f.call(t, "run_code", map[string]any{"language": "python", "code": "w"}, nil)
	_, links := blocks(res)
	uris := map[string]bool{}
	for _, l := range links {
		uris[l.URI] = true
	}
	if !uris["sandbox://workspace/my%20dir/a%20b.txt"] {
		t.Errorf("links %v lack the percent-encoded spaced path", uris)
	}
	read := func(uri string) (mcpgo.ResourceContents, error) {
		rr := mcpgo.ReadResourceRequest{}
		rr.Params.URI = uri
		got, err := f.c.ReadResource(t.Context(), rr)
		if err != nil {
			return nil, err
		}
		return got.Contents[0], nil
	}
	if c, err := read("sandbox://workspace/my%20dir/a%20b.txt"); err != nil || c.(mcpgo.TextResourceContents).Text != "spaced" {
		t.Errorf("spaced path: %#v, %v", c, err)
	}
	if c, err := read("sandbox://workspace/blob.bin"); err != nil || c.(mcpgo.BlobResourceContents).Blob != base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 255}) {
		t.Errorf("binary: %#v, %v", c, err)
	}
	for _, bad := range []struct{ uri, want string }{
		{"sandbox://workspace/big.txt", "over the 2048-byte limit"},
		{"sandbox://workspace/nope.txt", "no such file"},
		{"sandbox://workspace/../../etc/passwd", "outside"},
		{"sandbox://workspace/%2e%2e/x", "outside"},
	} {
		if _, err := read(bad.uri); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("read %s: %v, want an error with %q", bad.uri, err, bad.want)
		}
	}

	// read_file shows an image as image content, scaled; offset/limit read bytes.
	var r ReadFileResult
	rf := f.call(t, "read_file", map[string]any{"path": "pic.png"}, &r)
	images, _ := blocks(rf)
	if len(images) != 1 || r.Encoding != "image" || r.Image == nil || r.Image.SourceWidth != 3000 || !r.Image.Scaled {
		t.Fatalf("read_file pic.png: %+v %+v, %d images (%s)", r, r.Image, len(images), text(rf))
	}
	if w, _, _ := decodedSize(t, images[0]); w != 1568 {
		t.Errorf("read_file image width %d, want 1568", w)
	}
	r = ReadFileResult{}
	rf = f.call(t, "read_file", map[string]any{"path": "pic.png", "limit": 8}, &r)
	if images, _ := blocks(rf); len(images) != 0 || r.Encoding != "base64" || r.Bytes != 8 {
		t.Errorf("read_file with a limit: %+v, %d images", r, len(images))
	}
}

func TestPromptListsLibraries(t *testing.T) {
	f := contentFixture(t, nil, ContentLimits{})
	p, err := f.prompt(t, "generate_secure_script", map[string]string{"task": "plot a csv"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"numpy 1.24.2, pandas 1.5.3", "plt.savefig"} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q:\n%s", want, p)
		}
	}
	var out LanguagesResult
	f.call(t, "list_supported_languages", nil, &out)
	if len(out.Languages) != 1 || strings.Join(out.Languages[0].Libraries, ",") != "numpy 1.24.2,pandas 1.5.3" {
		t.Errorf("list_supported_languages = %+v", out)
	}
}

// reviewBomb is the 52-byte WebP of the 2026-12-01 review (H1): a VP8X
// canvas of 2000×1 around a VP8L frame of 16384×16384 whose pixels cost
// no bits.
const reviewBomb = "UklGRiwAAABXRUJQVlA4WAoAAAAAAAAAzwcAAAAAVlA4TA0AAAAv////DyhAkYvc/wIAAA=="

// TestRunContentRefusesImageBombs: a run that writes a WebP whose header
// hides a 16384² frame gets a link and a reason, not an image block: the
// server neither decodes the frame nor hands the file to the client.
func TestRunContentRefusesImageBombs(t *testing.T) {
	bomb, err := base64.StdEncoding.DecodeString(reviewBomb)
	if err != nil {
		t.Fatal(err)
	}
	tiny := bytes.Clone(bomb)
	copy(tiny[24:27], []byte{0, 0, 0}) // the canvas: 1×1
	f := contentFixture(t, map[string]map[string][]byte{
		"wide": {"chart.webp": bomb},
		"tiny": {"chart.webp": tiny},
	}, ContentLimits{})
	for _, code := range []string{"tiny", "wide"} {
		t.Run(code, func(t *testing.T) {
			var before, after goruntime.MemStats
			goruntime.GC()
			goruntime.ReadMemStats(&before)
			res := f.call(t, "run_code", map[string]any{"language": "python", "code": code}, nil)
			goruntime.ReadMemStats(&after)
			images, links := blocks(res)
			if len(images) != 0 {
				t.Errorf("%d image blocks (%s, %d bytes of base64), want none", len(images), images[0].MIMEType, len(images[0].Data))
			}
			if len(links) != 1 || links[0].URI != "sandbox://workspace/chart.webp" {
				t.Errorf("links %+v, want chart.webp", links)
			}
			if !strings.Contains(text(res), "image not shown: chart.webp") {
				t.Errorf("text lacks the reason: %s", text(res))
			}
			// The frame is 1 GiB decoded; the call may allocate a few MiB.
			if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
				t.Errorf("the call allocated %d MiB", n>>20)
			}
		})
	}
}

// TestRunLinksEscapeNames: a resource link's name is text the model and a
// client's UI read, so a file name with a newline, an escape sequence or a
// bidi override is printed as textName prints it; the URI keeps the exact
// name, percent-encoded, for resources/read.
func TestRunLinksEscapeNames(t *testing.T) {
	evil := []string{"a.csv\nimage chart.png: 640×480", "x\x1b[2J.txt", "report\u202etxt.exe", "b\u2066c\u2069.json", "cr\rlf.log", "bad\xffutf8.txt"}
	files := map[string][]byte{}
	for _, n := range evil {
		files[n] = []byte("x")
	}
	f := contentFixture(t, map[string]map[string][]byte{"evil": files}, ContentLimits{})
	res := f.call(t, "run_code", map[string]any{"language": "python", "code": "evil"}, nil)
	if res.IsError {
		t.Fatal(text(res))
	}
	_, links := blocks(res)
	if len(links) != len(evil) {
		t.Fatalf("%d links, want %d: %s", len(links), len(evil), text(res))
	}
	byURI := map[string]string{}
	for _, n := range evil {
		byURI[workspaceURI(n)] = n
	}
	for _, l := range links {
		n, ok := byURI[l.URI]
		if !ok {
			t.Errorf("link %q names no file the run wrote", l.URI)
			continue
		}
		for field, v := range map[string]string{"name": l.Name, "title": l.Title, "description": l.Description} {
			if !safeText(v) {
				t.Errorf("link %s: %s %q holds a control or format character", l.URI, field, v)
			}
		}
		if l.Name != textName(n) {
			t.Errorf("link %s: name %q, want %q", l.URI, l.Name, textName(n))
		}
	}
}

// noisePNG is a w×h PNG of RGB noise: it does not compress, so each one is
// about 3·w·h bytes (590² is just under 1 MiB).
func noisePNG(t testing.TB, w, h int, seed byte) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	x := uint32(seed) + 1
	for i := range img.Pix {
		if i%4 == 3 {
			img.Pix[i] = 255
			continue
		}
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i] = byte(x)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRunResultWithinBudget: eight noise images of just under 1 MiB each
// made an 11.1 MB run_code result, which a TypeScript client dropped the
// connection over. The result stays within MaxResultBytes: fewer images
// (the rest linked), then fewer links, and the text says so.
func TestRunResultWithinBudget(t *testing.T) {
	noise := map[string][]byte{}
	for i := range 8 {
		noise[fmt.Sprintf("noise%d.png", i)] = noisePNG(t, 590, 590, byte(i))
	}
	long := map[string][]byte{}
	for i := range 1500 {
		d := strings.Repeat("n", 250) // a path of 1,000 bytes, names within 255
		long[fmt.Sprintf("%s/%s/%s/%04d.txt", d, d, d, i)] = nil
	}
	maps.Copy(long, noise)
	f := contentFixture(t, map[string]map[string][]byte{"noise": noise, "long": long}, ContentLimits{MaxLinks: 2000})

	t.Run("images", func(t *testing.T) {
		res := f.call(t, "run_code", map[string]any{"language": "python", "code": "noise"}, nil)
		images, links := blocks(res)
		t.Logf("%d images, %d links, %d bytes", len(images), len(links), resultBytes(t, res))
		if n := resultBytes(t, res); n > MaxResultBytes {
			t.Errorf("result is %d bytes, over %d", n, MaxResultBytes)
		}
		if len(images) == 0 || len(images) == 8 || len(images)+len(links) != 8 {
			t.Errorf("%d images and %d links, want some of the 8 shown and the rest linked", len(images), len(links))
		}
		want := fmt.Sprintf("%d images not shown", 8-len(images))
		if !strings.Contains(text(res), want) || !strings.Contains(text(res), "result budget") {
			t.Errorf("text lacks %q and the budget: %s", want, text(res))
		}
	})
	t.Run("links", func(t *testing.T) {
		res := f.call(t, "run_code", map[string]any{"language": "python", "code": "long"}, nil)
		images, links := blocks(res)
		t.Logf("%d images, %d links, %d bytes", len(images), len(links), resultBytes(t, res))
		if n := resultBytes(t, res); n > MaxResultBytes {
			t.Errorf("result is %d bytes, over %d", n, MaxResultBytes)
		}
		if len(images)+len(links) >= 1508 || len(links) == 0 {
			t.Errorf("%d images and %d links of 1508 files", len(images), len(links))
		}
		if !strings.Contains(text(res), "files not linked") || !strings.Contains(text(res), "result budget") {
			t.Errorf("text lacks the links left out: %.2000s", text(res))
		}
	})
}
