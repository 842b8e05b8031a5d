package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// A message over the limit is answered with an error for its id and never
// read whole; the connection goes on serving.
func TestStdioRefusesOversizedMessages(t *testing.T) {
	srv := NewServer(Config{Runner: &scriptedRunner{results: scripted}, Logger: slog.New(slog.DiscardHandler)})
	const limit = 1 << 20
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ServeStdio(ctx, srv, inR, outW, 2, limit, slog.New(slog.DiscardHandler)) }()
	replies := bufio.NewReader(outR)
	send := func(s string) {
		go func() { io.WriteString(inW, s+"\n") }()
	}
	read := func() map[string]any {
		t.Helper()
		type res struct {
			line string
			err  error
		}
		ch := make(chan res, 1)
		go func() { l, err := replies.ReadString('\n'); ch <- res{l, err} }()
		select {
		case r := <-ch:
			var m map[string]any
			if err := json.Unmarshal([]byte(r.line), &m); err != nil {
				t.Fatalf("reply %q: %v", r.line, err)
			}
			return m
		case <-time.After(testenv.Patience):
			t.Fatal("no reply")
			return nil
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := read(); m["id"] != float64(1) || m["error"] != nil {
		t.Fatalf("initialize: %v", m)
	}
	huge := []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":"big-7","method":"tools/call","params":{"name":"get_run","arguments":{"id":"%s"}}}`+"\n", strings.Repeat("x", 64*limit)))
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() { inW.Write(huge) }()
	m := read()
	errObj, _ := m["error"].(map[string]any)
	if m["id"] != "big-7" || errObj == nil || !strings.Contains(fmt.Sprint(errObj["message"]), "at most 1048576 bytes") {
		t.Fatalf("oversized message: reply %v, want an error for id big-7 naming the limit", m)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 8*limit {
		t.Errorf("reading a %d-byte message allocated %d bytes: it was read whole", len(huge), grew)
	}
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`)
	if m := read(); m["id"] != float64(8) || m["error"] != nil {
		t.Fatalf("the next message after the refusal: %v", m)
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(testenv.Patience):
		t.Fatal("ServeStdio did not return at EOF")
	}
}

func TestMessageID(t *testing.T) {
	tests := []struct {
		head, want string
	}{
		{`{"jsonrpc":"2.0","id":5,"method":"x","params":{"a":"bbbb`, `5`},
		{`{"id":"s-1","jsonrpc":"2.0"`, `"s-1"`},
		{`{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"bbb`, ``},
		{`{"method":"x","params":{"arguments":{"c":"xxxxxxxx`, ``}, // id after the cut
		{`not json`, ``},
	}
	for _, tt := range tests {
		if got := string(messageID([]byte(tt.head))); got != tt.want {
			t.Errorf("messageID(%.40q) = %q, want %q", tt.head, got, tt.want)
		}
	}
}
