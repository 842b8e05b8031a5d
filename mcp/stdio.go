package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/mark3labs/mcp-go/server"
)

// DefaultMaxMessageBytes bounds one JSON-RPC message from the client: a
// write_file of the largest accepted content (16 MiB, base64-encoded) fits.
const DefaultMaxMessageBytes = 24 << 20

// ServeStdio serves s on in/out until in ends or ctx is cancelled. A
// message (a line) longer than maxBytes is never read whole: the server
// answers it with a JSON-RPC error for its id and skips the rest of it, so
// a huge argument costs neither memory nor the connection.
func ServeStdio(ctx context.Context, s *server.MCPServer, in io.Reader, out io.Writer, workers, maxBytes int, log *slog.Logger) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxMessageBytes
	}
	w := &lockedWriter{w: out}
	stdio := server.NewStdioServer(s)
	server.WithWorkerPoolSize(workers)(stdio)
	return stdio.Listen(ctx, newLineLimiter(in, maxBytes, w, log), w)
}

// lockedWriter serialises our own error replies with mcp-go's messages
// (each of which is one Write).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineLimiter passes the client's messages (one per line) through, but no
// line longer than max: those are answered and dropped.
type lineLimiter struct {
	r       *bufio.Reader
	max     int
	out     io.Writer
	log     *slog.Logger
	pending []byte // the rest of the current line, valid until the next read of r
}

func newLineLimiter(in io.Reader, max int, out io.Writer, log *slog.Logger) *lineLimiter {
	return &lineLimiter{r: bufio.NewReaderSize(in, max), max: max, out: out, log: log}
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	for len(l.pending) == 0 {
		line, err := l.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			l.refuse(line)
			continue
		}
		if len(line) == 0 {
			return 0, err
		}
		l.pending = line // the last line may lack its newline (err io.EOF)
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}

// refuse answers an oversized message with an error for its id and skips
// the rest of it. The id may stand anywhere among the message's members
// (the TypeScript SDK writes it after the params), so the whole line goes
// through an idScanner, a piece at a time, and nothing of it is kept but
// the id.
func (l *lineLimiter) refuse(head []byte) {
	var sc idScanner
	sc.scan(head)
	total := len(head)
	for {
		chunk, err := l.r.ReadSlice('\n')
		total += len(chunk)
		sc.scan(chunk)
		if !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	id := sc.result()
	l.log.Warn("refused an oversized message", "bytes", total, "limit", l.max, "id", string(id))
	if id == nil {
		return // a notification (or not a JSON object): nothing to answer
	}
	reply, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"error": map[string]any{
			"code": -32600, // invalid request
			"message": fmt.Sprintf("message of %d bytes refused: this server takes at most %d bytes per message; "+
				"send large content in parts (write_file with smaller pieces) or have a program in run_code produce it", total, l.max),
		},
	})
	l.out.Write(append(reply, '\n'))
}

// maxIDBytes bounds the id an idScanner keeps; a longer one is answered as
// null, as JSON-RPC says of an id that cannot be read.
const maxIDBytes = 1 << 10

// maxKeyBytes bounds a member name an idScanner keeps to compare with "id"
// (escapes included: "\u0069d" is "id" too).
const maxKeyBytes = 32

// idScanner finds the top-level "id" member of one JSON object fed to it in
// pieces, in memory bounded by maxIDBytes whatever the object's size. It
// follows strings (and their escapes) and the nesting of objects and
// arrays, so an "id" inside the params, or the text `"id":` inside a
// string, is never taken for the message's. It checks nothing else: the
// message is refused anyway, and only its id is wanted. Of several
// top-level "id" members the last one wins, as encoding/json (and so
// mcp-go) decodes them.
type idScanner struct {
	depth   int  // nesting of objects and arrays; 1 is among the message's members
	started bool // the message's '{' was seen
	done    bool // the message's '}' was seen, or it is not an object
	str     bool // inside a string
	esc     bool // the byte before was a backslash inside a string
	wantKey bool // among the members, the next string is a member name
	inKey   bool // capturing a member name
	key     []byte
	isID    bool // the member name just read is "id"
	inVal   bool // capturing the id's value
	val     []byte
	over    bool // the id's value passed maxIDBytes
	id      json.RawMessage
	found   bool
}

func (s *idScanner) scan(p []byte) {
	for i := 0; i < len(p) && !s.done; i++ {
		if s.str && !s.esc && !s.inKey && !s.inVal {
			// Skip a string's body fast: nothing in it matters.
			j := bytes.IndexAny(p[i:], `"\`)
			if j < 0 {
				return
			}
			i += j
		}
		c := p[i]
		if s.str {
			s.keep(c)
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.str = false
				if s.inKey {
					s.inKey = false
					var name string
					s.isID = json.Unmarshal(s.key, &name) == nil && name == "id"
				}
			}
			continue
		}
		if !s.started {
			switch c {
			case ' ', '\t', '\r', '\n':
			case '{':
				s.started, s.depth, s.wantKey = true, 1, true
			default:
				s.done = true // a batch or not JSON: no one id to answer
			}
			continue
		}
		switch c {
		case '"':
			s.str = true
			if s.depth == 1 && s.wantKey {
				s.inKey, s.wantKey, s.key = true, false, s.key[:0]
			}
			s.keep(c)
		case '{', '[':
			s.keep(c)
			s.depth++
		case '}', ']':
			if s.depth == 1 {
				s.endValue()
				s.done = true
				continue
			}
			s.keep(c)
			s.depth--
		case ':':
			if s.depth == 1 && s.isID {
				s.isID, s.inVal, s.val, s.over = false, true, s.val[:0], false
				continue
			}
			s.keep(c)
		case ',':
			if s.depth == 1 {
				s.endValue()
				s.wantKey = true
				continue
			}
			s.keep(c)
		default:
			s.keep(c)
		}
	}
}

// keep adds c to the member name or id value being captured, within bounds.
func (s *idScanner) keep(c byte) {
	switch {
	case s.inKey:
		if len(s.key) < maxKeyBytes {
			s.key = append(s.key, c)
		}
	case s.inVal:
		if len(s.val) < maxIDBytes {
			s.val = append(s.val, c)
		} else {
			s.over = true
		}
	}
}

// endValue ends the id's value at the ',' or '}' after it.
func (s *idScanner) endValue() {
	if !s.inVal {
		return
	}
	s.inVal = false
	s.found = true
	v := bytes.TrimSpace(s.val)
	if s.over || !json.Valid(v) {
		s.id = json.RawMessage("null")
		return
	}
	s.id = append(json.RawMessage(nil), v...)
}

// result is the message's id, or nil when it has none (a notification).
func (s *idScanner) result() json.RawMessage {
	if !s.found {
		return nil
	}
	return s.id
}
