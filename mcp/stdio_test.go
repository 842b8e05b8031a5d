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
	pad := strings.Repeat("x", 64*limit)
	for _, tt := range []struct {
		name, msg string
		want      any
	}{
		{"id first", `{"jsonrpc":"2.0","id":"big-7","method":"tools/call","params":{"name":"get_run","arguments":{"id":"` + pad + `"}}}`, "big-7"},
		// The TypeScript SDK's field order: the id comes after the params,
		// which hold "id" keys of their own (a write_file of a file named
		// by an id, a nested object) that are not the message's.
		{"id after params (TypeScript SDK)", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"write_file","arguments":{"id":99,"path":"a","content":"` + pad + `\"},\"id\":5","meta":{"id":{"id":3}},"list":[{"id":4}]}},"id":7}`, float64(7)},
	} {
		huge := []byte(tt.msg + "\n")
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		go func() { inW.Write(huge) }()
		m := read()
		errObj, _ := m["error"].(map[string]any)
		if m["id"] != tt.want || errObj == nil || !strings.Contains(fmt.Sprint(errObj["message"]), "at most 1048576 bytes") {
			t.Fatalf("%s: oversized message: reply %v, want an error for id %v naming the limit", tt.name, m, tt.want)
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 8*limit {
			t.Errorf("%s: reading a %d-byte message allocated %d bytes: it was read whole", tt.name, len(huge), grew)
		}
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

// The scanner takes the message's own id wherever it stands, never an "id"
// nested in its params or written inside a string, whatever pieces the
// message arrives in.
func TestIDScanner(t *testing.T) {
	long := strings.Repeat("9", maxIDBytes+1)
	tests := []struct {
		name, msg, want string
	}{
		{"id first", `{"jsonrpc":"2.0","id":5,"method":"x","params":{"a":"bbbb"}}`, `5`},
		{"string id", `{"id":"s-1","jsonrpc":"2.0"}`, `"s-1"`},
		{"id last (TypeScript SDK)", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x","arguments":{"id":1}},"id":7}`, `7`},
		{"nested ids are not the message's", `{"method":"x","params":{"id":1,"a":{"id":2},"b":[{"id":3},["id"]]},"id":"top"}`, `"top"`},
		{"id text inside strings", `{"method":"x","params":{"s":"\",\"id\":6,\"","t":"\\"},"id" : 8 }`, `8`},
		{"escaped member name", `{"method":"x","\u0069d":9}`, `9`},
		{"key that only starts like id", `{"idx":1,"id2":2,"method":"x"}`, ``},
		{"whitespace around", " \t{ \"id\" :\n 10 , \"method\":\"x\"}", `10`},
		{"null id", `{"id":null,"method":"x"}`, `null`},
		{"last of two", `{"id":1,"method":"x","id":2}`, `2`},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/x","params":{"id":3}}`, ``},
		{"id too long", `{"method":"x","id":` + long + `}`, `null`},
		{"batch", `[{"id":1,"method":"x"}]`, ``},
		{"not json", `not json`, ``},
		{"cut before the id ends", `{"method":"x","id":12`, ``},
	}
	for _, tt := range tests {
		for _, piece := range []int{1, 2, 3, 7, 1 << 20} {
			var sc idScanner
			for b := []byte(tt.msg); len(b) > 0; {
				n := min(piece, len(b))
				sc.scan(b[:n])
				b = b[n:]
			}
			if got := string(sc.result()); got != tt.want {
				t.Errorf("%s, in pieces of %d: id %q, want %q", tt.name, piece, got, tt.want)
			}
		}
	}
}
