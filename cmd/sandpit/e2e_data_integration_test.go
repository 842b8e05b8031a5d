package main

// An analyst's session over stdio, as an MCP host runs it: a CSV in, pandas
// and matplotlib in a run, the chart back as an image block and the files
// the run wrote as resource links that resources/read returns.

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"strings"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

func contentBlocks(r *mcpgo.CallToolResult) (images []mcpgo.ImageContent, links []mcpgo.ResourceLink) {
	for _, c := range r.Content {
		switch c := c.(type) {
		case mcpgo.ImageContent:
			images = append(images, c)
		case mcpgo.ResourceLink:
			links = append(links, c)
		}
	}
	return images, links
}

func decodePNG(t *testing.T, img mcpgo.ImageContent) image.Config {
	t.Helper()
	if img.MIMEType != "image/png" {
		t.Fatalf("image block of type %s, want image/png", img.MIMEType)
	}
	b, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("image block is not a PNG: %v", err)
	}
	return cfg
}

func TestMCPDataAnalysis(t *testing.T) {
	c := startServer(t, nil, serverArgs(t)...)
	csv := "region,amount\nnorth,10\nsouth,25\nnorth,5\neast,7\n"
	if res := call(t, c, "write_file", map[string]any{"path": "sales.csv", "content": csv}); res.IsError {
		t.Fatal(text(res))
	}
	code := `import pandas as pd, matplotlib.pyplot as plt
df = pd.read_csv("sales.csv")
summary = df.groupby("region")["amount"].sum()
summary.to_csv("summary.csv")
ax = summary.plot.bar(figsize=(4, 3), title="Sales by region")
plt.tight_layout()
plt.savefig("chart.png", dpi=100)
print(summary.to_dict())
`
	res := call(t, c, "run_code", map[string]any{"language": "python", "code": code, "timeout_seconds": 60})
	got := runResult(t, res)
	if got.Status != "success" || !strings.Contains(got.Stdout, "{'east': 7, 'north': 15, 'south': 25}") {
		t.Fatalf("status %s\nstdout: %s\nstderr: %s", got.Status, got.Stdout, got.Stderr)
	}
	images, links := contentBlocks(res)
	if len(images) != 1 {
		t.Fatalf("%d image blocks, want the chart: %s", len(images), text(res))
	}
	if cfg := decodePNG(t, images[0]); cfg.Width != 400 || cfg.Height != 300 {
		t.Errorf("chart is %d×%d, want 400×300 (figsize 4×3 at 100 dpi)", cfg.Width, cfg.Height)
	}
	var link *mcpgo.ResourceLink
	for i, l := range links {
		if l.Name == "summary.csv" {
			link = &links[i]
		}
	}
	if link == nil || link.URI != "sandbox://workspace/summary.csv" || link.MIMEType != "text/csv" {
		t.Fatalf("no text/csv resource link for summary.csv in %+v", links)
	}
	var rr mcpgo.ReadResourceRequest
	rr.Params.URI = link.URI
	read, err := c.ReadResource(t.Context(), rr)
	if err != nil {
		t.Fatal(err)
	}
	tc, ok := read.Contents[0].(mcpgo.TextResourceContents)
	if want := "region,amount\neast,7\nnorth,15\nsouth,25\n"; !ok || tc.Text != want || tc.MIMEType != "text/csv" {
		t.Errorf("resources/read %s = %#v, want %q", link.URI, read.Contents[0], want)
	}

	t.Run("plt.show saves the figure", func(t *testing.T) {
		res := call(t, c, "run_code", map[string]any{"language": "python", "code": "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 2), dpi=50)\nplt.plot([3, 1, 2])\nplt.show()"})
		images, _ := contentBlocks(res)
		if got := runResult(t, res); got.Status != "success" || len(images) != 1 || !strings.Contains(text(res), "image figure-1.png: 100×100") {
			t.Fatalf("status %s, %d images: %s", got.Status, len(images), text(res))
		}
	})
	t.Run("read_file of an image", func(t *testing.T) {
		res := call(t, c, "read_file", map[string]any{"path": "chart.png"})
		images, _ := contentBlocks(res)
		if res.IsError || len(images) != 1 {
			t.Fatalf("read_file chart.png: %d images: %s", len(images), text(res))
		}
		if cfg := decodePNG(t, images[0]); cfg.Width != 400 {
			t.Errorf("read_file image %d wide, want 400", cfg.Width)
		}
	})
	t.Run("a 10000x10000 png comes back scaled", func(t *testing.T) {
		// Written row by row: a few hundred KB of PNG, 100 MP once decoded.
		code := `import struct, zlib
def chunk(t, b): return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
z, w = zlib.compressobj(), 10000
rows = b"".join(z.compress(b"\x00" + bytes([(y // 500 % 2) * 255]) * w) for y in range(w)) + z.flush()
open("huge.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, w, 8, 0, 0, 0, 0)) + chunk(b"IDAT", rows) + chunk(b"IEND", b""))
`
		res := call(t, c, "run_code", map[string]any{"language": "python", "code": code, "timeout_seconds": 60})
		images, _ := contentBlocks(res)
		if got := runResult(t, res); got.Status != "success" || len(images) != 1 {
			t.Fatalf("status %s, %d images: %s %s", got.Status, len(images), text(res), got.Stderr)
		}
		cfg := decodePNG(t, images[0])
		b, _ := base64.StdEncoding.DecodeString(images[0].Data)
		if cfg.Width != 1568 || cfg.Height != 1568 || len(b) > 1<<20 {
			t.Errorf("scaled to %d×%d in %d bytes; want 1568×1568 within 1 MiB", cfg.Width, cfg.Height, len(b))
		}
	})
	t.Run("100 images are capped with a note", func(t *testing.T) {
		code := "from PIL import Image\nfor i in range(100):\n    Image.new('RGB', (16, 16), (i, 0, 0)).save('many-%03d.png' % i)\n"
		res := call(t, c, "run_code", map[string]any{"language": "python", "code": code, "timeout_seconds": 60})
		images, links := contentBlocks(res)
		if got := runResult(t, res); got.Status != "success" || len(images) != 8 || len(links) != 50 {
			t.Fatalf("status %s, %d images, %d links: %s", got.Status, len(images), len(links), text(res))
		}
		if !strings.Contains(text(res), "92 more images not shown (at most 8 per result)") {
			t.Errorf("no note of the capped images: %s", text(res))
		}
	})
	t.Run("languages list the libraries", func(t *testing.T) {
		res := call(t, c, "list_supported_languages", nil)
		for _, want := range []string{"javascript", "pandas 1.5", "matplotlib 3.6", "sklearn 1.2"} {
			if !strings.Contains(text(res), want) {
				t.Errorf("list_supported_languages lacks %q: %s", want, text(res))
			}
		}
	})
}
