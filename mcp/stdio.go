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

// refuse answers an oversized message with an error for its id (found in
// its first bytes, where clients put it) and skips the rest of it.
func (l *lineLimiter) refuse(head []byte) {
	id := messageID(head)
	total := len(head)
	for {
		chunk, err := l.r.ReadSlice('\n')
		total += len(chunk)
		if !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	l.log.Warn("refused an oversized message", "bytes", total, "limit", l.max, "id", string(id))
	if id == nil {
		return // a notification, or the id is past the first max bytes: nothing to answer
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

// messageID finds the top-level "id" of a JSON object from its first
// bytes, or nil.
func messageID(head []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if key == "id" {
			if err := dec.Decode(&v); err != nil {
				return nil
			}
			return v
		}
		if err := dec.Decode(&v); err != nil { // skips a value (truncated: the id comes later)
			return nil
		}
	}
	return nil
}
