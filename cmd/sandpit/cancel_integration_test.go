package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/store/history"
)

// rawServer is `sandpit serve` spoken to in raw JSON-RPC lines, so a test
// decides the exact order of what the server reads (mcp-go's client sends
// notifications/cancelled from a goroutine of its own).
type rawServer struct {
	stdin io.WriteCloser
	msgs  chan map[string]any
	log   *syncBuffer
}

func startRaw(t *testing.T, args ...string) *rawServer {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"serve"}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{stdin: stdin, msgs: make(chan map[string]any, 256), log: &syncBuffer{}}
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("server stderr:\n%s", s.log.String())
		}
	})
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(s.msgs)
				return
			}
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				s.msgs <- m
			}
		}
	}()
	s.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	s.wait(t, func(m map[string]any) bool { return m["id"] == float64(1) })
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *rawServer) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// wait returns the first message that matches, dropping the others.
func (s *rawServer) wait(t *testing.T, match func(map[string]any) bool) map[string]any {
	t.Helper()
	timeout := time.After(120 * time.Second)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatal("the server closed stdout")
			}
			if match(m) {
				return m
			}
		case <-timeout:
			t.Fatal("no such message in 120 s")
		}
	}
}

// replies returns the structured content of the replies to ids, in
// whatever order they come.
func (s *rawServer) replies(t *testing.T, ids ...int) map[int]map[string]any {
	t.Helper()
	got := map[int]map[string]any{}
	for len(got) < len(ids) {
		m := s.wait(t, func(m map[string]any) bool {
			id, ok := m["id"].(float64)
			return ok && slices.Contains(ids, int(id)) && got[int(id)] == nil
		})
		res, _ := m["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		if sc == nil {
			t.Fatalf("reply: %v", m)
		}
		got[int(m["id"].(float64))] = sc
	}
	return got
}

// A call the client cancels goes on in the server until its sandbox is
// gone and its workspace changes are merged; the client moves on at once.
// The call it sends next sees all of those changes and the cancelled
// run's record (on the code before, the next run found none of the 2,000
// files: they were merged after it had opened its view).
func TestMCPCancelledRunLandsBeforeNextCall(t *testing.T) {
	s := startRaw(t, serverArgs(t)...)
	code := "mkdir d\nfor i in $(seq 2000); do echo x > d/$i; done\necho made\nsleep 60\n"
	call, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{
		"name": "run_code", "arguments": map[string]any{"language": "bash", "code": code, "timeout_seconds": 60},
		"_meta": map[string]any{"progressToken": "p"},
	}})
	s.send(t, string(call))
	if m := s.wait(t, func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		msg, _ := p["message"].(string)
		return m["method"] == "notifications/progress" && strings.Contains(msg, "made") || m["id"] == float64(2)
	}); m["id"] != nil {
		t.Fatalf("the run ended before it was cancelled: %v", m)
	}
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"the user pressed stop"}}`)
	s.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"bash","code":"ls d 2>/dev/null | wc -l"}}}`)
	s.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get_execution_history","arguments":{"status":"cancelled"}}}`)
	got := s.replies(t, 3, 4)
	if got[3]["stdout"] != "2000\n" {
		t.Errorf("the next run saw %v files of the cancelled run's 2000: %v", got[3]["stdout"], got[3])
	}
	runs, _ := got[4]["runs"].([]any)
	if len(runs) != 1 {
		t.Errorf("cancelled runs in the history when the next call was answered: %v", runs)
	}
}

// A background run whose client goes away right after starting it (stdin
// closes: the server cancels its background runs and exits) is recorded
// as cancelled, even when it was cancelled before its program started (on
// the code before, such a run was never recorded).
func TestMCPBackgroundRunOfAVanishedClientIsRecorded(t *testing.T) {
	args := serverArgs(t)
	db := args[slices.Index(args, "--history-db")+1]
	s := startRaw(t, args...)
	s.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"bash","code":"sleep 30","background":true}}}`)
	id, _ := s.replies(t, 2)[2]["id"].(string)
	if id == "" {
		t.Fatal("no run id")
	}
	s.stdin.Close()
	for range s.msgs { // stdout closes when the server exits
	}
	h, err := history.Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, err := h.Get(t.Context(), id)
	if err != nil || r.Status != "cancelled" {
		t.Fatalf("the background run in the history: %+v, %v", r, err)
	}
}
