// Package preview turns image files a program wrote into images a model can
// be shown: PNG, JPEG, GIF or WebP, scaled down to a bounded size.
//
// The guarantee: no input makes it allocate more than Limits.MaxDecodeBytes
// (plus small fixed buffers), whatever the file claims, and no more than two
// images are decoded at once. Before anything is decoded, sandpit reads the
// header of the frame the decoder would decode (a WebP's VP8/VP8L frame,
// not its VP8X canvas, which must agree) and prices it in bytes: pixels by
// colour model and per-pixel decoder state (a progressive JPEG's
// coefficients, an interlaced PNG's passes). A larger non-interlaced PNG (a
// 10,000 × 10,000 chart, a decompression bomb) is scaled row by row, its
// row buffers within the same budget. What comes back is always encoded
// from the decoded pixels, never the file's bytes.
package preview

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"path"
	"strings"

	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/webp"
)

// Limits bound a preview and the work of making it.
type Limits struct {
	// MaxEdge is the longest side of a preview, in pixels.
	MaxEdge int
	// MaxBytes is the largest encoded preview.
	MaxBytes int
	// MaxDecodeBytes bounds what making one preview allocates: the
	// decoder's pixels and per-pixel state for the frame it would decode
	// (bytes a pixel by format and colour model, a progressive JPEG's
	// coefficients included), or a streamed PNG's row buffers, plus the
	// preview being encoded.
	MaxDecodeBytes int64
	// MaxStreamPixels is the largest PNG scaled row by row (CPU time).
	MaxStreamPixels int64
}

// DefaultLimits: a long edge of 1568 px (what vision models take without
// scaling themselves), 1 MiB, 128 MiB to decode (a 24 MP RGBA image, a
// 12 MP progressive JPEG), 150 MP streamed (a few seconds of CPU).
var DefaultLimits = Limits{MaxEdge: 1568, MaxBytes: 1 << 20, MaxDecodeBytes: 128 << 20, MaxStreamPixels: 150_000_000}

// concurrentDecodes bounds how many images are decoded or scaled at once.
const concurrentDecodes = 2

var decodeSlots = make(chan struct{}, concurrentDecodes)

// ErrTooLarge: the image is larger than the limits allow to decode.
var ErrTooLarge = errors.New("image too large to preview")

// ErrFormat: not an image this package reads, or a damaged one.
var ErrFormat = errors.New("not a readable PNG, JPEG, GIF or WebP image")

// Image is a preview.
type Image struct {
	// Data is always an image sandpit encoded from the pixels it decoded,
	// never the file's own bytes: whatever a client's decoder would make
	// of the file, it gets what sandpit checked.
	Data     []byte
	MIMEType string
	// Width and Height are the preview's; SourceWidth and SourceHeight the
	// file's.
	Width, Height             int
	SourceWidth, SourceHeight int
	// Scaled is set when the preview is smaller than the file.
	Scaled bool
	// SourceBytes is the file's size.
	SourceBytes int
}

// Kind says what a file name's extension makes it: "raster" for PNG, JPEG,
// GIF and WebP, "svg", or "" for anything else.
func Kind(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".png", ".jpg", ".jpeg", ".gif", ".webp":
		return "raster"
	case ".svg":
		return "svg"
	}
	return ""
}

// outputCost is what encoding a tw×th preview allocates: the scaled RGBA
// image, a copy flattened over white for JPEG, and the encoders' buffers.
func outputCost(tw, th int) int64 { return 12 * int64(tw) * int64(th) }

// Make returns a preview of data, a whole image file, within l: the image
// decoded and encoded again as PNG (or JPEG, when a PNG would not fit
// MaxBytes, or for a JPEG file), scaled down to MaxEdge. It stops when ctx
// is done: between rows of a streamed PNG, on the reads of a decoder.
func Make(ctx context.Context, data []byte, l Limits) (Image, error) {
	fr, err := readFrame(data)
	if err != nil {
		return Image{SourceBytes: len(data)}, err
	}
	w, h := fr.width, fr.height
	out := Image{SourceWidth: w, SourceHeight: h, SourceBytes: len(data)}
	if w <= 0 || h <= 0 {
		return out, fmt.Errorf("%w: %d×%d", ErrFormat, w, h)
	}
	tw, th := fit(w, h, l.MaxEdge)
	whole := fr.cost+outputCost(tw, th) <= l.MaxDecodeBytes
	stream := !whole && fr.streamable && int64(w)*int64(h) <= l.MaxStreamPixels &&
		streamCost(fr.png, tw, th)+outputCost(tw, th) <= l.MaxDecodeBytes
	if !whole && !stream {
		return out, fmt.Errorf("%w: %d×%d %s needs about %d MiB to decode, over the limit of %d MiB", ErrTooLarge, w, h, fr.format, (fr.cost+outputCost(tw, th))>>20, l.MaxDecodeBytes>>20)
	}
	// The bound holds for the server, not only per image: at most
	// concurrentDecodes images are decoded at once, whatever the number of
	// tool calls in flight.
	select {
	case decodeSlots <- struct{}{}:
	case <-ctx.Done():
		return out, ctx.Err()
	}
	defer func() { <-decodeSlots }()
	if err := ctx.Err(); err != nil {
		return out, err
	}
	var img image.Image
	if whole {
		src, err := decode(ctx, fr.format, data)
		if err != nil {
			return out, err
		}
		// What was priced must bound what was decoded (a GIF's first
		// frame may be smaller than its screen, never larger).
		if b := src.Bounds(); b.Dx() > w || b.Dy() > h {
			return out, fmt.Errorf("%w: the header says %d×%d, the decoder made %d×%d", ErrFormat, w, h, b.Dx(), b.Dy())
		}
		if b := src.Bounds(); b.Dx() == tw && b.Dy() == th {
			img = src
		} else {
			dst := image.NewRGBA(image.Rect(0, 0, tw, th))
			xdraw.BiLinear.Scale(dst, dst.Bounds(), src, src.Bounds(), xdraw.Src, nil)
			img = dst
		}
	} else if img, err = scalePNG(ctx, fr.png, tw, th); err != nil {
		return out, err
	}
	for range 8 {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		b, mime, err := encode(img, l.MaxBytes, fr.format == "jpeg")
		if err != nil {
			return out, err
		}
		if b != nil {
			out.Data, out.MIMEType = b, mime
			out.Width, out.Height = img.Bounds().Dx(), img.Bounds().Dy()
			out.Scaled = out.Width != w || out.Height != h
			return out, nil
		}
		// Too many bytes even as JPEG: smaller still.
		b0 := img.Bounds()
		nw, nh := max(1, b0.Dx()*3/4), max(1, b0.Dy()*3/4)
		dst := image.NewRGBA(image.Rect(0, 0, nw, nh))
		xdraw.BiLinear.Scale(dst, dst.Bounds(), img, b0, xdraw.Src, nil)
		img = dst
	}
	return out, fmt.Errorf("%w: no encoding fits %d bytes", ErrTooLarge, l.MaxBytes)
}

// decode decodes data with the decoder of format (the one readFrame read
// the header of, not whichever image.Decode would pick), reading through
// ctx.
func decode(ctx context.Context, format string, data []byte) (image.Image, error) {
	r := &ctxReader{ctx: ctx, r: bytes.NewReader(data)}
	var (
		img image.Image
		err error
	)
	switch format {
	case "png":
		img, err = png.Decode(r)
	case "jpeg":
		img, err = jpeg.Decode(r)
	case "gif":
		img, err = gif.Decode(r)
	case "webp":
		img, err = webp.Decode(r)
	default:
		err = fmt.Errorf("format %s", format)
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	return img, nil
}

// ctxReader fails its reads once ctx is done, which ends a decode at its
// next read.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// fit scales w×h down (never up) so that its longer side is at most edge.
func fit(w, h, edge int) (int, int) {
	if w <= edge && h <= edge {
		return w, h
	}
	if w >= h {
		return edge, max(1, int(int64(h)*int64(edge)/int64(w)))
	}
	return max(1, int(int64(w)*int64(edge)/int64(h))), edge
}

// encode returns img as PNG if that fits limit, else as JPEG (over white,
// which has no alpha) if that does, else nil. A photo (jpeg) tries JPEG
// only: as PNG it would be larger and no better.
func encode(img image.Image, limit int, photo bool) ([]byte, string, error) {
	var buf bytes.Buffer
	if !photo {
		if err := png.Encode(&buf, img); err != nil {
			return nil, "", err
		}
		if buf.Len() <= limit {
			return buf.Bytes(), "image/png", nil
		}
	}
	flat := image.NewRGBA(img.Bounds())
	draw.Draw(flat, flat.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	draw.Draw(flat, flat.Bounds(), img, img.Bounds().Min, draw.Over)
	buf.Reset()
	if err := jpeg.Encode(&buf, flat, &jpeg.Options{Quality: 85}); err != nil {
		return nil, "", err
	}
	if buf.Len() <= limit {
		return buf.Bytes(), "image/jpeg", nil
	}
	return nil, "", nil
}
