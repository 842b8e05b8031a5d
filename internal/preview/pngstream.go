package preview

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"io"
)

// pxChunk is how many pixels of a row are converted to RGBA at a time.
const pxChunk = 4096

// streamCost is what scalePNG allocates for h scaled to tw×th: two rows of
// the input (the PNG filter needs the previous one), a chunk of converted
// pixels, a row of sums and the output. Make checks it against the budget
// before scalePNG allocates anything.
func streamCost(h *pngHeader, tw, th int) int64 {
	return 2*(1+h.rowBytes()) + 4*pxChunk + 40*int64(tw) + 4*int64(tw)*int64(th)
}

// scalePNG scales a non-interlaced PNG to tw×th with a box filter, one input
// row at a time: memory is streamCost, two rows of the input and the output,
// whatever the input's height. image/png would hold the whole decoded image
// (400 MB for a 10,000² RGBA chart). It checks ctx between rows.
func scalePNG(ctx context.Context, h *pngHeader, tw, th int) (*image.RGBA, error) {
	if h.interlace != 0 {
		return nil, fmt.Errorf("%w: an interlaced PNG of %d×%d", ErrTooLarge, h.width, h.height)
	}
	z, err := zlib.NewReader(h.idat())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	defer z.Close()

	w, hh := h.width, h.height
	rowBytes := h.rowBytes()
	bpp := max(1, h.channels*h.depth/8) // bytes per complete pixel, for the filters
	cur, prev := make([]byte, 1+rowBytes), make([]byte, 1+rowBytes)
	px := make([]uint8, 4*min(w, pxChunk)) // part of a row as non-premultiplied RGBA
	sums := make([]uint64, 4*tw)
	counts := make([]uint64, tw)
	dst := image.NewRGBA(image.Rect(0, 0, tw, th))
	outRow := 0
	flush := func() {
		o := dst.Pix[outRow*dst.Stride:]
		for x := 0; x < tw; x++ {
			n := counts[x]
			if n == 0 {
				continue
			}
			for c := 0; c < 4; c++ {
				o[4*x+c] = uint8((sums[4*x+c] + n/2) / n)
				sums[4*x+c] = 0
			}
			counts[x] = 0
		}
	}
	for y := 0; y < hh; y++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(z, cur); err != nil {
			return nil, fmt.Errorf("%w: row %d of %d: %v", ErrFormat, y, hh, err)
		}
		if err := unfilter(cur[0], cur[1:], prev[1:], bpp); err != nil {
			return nil, err
		}
		if oy := y * th / hh; oy != outRow {
			flush()
			outRow = oy
		}
		for x0 := 0; x0 < w; x0 += pxChunk {
			x1 := min(w, x0+pxChunk)
			h.row(cur[1:], px, x0, x1)
			for x := x0; x < x1; x++ {
				p := px[4*(x-x0) : 4*(x-x0)+4 : 4*(x-x0)+4]
				a := uint64(p[3])
				ox := int(int64(x) * int64(tw) / int64(w))
				o := 4 * ox
				// Premultiplied, so transparent pixels add no colour.
				sums[o] += uint64(p[0]) * a / 255
				sums[o+1] += uint64(p[1]) * a / 255
				sums[o+2] += uint64(p[2]) * a / 255
				sums[o+3] += a
				counts[ox]++
			}
		}
		cur, prev = prev, cur
	}
	flush()
	return dst, nil
}

type pngHeader struct {
	width, height   int
	depth, channels int
	colorType       byte
	interlace       byte
	palette         [][4]uint8
	idats           [][]byte
}

// rowBytes is the length of one unfiltered row.
func (h *pngHeader) rowBytes() int64 {
	return (int64(h.width)*int64(h.channels)*int64(h.depth) + 7) / 8
}

// idat reads the image data, the IDAT chunks joined (nothing is copied).
func (h *pngHeader) idat() io.Reader {
	rs := make([]io.Reader, len(h.idats))
	for i, b := range h.idats {
		rs[i] = bytes.NewReader(b)
	}
	return io.MultiReader(rs...)
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// readPNGHeader walks the chunks: IHDR, PLTE and tRNS are kept, the IDAT
// chunks noted (slices of data, nothing is copied).
func readPNGHeader(data []byte) (*pngHeader, error) {
	if !bytes.HasPrefix(data, pngMagic) {
		return nil, fmt.Errorf("%w: no PNG signature", ErrFormat)
	}
	h := &pngHeader{}
	rest := data[len(pngMagic):]
	for len(rest) >= 12 {
		n := binary.BigEndian.Uint32(rest)
		typ := string(rest[4:8])
		if uint64(n)+12 > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: chunk %q runs past the end", ErrFormat, typ)
		}
		body := rest[8 : 8+n]
		rest = rest[12+n:]
		if (typ == "IHDR") != (h.channels == 0) {
			return nil, fmt.Errorf("%w: IHDR is not the first chunk, or not the only one", ErrFormat)
		}
		switch typ {
		case "IHDR":
			if n != 13 {
				return nil, fmt.Errorf("%w: bad IHDR", ErrFormat)
			}
			h.width, h.height = int(binary.BigEndian.Uint32(body)), int(binary.BigEndian.Uint32(body[4:]))
			h.depth, h.colorType, h.interlace = int(body[8]), body[9], body[12]
			switch h.colorType {
			case 0, 3:
				h.channels = 1
			case 2:
				h.channels = 3
			case 4:
				h.channels = 2
			case 6:
				h.channels = 4
			default:
				return nil, fmt.Errorf("%w: colour type %d", ErrFormat, h.colorType)
			}
			if !validDepth(h.colorType, h.depth) || h.width <= 0 || h.height <= 0 || h.width > 1<<24 || h.height > 1<<24 {
				return nil, fmt.Errorf("%w: bad IHDR (%d×%d, depth %d, colour type %d)", ErrFormat, h.width, h.height, h.depth, h.colorType)
			}
		case "PLTE":
			for i := 0; i+3 <= len(body); i += 3 {
				h.palette = append(h.palette, [4]uint8{body[i], body[i+1], body[i+2], 255})
			}
		case "tRNS":
			if h.colorType == 3 {
				for i, a := range body {
					if i < len(h.palette) {
						h.palette[i][3] = a
					}
				}
			}
		case "IDAT":
			h.idats = append(h.idats, body)
		case "IEND":
			rest = nil
		}
	}
	if h.channels == 0 || len(h.idats) == 0 {
		return nil, fmt.Errorf("%w: no IHDR or no image data", ErrFormat)
	}
	if h.colorType == 3 && len(h.palette) == 0 {
		return nil, fmt.Errorf("%w: palette image without a palette", ErrFormat)
	}
	return h, nil
}

func validDepth(colorType byte, depth int) bool {
	switch colorType {
	case 0:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16
	case 3:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8
	default:
		return depth == 8 || depth == 16
	}
}

// unfilter undoes a PNG row filter in place (PNG spec, section 9).
func unfilter(filter byte, cur, prev []byte, bpp int) error {
	switch filter {
	case 0:
	case 1:
		for i := bpp; i < len(cur); i++ {
			cur[i] += cur[i-bpp]
		}
	case 2:
		for i := range cur {
			cur[i] += prev[i]
		}
	case 3:
		for i := 0; i < bpp && i < len(cur); i++ {
			cur[i] += prev[i] / 2
		}
		for i := bpp; i < len(cur); i++ {
			cur[i] += uint8((int(cur[i-bpp]) + int(prev[i])) / 2)
		}
	case 4:
		for i := 0; i < bpp && i < len(cur); i++ {
			cur[i] += prev[i]
		}
		for i := bpp; i < len(cur); i++ {
			cur[i] += paeth(cur[i-bpp], prev[i], prev[i-bpp])
		}
	default:
		return fmt.Errorf("%w: row filter %d", ErrFormat, filter)
	}
	return nil
}

func paeth(a, b, c uint8) uint8 {
	p := int(a) + int(b) - int(c)
	pa, pb, pc := abs(p-int(a)), abs(p-int(b)), abs(p-int(c))
	switch {
	case pa <= pb && pa <= pc:
		return a
	case pb <= pc:
		return b
	}
	return c
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// row converts pixels x0 to x1 of one unfiltered row to non-premultiplied
// 8-bit RGBA, into px from its start.
func (h *pngHeader) row(raw []byte, px []uint8, x0, x1 int) {
	sample := func(i int) uint8 { // the i-th sample of the row, scaled to 8 bits
		switch h.depth {
		case 16:
			return raw[2*i]
		case 8:
			return raw[i]
		}
		bit := i * h.depth
		v := raw[bit/8] >> (8 - h.depth - bit%8) & (1<<h.depth - 1)
		if h.colorType == 3 {
			return v // a palette index
		}
		return uint8(int(v) * 255 / (1<<h.depth - 1))
	}
	for x := x0; x < x1; x++ {
		p := px[4*(x-x0) : 4*(x-x0)+4 : 4*(x-x0)+4]
		switch h.colorType {
		case 0:
			g := sample(x)
			p[0], p[1], p[2], p[3] = g, g, g, 255
		case 2:
			p[0], p[1], p[2], p[3] = sample(3*x), sample(3*x+1), sample(3*x+2), 255
		case 3:
			i := int(sample(x))
			if i < len(h.palette) {
				c := h.palette[i]
				p[0], p[1], p[2], p[3] = c[0], c[1], c[2], c[3]
			} else {
				p[0], p[1], p[2], p[3] = 0, 0, 0, 255
			}
		case 4:
			g := sample(2 * x)
			p[0], p[1], p[2], p[3] = g, g, g, sample(2*x+1)
		case 6:
			p[0], p[1], p[2], p[3] = sample(4*x), sample(4*x+1), sample(4*x+2), sample(4*x+3)
		}
	}
}
