// Package preview turns image files a program wrote into images a model can
// be shown: PNG, JPEG, GIF or WebP, scaled down to a bounded size.
//
// The guarantee: no input makes it allocate more than a bound fixed by
// Limits, whatever the file claims, and no more than two images are
// decoded at once. Dimensions are read from the header
// before anything is decoded; an image decoded whole has at most MaxPixels
// pixels, and a larger PNG (a 10,000 × 10,000 chart, a decompression bomb)
// is scaled row by row, holding one input row and the output at a time.
package preview

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	_ "image/gif" // registered decoders: gif, jpeg, png, webp
	"image/jpeg"
	"image/png"
	"path"
	"strings"

	xdraw "golang.org/x/image/draw"
	_ "golang.org/x/image/webp"
)

// Limits bound a preview and the work of making it.
type Limits struct {
	// MaxEdge is the longest side of a preview, in pixels.
	MaxEdge int
	// MaxBytes is the largest encoded preview.
	MaxBytes int
	// MaxPixels is the largest image decoded whole (4 bytes a pixel).
	MaxPixels int64
	// MaxStreamPixels is the largest PNG scaled row by row (CPU time).
	MaxStreamPixels int64
}

// DefaultLimits: a long edge of 1568 px (what vision models take without
// scaling themselves), 1 MiB, 24 MP decoded whole (96 MiB), 150 MP streamed (a few seconds of CPU).
var DefaultLimits = Limits{MaxEdge: 1568, MaxBytes: 1 << 20, MaxPixels: 24_000_000, MaxStreamPixels: 150_000_000}

// concurrentDecodes bounds how many images are decoded or scaled at once.
const concurrentDecodes = 2

var decodeSlots = make(chan struct{}, concurrentDecodes)

// ErrTooLarge: the image is larger than the limits allow to decode.
var ErrTooLarge = errors.New("image too large to preview")

// ErrFormat: not an image this package reads, or a damaged one.
var ErrFormat = errors.New("not a readable PNG, JPEG, GIF or WebP image")

// Image is a preview.
type Image struct {
	Data     []byte
	MIMEType string
	// Width and Height are the preview's; SourceWidth and SourceHeight the
	// file's.
	Width, Height             int
	SourceWidth, SourceHeight int
	// Scaled is set when Data is not the file itself (scaled or re-encoded).
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

// Make returns a preview of data, a whole image file, within l: the file
// itself when it already fits, otherwise a scaled PNG (or JPEG, when a PNG
// would not fit MaxBytes).
func Make(data []byte, l Limits) (Image, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return Image{}, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	w, h := cfg.Width, cfg.Height
	out := Image{SourceWidth: w, SourceHeight: h, SourceBytes: len(data)}
	if w <= 0 || h <= 0 {
		return out, fmt.Errorf("%w: %d×%d", ErrFormat, w, h)
	}
	if w <= l.MaxEdge && h <= l.MaxEdge && len(data) <= l.MaxBytes {
		out.Data, out.MIMEType, out.Width, out.Height = data, "image/"+format, w, h
		return out, nil
	}
	tw, th := fit(w, h, l.MaxEdge)
	pixels := int64(w) * int64(h)
	// The bound holds for the server, not only per image: at most
	// concurrentDecodes images are decoded at once, whatever the number of
	// tool calls in flight.
	decodeSlots <- struct{}{}
	defer func() { <-decodeSlots }()
	var img image.Image
	switch {
	case pixels <= l.MaxPixels:
		src, _, err := image.Decode(bytes.NewReader(data))
		if err != nil {
			return out, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		if tw == w && th == h {
			img = src
		} else {
			dst := image.NewRGBA(image.Rect(0, 0, tw, th))
			xdraw.BiLinear.Scale(dst, dst.Bounds(), src, src.Bounds(), xdraw.Src, nil)
			img = dst
		}
	case format == "png" && pixels <= l.MaxStreamPixels:
		img, err = scalePNG(data, tw, th)
		if err != nil {
			return out, err
		}
	default:
		return out, fmt.Errorf("%w: %d×%d pixels, over the limit of %d", ErrTooLarge, w, h, l.MaxPixels)
	}
	for range 8 {
		b, mime, err := encode(img, l.MaxBytes)
		if err != nil {
			return out, err
		}
		if b != nil {
			out.Data, out.MIMEType, out.Scaled = b, mime, true
			out.Width, out.Height = img.Bounds().Dx(), img.Bounds().Dy()
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
// which has no alpha) if that does, else nil.
func encode(img image.Image, limit int) ([]byte, string, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, "", err
	}
	if buf.Len() <= limit {
		return buf.Bytes(), "image/png", nil
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
