package preview

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"testing"
)

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// noisy fills img with random colours, so that filters and sums are all
// exercised.
func noisy(img interface{ Set(x, y int, c color.Color) }, r image.Rectangle, model func(*rand.Rand) color.Color) {
	rng := rand.New(rand.NewPCG(1, 2))
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.Set(x, y, model(rng))
		}
	}
}

// boxReference scales with the same box filter as scalePNG, from a whole
// image decoded by image/png.
func boxReference(src image.Image, tw, th int) *image.RGBA {
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	sums := make([]uint64, 4*tw*th)
	counts := make([]uint64, tw*th)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.NRGBAModel.Convert(src.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
			o := (y*th/h)*tw + x*tw/w
			a := uint64(c.A)
			sums[4*o] += uint64(c.R) * a / 255
			sums[4*o+1] += uint64(c.G) * a / 255
			sums[4*o+2] += uint64(c.B) * a / 255
			sums[4*o+3] += a
			counts[o]++
		}
	}
	dst := image.NewRGBA(image.Rect(0, 0, tw, th))
	for i, n := range counts {
		for c := 0; c < 4; c++ {
			dst.Pix[4*i+c] = uint8((sums[4*i+c] + n/2) / n)
		}
	}
	return dst
}

func TestScalePNGMatchesReference(t *testing.T) {
	r := image.Rect(0, 0, 37, 23)
	pal := color.Palette{color.NRGBA{255, 0, 0, 255}, color.NRGBA{0, 255, 0, 128}, color.NRGBA{0, 0, 255, 0}, color.NRGBA{9, 9, 9, 255}}
	tests := []struct {
		name string
		img  image.Image
	}{
		{"gray8", func() image.Image {
			m := image.NewGray(r)
			noisy(m, r, func(g *rand.Rand) color.Color { return color.Gray{uint8(g.IntN(256))} })
			return m
		}()},
		{"gray16", func() image.Image {
			m := image.NewGray16(r)
			noisy(m, r, func(g *rand.Rand) color.Color { return color.Gray16{uint16(g.IntN(65536))} })
			return m
		}()},
		{"rgb8", func() image.Image {
			m := image.NewRGBA(r)
			noisy(m, r, func(g *rand.Rand) color.Color {
				return color.RGBA{uint8(g.IntN(256)), uint8(g.IntN(256)), uint8(g.IntN(256)), 255}
			})
			return m
		}()},
		{"nrgba8", func() image.Image {
			m := image.NewNRGBA(r)
			noisy(m, r, func(g *rand.Rand) color.Color {
				return color.NRGBA{uint8(g.IntN(256)), uint8(g.IntN(256)), uint8(g.IntN(256)), uint8(g.IntN(256))}
			})
			return m
		}()},
		{"nrgba16", func() image.Image {
			m := image.NewNRGBA64(r)
			noisy(m, r, func(g *rand.Rand) color.Color {
				return color.NRGBA64{uint16(g.IntN(65536)), uint16(g.IntN(65536)), uint16(g.IntN(65536)), uint16(g.IntN(65536))}
			})
			return m
		}()},
		{"palette 2-bit with alpha", func() image.Image {
			m := image.NewPaletted(r, pal)
			noisy(m, r, func(g *rand.Rand) color.Color { return pal[g.IntN(len(pal))] })
			return m
		}()},
		{"palette 1-bit", func() image.Image {
			m := image.NewPaletted(r, pal[:2])
			noisy(m, r, func(g *rand.Rand) color.Color { return pal[g.IntN(2)] })
			return m
		}()},
	}
	for _, tt := range tests {
		for _, size := range [][2]int{{10, 7}, {37, 23}, {1, 1}, {36, 5}} {
			data := encodePNG(t, tt.img)
			src, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			h, err := readPNGHeader(data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := scalePNG(t.Context(), h, size[0], size[1])
			if err != nil {
				t.Fatalf("%s %v: %v", tt.name, size, err)
			}
			want := boxReference(src, size[0], size[1])
			if !near(got.Pix, want.Pix, tolerance(tt.name)) {
				t.Errorf("%s to %v: pixels differ from the reference\ngot  %v\nwant %v", tt.name, size, got.Pix[:min(16, len(got.Pix))], want.Pix[:min(16, len(want.Pix))])
			}
		}
	}
}

// tolerance: color.NRGBAModel rounds 16-bit translucent colours through
// premultiplied 16 bits, the reference's own error; 8-bit must be exact.
func tolerance(name string) int {
	if name == "nrgba16" {
		return 2
	}
	return 0
}

func near(a, b []byte, tol int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := int(a[i]) - int(b[i]); d > tol || d < -tol {
			return false
		}
	}
	return true
}

// hugePNG writes a w×h grayscale PNG row by row (a few KB for any size):
// the kind of file a decompression bomb is.
func hugePNG(t *testing.T, w, h int, interlace byte) []byte {
	t.Helper()
	var out bytes.Buffer
	out.Write(pngMagic)
	chunk := func(typ string, body []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(body)))
		out.Write(n[:])
		out.WriteString(typ)
		out.Write(body)
		crc := crc32.NewIEEE()
		crc.Write([]byte(typ))
		crc.Write(body)
		binary.BigEndian.PutUint32(n[:], crc.Sum32())
		out.Write(n[:])
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9], ihdr[12] = 8, 0, interlace
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	row := make([]byte, 1+w)
	for y := 0; y < h; y++ {
		for x := 1; x <= w; x++ {
			row[x] = uint8((x / 100 * 40) ^ (y / 100 * 40)) // a coarse checkerboard
		}
		zw.Write(row)
	}
	zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return out.Bytes()
}

func TestMakeHugePNGIsScaledRowByRow(t *testing.T) {
	data := hugePNG(t, 10000, 10000, 0)
	got, err := Make(t.Context(), data, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if got.Width != 1568 || got.Height != 1568 || got.SourceWidth != 10000 || !got.Scaled || got.MIMEType != "image/png" {
		t.Errorf("preview %d×%d of %d×%d (%s, scaled %v), want 1568×1568 PNG", got.Width, got.Height, got.SourceWidth, got.SourceHeight, got.MIMEType, got.Scaled)
	}
	if len(got.Data) > DefaultLimits.MaxBytes {
		t.Errorf("preview is %d bytes, over %d", len(got.Data), DefaultLimits.MaxBytes)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(got.Data))
	if err != nil || cfg.Width != 1568 {
		t.Errorf("preview does not decode as a 1568-wide PNG: %+v %v", cfg, err)
	}
}

func TestMakeLimits(t *testing.T) {
	small := image.NewRGBA(image.Rect(0, 0, 300, 200))
	noisy(small, small.Bounds(), func(g *rand.Rand) color.Color { return color.RGBA{uint8(g.IntN(256)), 0, 0, 255} })
	var jpg, gf bytes.Buffer
	jpeg.Encode(&jpg, small, nil)
	gif.Encode(&gf, small, nil)
	wide := image.NewGray(image.Rect(0, 0, 4000, 1000))
	var inset bytes.Buffer // a first frame of 50×40 on a screen of 300×200
	frame := image.NewPaletted(image.Rect(10, 10, 60, 50), color.Palette{color.Black, color.White})
	gif.EncodeAll(&inset, &gif.GIF{Image: []*image.Paletted{frame}, Delay: []int{0}, Config: image.Config{ColorModel: frame.Palette, Width: 300, Height: 200}})

	tests := []struct {
		name     string
		data     []byte
		limits   Limits
		w, h     int
		mime     string
		scaled   bool
		wantErr  error
		maxBytes int
	}{
		{name: "small png re-encoded", data: encodePNG(t, small), limits: DefaultLimits, w: 300, h: 200, mime: "image/png"},
		{name: "jpeg re-encoded as jpeg", data: jpg.Bytes(), limits: DefaultLimits, w: 300, h: 200, mime: "image/jpeg"},
		{name: "gif re-encoded as png", data: gf.Bytes(), limits: DefaultLimits, w: 300, h: 200, mime: "image/png"},
		{name: "gif written with a frame offset on a larger screen", data: inset.Bytes(), limits: DefaultLimits, w: 300, h: 200, mime: "image/png"},
		{name: "wide is scaled to the edge", data: encodePNG(t, wide), limits: DefaultLimits, w: 1568, h: 392, mime: "image/png", scaled: true},
		{name: "too many bytes: re-encoded smaller", data: encodePNG(t, small), limits: Limits{MaxEdge: 1568, MaxBytes: 20000, MaxDecodeBytes: 8 << 20}, mime: "image/jpeg", scaled: true, maxBytes: 20000},
		{name: "over the decode budget and not PNG", data: jpg.Bytes(), limits: Limits{MaxEdge: 100, MaxBytes: 1 << 20, MaxDecodeBytes: 100_000, MaxStreamPixels: 1 << 30}, wantErr: ErrTooLarge},
		{name: "interlaced PNG over the budget", data: hugePNG(t, 2000, 2000, 1), limits: Limits{MaxEdge: 100, MaxBytes: 1 << 20, MaxDecodeBytes: 1 << 20, MaxStreamPixels: 1 << 30}, wantErr: ErrTooLarge},
		{name: "PNG over the stream cap", data: hugePNG(t, 3000, 3000, 0), limits: Limits{MaxEdge: 100, MaxBytes: 1 << 20, MaxDecodeBytes: 1 << 20, MaxStreamPixels: 1_000_000}, wantErr: ErrTooLarge},
		{name: "not an image", data: []byte("hello"), limits: DefaultLimits, wantErr: ErrFormat},
		{name: "truncated PNG", data: hugePNG(t, 3000, 3000, 0)[:200], limits: Limits{MaxEdge: 100, MaxBytes: 1 << 20, MaxDecodeBytes: 1 << 20, MaxStreamPixels: 1 << 30}, wantErr: ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Make(t.Context(), tt.data, tt.limits)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Make() = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.w != 0 && (got.Width != tt.w || got.Height != tt.h) {
				t.Errorf("size %d×%d, want %d×%d", got.Width, got.Height, tt.w, tt.h)
			}
			if got.MIMEType != tt.mime || got.Scaled != tt.scaled {
				t.Errorf("mime %s scaled %v, want %s %v", got.MIMEType, got.Scaled, tt.mime, tt.scaled)
			}
			if tt.maxBytes > 0 && len(got.Data) > tt.maxBytes {
				t.Errorf("%d bytes, over %d", len(got.Data), tt.maxBytes)
			}
			if _, _, err := image.DecodeConfig(bytes.NewReader(got.Data)); err != nil {
				t.Errorf("preview does not decode: %v", err)
			}
		})
	}
}

func TestKind(t *testing.T) {
	for name, want := range map[string]string{"a.PNG": "raster", "x/y.jpeg": "raster", "p.webp": "raster", "c.svg": "svg", "d.csv": "", "png": ""} {
		if got := Kind(name); got != want {
			t.Errorf("Kind(%q) = %q, want %q", name, got, want)
		}
	}
}
