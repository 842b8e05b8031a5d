package preview

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image/gif"
)

// frame is what a decoder of the file would allocate: the size of the frame
// it decodes (not a container's claim about it) and the bytes it holds while
// doing so. Each format's header is read here, by sandpit, with the
// decoder's own rules for which frame it decodes.
type frame struct {
	format string // png, jpeg, gif, webp
	width  int
	height int
	// cost is the decoder's peak allocation in bytes for the whole image:
	// the decoded pixels and any per-pixel state (a progressive JPEG's
	// coefficients, a lossless WebP's transform buffer, an interlaced PNG's
	// passes).
	cost int64
	// streamable: a non-interlaced PNG, which scalePNG reads row by row.
	streamable bool
	png        *pngHeader
}

// readFrame reads data's header and returns the frame a decoder would
// decode, or ErrFormat for anything else (or for a container whose frame
// is not the size it announces).
func readFrame(data []byte) (frame, error) {
	switch {
	case bytes.HasPrefix(data, pngMagic):
		return pngFrame(data)
	case bytes.HasPrefix(data, []byte("\xff\xd8")):
		return jpegFrame(data)
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		cfg, err := gif.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			return frame{}, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		// image/gif decodes the first frame only, and refuses a frame that
		// is not inside the logical screen: one byte a pixel.
		return frame{format: "gif", width: cfg.Width, height: cfg.Height, cost: int64(cfg.Width) * int64(cfg.Height)}, nil
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return webpFrame(data)
	}
	return frame{}, fmt.Errorf("%w: unknown signature", ErrFormat)
}

// pngFrame: image/png decodes into Gray, Gray16, Paletted, RGBA, NRGBA,
// RGBA64 or NRGBA64 by colour type and depth, with two rows of filter
// state; an interlaced image is decoded pass by pass into images that add
// up to a second copy.
func pngFrame(data []byte) (frame, error) {
	h, err := readPNGHeader(data)
	if err != nil {
		return frame{}, err
	}
	var bpp int64
	switch {
	case h.colorType == 3, h.colorType == 0 && h.depth <= 8:
		bpp = 1
	case h.colorType == 0:
		bpp = 2
	case h.depth == 16:
		bpp = 8
	default:
		bpp = 4
	}
	w, ht := int64(h.width), int64(h.height)
	cost := w*ht*bpp + 2*(1+h.rowBytes())
	if h.interlace != 0 {
		cost *= 2
	}
	return frame{format: "png", width: h.width, height: h.height, cost: cost, streamable: h.interlace == 0, png: h}, nil
}

// jpegFrame reads the markers up to the frame header (SOF). image/jpeg
// allocates each component's plane over whole MCUs; a progressive image
// also keeps every component's coefficients, 64 int32 per 8×8 block (4
// bytes a pixel of each plane); an RGB image (an Adobe marker or R, G, B
// component ids) is converted to RGBA, a 4-component one to CMYK.
func jpegFrame(data []byte) (frame, error) {
	p := 2
	for {
		for p < len(data) && data[p] == 0xff && p+1 < len(data) && data[p+1] == 0xff {
			p++ // fill bytes
		}
		if p+4 > len(data) || data[p] != 0xff {
			return frame{}, fmt.Errorf("%w: no JPEG frame header", ErrFormat)
		}
		m := data[p+1]
		if m == 0x01 || m >= 0xd0 && m <= 0xd9 { // TEM, RSTn, SOI, EOI: no length
			p += 2
			continue
		}
		n := int(binary.BigEndian.Uint16(data[p+2:]))
		if n < 2 || p+2+n > len(data) {
			return frame{}, fmt.Errorf("%w: JPEG segment runs past the end", ErrFormat)
		}
		seg := data[p+4 : p+2+n]
		switch m {
		case 0xc0, 0xc1, 0xc2:
			return jpegSOF(data, seg, m == 0xc2)
		case 0xc3, 0xc5, 0xc6, 0xc7, 0xc9, 0xca, 0xcb, 0xcd, 0xce, 0xcf, 0xda:
			return frame{}, fmt.Errorf("%w: unsupported JPEG (marker %#x before a baseline or progressive frame)", ErrFormat, m)
		}
		p += 2 + n
	}
}

func jpegSOF(data, seg []byte, progressive bool) (frame, error) {
	if len(seg) < 6 {
		return frame{}, fmt.Errorf("%w: short JPEG frame header", ErrFormat)
	}
	h, w := int(binary.BigEndian.Uint16(seg[1:])), int(binary.BigEndian.Uint16(seg[3:]))
	nc := int(seg[5])
	if w == 0 || h == 0 || nc < 1 || nc > 4 || nc == 2 || len(seg) < 6+3*nc {
		return frame{}, fmt.Errorf("%w: bad JPEG frame header (%d×%d, %d components)", ErrFormat, w, h, nc)
	}
	hmax, vmax := 1, 1
	var hs, vs [4]int
	for i := range nc {
		hs[i], vs[i] = int(seg[7+3*i]>>4), int(seg[7+3*i]&0x0f)
		if nc == 1 {
			hs[i], vs[i] = 1, 1 // image/jpeg ignores a lone component's sampling
		}
		if hs[i] < 1 || vs[i] < 1 || hs[i] > 4 || vs[i] > 4 {
			return frame{}, fmt.Errorf("%w: bad JPEG sampling factors", ErrFormat)
		}
		hmax, vmax = max(hmax, hs[i]), max(vmax, vs[i])
	}
	// Planes cover whole MCUs of 8·hmax × 8·vmax pixels.
	mw := int64((w+8*hmax-1)/(8*hmax)) * int64(8*hmax)
	mh := int64((h+8*vmax-1)/(8*vmax)) * int64(8*vmax)
	var planes int64
	for i := range nc {
		planes += mw * mh * int64(hs[i]*vs[i]) / int64(hmax*vmax)
	}
	cost := planes
	if progressive {
		cost += 4 * planes
	}
	px := int64(w) * int64(h)
	switch {
	case nc == 4:
		cost += 4 * px
	case nc == 3 && (bytes.Contains(data, []byte("Adobe")) || string([]byte{seg[6], seg[9], seg[12]}) == "RGB"):
		cost += 4 * px
	}
	return frame{format: "jpeg", width: w, height: h, cost: cost}, nil
}

// webpFrame walks the RIFF chunks as golang.org/x/image/webp does: the first
// VP8 (lossy) or VP8L (lossless) chunk is the frame decoded, at the size in
// its own header. A VP8X canvas of another size is refused: the decoder
// would decode the frame and ignore the canvas, the reader of the header
// would believe the canvas. Animations are refused (the decoder has none).
func webpFrame(data []byte) (frame, error) {
	var (
		canvasW, canvasH int
		alpha            bool
		alphaCost        int64
	)
	p := 12
	for p+8 <= len(data) {
		id := string(data[p : p+4])
		n := int64(binary.LittleEndian.Uint32(data[p+4:]))
		if n > int64(len(data)-p-8) {
			return frame{}, fmt.Errorf("%w: WebP chunk %q runs past the end", ErrFormat, id)
		}
		body := data[p+8 : p+8+int(n)]
		p += 8 + int(n) + int(n&1)
		switch id {
		case "VP8X":
			if len(body) != 10 || canvasW != 0 {
				return frame{}, fmt.Errorf("%w: bad VP8X chunk", ErrFormat)
			}
			if body[0]&0x02 != 0 {
				return frame{}, fmt.Errorf("%w: an animated WebP", ErrFormat)
			}
			alpha = body[0]&0x10 != 0
			canvasW = 1 + (int(body[4]) | int(body[5])<<8 | int(body[6])<<16)
			canvasH = 1 + (int(body[7]) | int(body[8])<<8 | int(body[9])<<16)
			if alpha {
				// The ALPH chunk: raw (a byte a pixel) or lossless
				// (an NRGBA image, its transform buffer, then the bytes).
				alphaCost = 9 * int64(canvasW) * int64(canvasH)
			}
		case "VP8 ", "VP8L":
			var w, h int
			var perPixel int64
			if id == "VP8 " {
				// A key frame: 3-byte tag, start code 9d 01 2a, then 14-bit
				// width and height. The decoder makes a YCbCr 4:2:0 image.
				if len(body) < 10 || body[0]&1 != 0 || !bytes.Equal(body[3:6], []byte{0x9d, 0x01, 0x2a}) {
					return frame{}, fmt.Errorf("%w: bad VP8 frame header", ErrFormat)
				}
				w, h = int(binary.LittleEndian.Uint16(body[6:])&0x3fff), int(binary.LittleEndian.Uint16(body[8:])&0x3fff)
				perPixel = 2
			} else {
				// Signature 0x2f, then 14-bit width-1 and height-1. The
				// decoder holds the NRGBA pixels and, for a colour-indexing
				// transform, a second buffer as large.
				if len(body) < 5 || body[0] != 0x2f {
					return frame{}, fmt.Errorf("%w: bad VP8L frame header", ErrFormat)
				}
				v := binary.LittleEndian.Uint32(body[1:])
				w, h = 1+int(v&0x3fff), 1+int(v>>14&0x3fff)
				perPixel = 8
			}
			if w == 0 || h == 0 {
				return frame{}, fmt.Errorf("%w: an empty WebP frame", ErrFormat)
			}
			if canvasW != 0 && (w != canvasW || h != canvasH) {
				return frame{}, fmt.Errorf("%w: the WebP canvas says %d×%d but its frame is %d×%d", ErrFormat, canvasW, canvasH, w, h)
			}
			return frame{format: "webp", width: w, height: h, cost: perPixel*int64(w)*int64(h) + alphaCost}, nil
		}
	}
	return frame{}, fmt.Errorf("%w: a WebP without a VP8 or VP8L frame", ErrFormat)
}
