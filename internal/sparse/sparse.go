// Package sparse copies and hashes files without filling their holes.
//
// The guarantee: Copy reads and writes only the data extents the source
// has (SEEK_DATA/SEEK_HOLE), so the copy takes no more disk than the
// source's data, whatever its apparent size; a hole reads as zeros to the
// hash without being read from disk or written anywhere.
package sparse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

const chunk = 256 << 10

var (
	bufs  = sync.Pool{New: func() any { b := make([]byte, chunk); return &b }}
	zeros = make([]byte, chunk)
)

// ErrChanged: the source's content ended before the size it was copied at.
var ErrChanged = errors.New("the file changed while it was copied")

// Copy copies the first size bytes of src to dst at the same offsets,
// reading and writing only src's data extents, and sets dst's size to size.
// dst may be nil (only sum is fed). sum, when not nil, receives the whole
// content in order, holes as zeros. It returns the bytes of data copied
// (holes excluded) and stops with ctx's error when ctx is done.
func Copy(ctx context.Context, dst, src *os.File, size int64, sum io.Writer) (int64, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := *bp
	var data int64
	pos := int64(0)
	for pos < size {
		if err := ctx.Err(); err != nil {
			return data, err
		}
		start, err := src.Seek(pos, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO): // only a hole is left
			start = size
		case err != nil: // no SEEK_DATA here: all of it is data
			start = pos
		}
		start = min(start, size)
		if start < pos {
			return data, fmt.Errorf("SEEK_DATA went back from %d to %d", pos, start)
		}
		if sum != nil {
			for h := start - pos; h > 0; {
				n := min(h, chunk)
				sum.Write(zeros[:n])
				h -= n
				if err := ctx.Err(); err != nil {
					return data, err
				}
			}
		}
		if start >= size {
			break
		}
		end, err := src.Seek(start, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		for off := start; off < end; {
			if err := ctx.Err(); err != nil {
				return data, err
			}
			n := int(min(end-off, chunk))
			got, err := src.ReadAt(buf[:n], off)
			if got < n {
				if err == nil || errors.Is(err, io.EOF) {
					err = ErrChanged
				}
				return data, err
			}
			if dst != nil {
				if _, err := dst.WriteAt(buf[:n], off); err != nil {
					return data, err
				}
			}
			if sum != nil {
				sum.Write(buf[:n])
			}
			off += int64(n)
			data += int64(n)
		}
		pos = end
	}
	// Past the end of a file reads as a hole too: make sure it is that long.
	if fi, err := src.Stat(); err != nil {
		return data, err
	} else if fi.Size() < size {
		return data, ErrChanged
	}
	if dst != nil {
		if err := dst.Truncate(size); err != nil {
			return data, err
		}
	}
	return data, nil
}
