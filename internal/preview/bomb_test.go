package preview

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// reviewBomb is the 52-byte WebP of the 2026-12-01 review (H1): a VP8X
// canvas of 2000×1 around a VP8L frame of 16384×16384 whose pixels cost no
// bits.
const reviewBomb = "UklGRiwAAABXRUJQVlA4WAoAAAAAAAAAzwcAAAAAVlA4TA0AAAAv////DyhAkYvc/wIAAA=="

// bitWriter writes bits least significant first, as VP8L reads them.
type bitWriter struct {
	buf   []byte
	acc   uint64
	nbits uint
}

func (w *bitWriter) write(v uint64, n uint) {
	w.acc |= v << w.nbits
	w.nbits += n
	for w.nbits >= 8 {
		w.buf = append(w.buf, byte(w.acc))
		w.acc >>= 8
		w.nbits -= 8
	}
}

func (w *bitWriter) bytes() []byte {
	if w.nbits > 0 {
		return append(w.buf, byte(w.acc))
	}
	return w.buf
}

// lyingWebP is a WebP whose VP8X chunk (when canvasW > 0) says
// canvasW×canvasH around a VP8L frame of frameW×frameH: no transforms, no
// colour cache, and five prefix codes of a single symbol each, so that every
// pixel costs zero bits and the file stays tiny whatever the frame's size.
func lyingWebP(canvasW, canvasH, frameW, frameH int) []byte {
	var bw bitWriter
	bw.write(0x2f, 8)
	bw.write(uint64(frameW-1), 14)
	bw.write(uint64(frameH-1), 14)
	bw.write(0, 1) // alpha hint
	bw.write(0, 3) // version
	bw.write(0, 1) // no transform
	bw.write(0, 1) // no colour cache
	bw.write(0, 1) // no meta prefix codes
	// Green, red, blue, alpha and distance: an opaque grey-blue.
	for _, sym := range []uint64{0, 200, 200, 255, 0} {
		bw.write(1, 1) // a simple code
		bw.write(0, 1) // of one symbol
		bw.write(1, 1) // of 8 bits
		bw.write(sym, 8)
	}
	vp8l := bw.bytes()

	var body bytes.Buffer
	body.WriteString("WEBP")
	chunk := func(id string, data []byte) {
		body.WriteString(id)
		binary.Write(&body, binary.LittleEndian, uint32(len(data)))
		body.Write(data)
		if len(data)%2 == 1 {
			body.WriteByte(0)
		}
	}
	if canvasW > 0 {
		x := make([]byte, 10)
		x[4], x[5], x[6] = byte(canvasW-1), byte((canvasW-1)>>8), byte((canvasW-1)>>16)
		x[7], x[8], x[9] = byte(canvasH-1), byte((canvasH-1)>>8), byte((canvasH-1)>>16)
		chunk("VP8X", x)
	}
	chunk("VP8L", vp8l)
	var out bytes.Buffer
	out.WriteString("RIFF")
	binary.Write(&out, binary.LittleEndian, uint32(body.Len()))
	out.Write(body.Bytes())
	return out.Bytes()
}

func TestLyingWebPMatchesTheReview(t *testing.T) {
	want, err := base64.StdEncoding.DecodeString(reviewBomb)
	if err != nil {
		t.Fatal(err)
	}
	if got := lyingWebP(2000, 1, 16384, 16384); !bytes.Equal(got, want) {
		t.Fatalf("generator makes\n%x\nthe review's file is\n%x", got, want)
	}
}

// allocated returns the bytes f allocates on the heap (garbage included).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// wideIHDR is a PNG whose IHDR says w×h at the given depth and colour type,
// followed by a little compressed data: the shape of a file whose header
// asks for huge row buffers.
func wideIHDR(w, h uint32, depth, colorType byte) []byte {
	var out bytes.Buffer
	out.Write(pngMagic)
	chunk := func(typ string, body []byte) {
		binary.Write(&out, binary.BigEndian, uint32(len(body)))
		out.WriteString(typ)
		out.Write(body)
		binary.Write(&out, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), body...)))
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = depth, colorType
	chunk("IHDR", ihdr)
	chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})
	chunk("IEND", nil)
	return out.Bytes()
}

// TestMakeRefusesWhatTheHeaderHides: the budget is on the frame that would
// be decoded, not on what a container header claims, and it is checked
// before anything of the size of the image is allocated. Nothing undecoded
// comes back either: the 1×1 canvas is not passed through.
func TestMakeRefusesWhatTheHeaderHides(t *testing.T) {
	const bound = 8 << 20 // bytes a refusal may allocate: no image-sized buffer
	small := DefaultLimits
	small.MaxDecodeBytes = 16 << 20
	tests := []struct {
		name   string
		data   []byte
		limits *Limits
	}{
		{"webp canvas 2000x1 around 2048x2048", lyingWebP(2000, 1, 2048, 2048), nil},
		{"webp canvas 1x1 around 2048x2048", lyingWebP(1, 1, 2048, 2048), nil},
		{"webp canvas 2000x1 around 16384x16384 (the review's)", must(base64.StdEncoding.DecodeString(reviewBomb)), nil},
		{"webp canvas 1x1 around 16384x16384", lyingWebP(1, 1, 16384, 16384), nil},
		{"webp no canvas, 16384x16384", lyingWebP(0, 0, 16384, 16384), nil},
		{"png 16777216x8 RGBA16", wideIHDR(1<<24, 8, 16, 6), nil},
		// 32 MB a row, twice, against a budget of 16 MiB: refused before
		// the rows are allocated.
		{"png 4000000x1 RGBA16", wideIHDR(4_000_000, 1, 16, 6), &small},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				img Image
				err error
			)
			l := DefaultLimits
			if tt.limits != nil {
				l = *tt.limits
			}
			n := allocated(func() { img, err = Make(t.Context(), tt.data, l) })
			if err == nil {
				t.Errorf("Make() = %d×%d %s of %d bytes, want a refusal", img.Width, img.Height, img.MIMEType, len(img.Data))
			} else if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrFormat) {
				t.Errorf("Make() = %v, want ErrTooLarge or ErrFormat", err)
			}
			if bytes.Equal(img.Data, tt.data) {
				t.Errorf("the file itself came back undecoded")
			}
			if n > bound {
				t.Errorf("Make allocated %d MiB, over %d MiB", n>>20, bound>>20)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestMakeNeverForwardsTheFile: an image that fits is decoded and encoded
// again, so what reaches the client is what sandpit decoded.
func TestMakeNeverForwardsTheFile(t *testing.T) {
	data := hugePNG(t, 40, 30, 0)
	data = append(data, "trailing bytes a client might parse"...)
	img, err := Make(t.Context(), data, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(img.Data, data) || img.Width != 40 || img.Height != 30 || img.Scaled {
		t.Errorf("Make() = %d×%d scaled %v, the file itself %v; want a re-encoded 40×30", img.Width, img.Height, img.Scaled, bytes.Equal(img.Data, data))
	}
}

// TestMakeBudgetsBytesNotPixels: the same pixel count costs what its
// decoder allocates for it, and the allocation stays within the budget.
func TestMakeBudgetsBytesNotPixels(t *testing.T) {
	l := DefaultLimits
	l.MaxDecodeBytes = 40 << 20
	gray := hugePNG(t, 2000, 2000, 0) // 4 MB decoded and 30 MB of preview: fits
	if _, err := Make(t.Context(), gray, l); err != nil {
		t.Errorf("2000² gray8 within %d MiB: %v", l.MaxDecodeBytes>>20, err)
	}
	// 2000² RGBA16 interlaced: 32 MB decoded, twice over for the passes,
	// and it cannot be streamed.
	rgba16 := wideIHDR(2000, 2000, 16, 6)
	rgba16[8+8+12] = 1 // interlace
	binary.BigEndian.PutUint32(rgba16[8+8+13:], crc32.ChecksumIEEE(rgba16[8+4:8+8+13]))
	var err error
	n := allocated(func() { _, err = Make(t.Context(), rgba16, l) })
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("interlaced 2000² RGBA16 in %d MiB: %v, want ErrTooLarge", l.MaxDecodeBytes>>20, err)
	}
	if n > 4<<20 {
		t.Errorf("refusing allocated %d MiB", n>>20)
	}
}

// cancelAfter is a context whose Err turns Canceled after n calls: a
// cancellation in the middle of a decode, without timing.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

func TestMakeStopsOnCancel(t *testing.T) {
	data := hugePNG(t, 4000, 4000, 0) // streamed row by row under these limits
	l := DefaultLimits
	l.MaxEdge, l.MaxDecodeBytes = 100, 8<<20
	for _, at := range []int{0, 100} {
		ctx := &cancelAfter{Context: t.Context(), n: at}
		_, err := Make(ctx, data, l)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled after %d checks: %v, want context.Canceled", at, err)
		}
		if ctx.n > 0 {
			t.Errorf("cancelled after %d checks: Make checked only %d times", at, at-ctx.n)
		}
	}
	// Decoded whole: the reads check the context.
	small := hugePNG(t, 1000, 1000, 0)
	if _, err := Make(&cancelAfter{Context: t.Context(), n: 2}, small, DefaultLimits); !errors.Is(err, context.Canceled) {
		t.Errorf("whole decode cancelled: %v, want context.Canceled", err)
	}
}

// progressive turns a baseline JPEG from image/jpeg into one image/jpeg
// decodes as progressive: SOF0 becomes SOF2 and each scan a DC-only one.
// Its pixels are garbage, but the decoder allocates what a real
// progressive image of that size makes it allocate.
func progressive(t *testing.T, data []byte) []byte {
	t.Helper()
	out := bytes.Clone(data)
	sof, sos := bytes.Index(out, []byte{0xff, 0xc0}), bytes.Index(out, []byte{0xff, 0xda})
	if sof < 0 || sos < 0 {
		t.Fatal("no SOF0 or SOS")
	}
	out[sof+1] = 0xc2
	n := int(binary.BigEndian.Uint16(out[sos+2:]))
	out[sos+2+n-2] = 0 // Se: spectral selection 0..0
	return out
}

// TestFrameCostCoversTheDecoder: what readFrame prices an image at is at
// least what its decoder allocates for it.
func TestFrameCostCoversTheDecoder(t *testing.T) {
	rgba := image.NewRGBA(image.Rect(0, 0, 1000, 1000))
	noisy(rgba, rgba.Bounds(), func(g *rand.Rand) color.Color { return color.RGBA{uint8(g.IntN(256)), 9, 9, 255} })
	gray := image.NewGray(image.Rect(0, 0, 1000, 1000))
	var jpg, jgray, gf bytes.Buffer
	jpeg.Encode(&jpg, rgba, nil)
	jpeg.Encode(&jgray, gray, nil)
	gif.Encode(&gf, gray, nil)
	rgba16 := image.NewNRGBA64(image.Rect(0, 0, 500, 500))
	var interlaced bytes.Buffer // image/png cannot write one: a header says so
	interlaced.Write(wideIHDR(500, 500, 8, 6))
	ilace := interlaced.Bytes()
	ilace[8+8+12] = 1
	binary.BigEndian.PutUint32(ilace[8+8+13:], crc32.ChecksumIEEE(ilace[8+4:8+8+13]))

	tests := []struct {
		name     string
		data     []byte
		minCost  int64 // what the format must at least be priced at
		progress bool
	}{
		{"png gray8", hugePNG(t, 1000, 1000, 0), 1_000_000, false},
		{"png rgba16", encodePNG(t, rgba16), 8 * 250_000, false},
		{"png interlaced rgba8", ilace, 2 * 4 * 250_000, false},
		{"jpeg 4:2:0", jpg.Bytes(), 1_500_000, false},
		{"jpeg gray", jgray.Bytes(), 1_000_000, false},
		{"jpeg progressive 4:2:0", progressive(t, jpg.Bytes()), 7_500_000, true},
		{"gif", gf.Bytes(), 1_000_000, false},
		{"webp lossless", lyingWebP(0, 0, 1000, 1000), 8_000_000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr, err := readFrame(tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if fr.cost < tt.minCost {
				t.Errorf("priced at %d bytes, want at least %d", fr.cost, tt.minCost)
			}
			n := allocated(func() { _, err = decode(t.Context(), fr.format, tt.data) })
			if err != nil && !tt.progress && !strings.Contains(tt.name, "interlaced") {
				t.Fatalf("decode: %v", err)
			}
			t.Logf("priced %d, allocated %d (%v)", fr.cost, n, err)
			const slack = 1 << 20 // the decoders' fixed buffers
			if int64(n) > fr.cost+slack {
				t.Errorf("the decoder allocated %d bytes, priced at %d", n, fr.cost)
			}
		})
	}
}

// riffWebP wraps chunks (id, body) in a RIFF WEBP container.
func riffWebP(chunks ...[2]string) []byte {
	var body bytes.Buffer
	body.WriteString("WEBP")
	for _, c := range chunks {
		body.WriteString(c[0])
		binary.Write(&body, binary.LittleEndian, uint32(len(c[1])))
		body.WriteString(c[1])
		if len(c[1])%2 == 1 {
			body.WriteByte(0)
		}
	}
	var out bytes.Buffer
	out.WriteString("RIFF")
	binary.Write(&out, binary.LittleEndian, uint32(body.Len()))
	out.Write(body.Bytes())
	return out.Bytes()
}

// vp8x is a VP8X chunk body with flags and a canvas of w×h.
func vp8x(flags byte, w, h int) string {
	x := []byte{flags, 0, 0, 0, byte(w - 1), byte((w - 1) >> 8), byte((w - 1) >> 16), byte(h - 1), byte((h - 1) >> 8), byte((h - 1) >> 16)}
	return string(x)
}

// vp8Key is the start of a VP8 key frame of w×h (tag, start code, sizes).
func vp8Key(w, h int) string {
	b := []byte{0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint16(b[6:], uint16(w))
	binary.LittleEndian.PutUint16(b[8:], uint16(h))
	return string(b)
}

// TestWebPFrame: the lossy frame is read from its own header, a canvas must
// agree with it, an alpha plane is priced, animations are refused.
func TestWebPFrame(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		w, h    int
		minCost int64
		wantErr error
	}{
		{"vp8 alone", riffWebP([2]string{"VP8 ", vp8Key(16383, 16383)}), 16383, 16383, 2 * 16383 * 16383, nil},
		{"vp8 in a matching canvas", riffWebP([2]string{"VP8X", vp8x(0, 300, 200)}, [2]string{"VP8 ", vp8Key(300, 200)}), 300, 200, 2 * 300 * 200, nil},
		{"vp8 with alpha", riffWebP([2]string{"VP8X", vp8x(0x10, 300, 200)}, [2]string{"ALPH", "\x00"}, [2]string{"VP8 ", vp8Key(300, 200)}), 300, 200, 11 * 300 * 200, nil},
		{"vp8 in a 2000x1 canvas", riffWebP([2]string{"VP8X", vp8x(0, 2000, 1)}, [2]string{"VP8 ", vp8Key(16383, 16383)}), 0, 0, 0, ErrFormat},
		{"animated", riffWebP([2]string{"VP8X", vp8x(0x02, 300, 200)}, [2]string{"ANIM", "\x00\x00\x00\x00\x00\x00"}), 0, 0, 0, ErrFormat},
		{"a canvas and no frame", riffWebP([2]string{"VP8X", vp8x(0, 300, 200)}), 0, 0, 0, ErrFormat},
		{"a chunk past the end", riffWebP([2]string{"VP8 ", vp8Key(30, 20)})[:20], 0, 0, 0, ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr, err := readFrame(tt.data)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("readFrame() = %+v, %v; want %v", fr, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fr.width != tt.w || fr.height != tt.h || fr.cost < tt.minCost {
				t.Errorf("frame %d×%d priced %d, want %d×%d at least %d", fr.width, fr.height, fr.cost, tt.w, tt.h, tt.minCost)
			}
		})
	}
}
