package mcp

import (
	"context"
	"fmt"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Live output through MCP progress: a tools/call that carries a
// progressToken gets notifications/progress while its program runs, at
// most every progressInterval and only when it wrote something since the
// last one (or, when it writes nothing, every progressHeartbeat, so that a
// client that resets its timeout on progress keeps waiting). Each says the
// elapsed time (progress, in seconds) and the newest output lines
// (message). The final result is the same as without them.
const (
	progressInterval  = 250 * time.Millisecond
	progressHeartbeat = 5 * time.Second
)

type progressTokenKey struct{}

// withProgressToken keeps the call's progress token, if any, in ctx.
func withProgressToken(ctx context.Context, req mcpgo.CallToolRequest) context.Context {
	if m := req.Params.Meta; m != nil && m.ProgressToken != nil {
		return context.WithValue(ctx, progressTokenKey{}, m.ProgressToken)
	}
	return ctx
}

// startProgress reports l's progress to the client of ctx's call until the
// returned stop is called; stop returns once no more notifications can be
// sent, so none follows the result.
func startProgress(ctx context.Context, l *liveRun) (stop func()) {
	token := ctx.Value(progressTokenKey{})
	srv := server.ServerFromContext(ctx)
	if token == nil || srv == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(progressInterval)
		defer tick.Stop()
		var sent int64
		last, lastSent := l.started, time.Time{}
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l.mu.Lock()
			seq, lines := l.seq, l.tail.lines()
			l.mu.Unlock()
			now := time.Now()
			if seq == sent && now.Sub(last) < progressHeartbeat || now.Sub(lastSent) < progressInterval {
				continue // nothing new, or a late tick right after a send
			}
			elapsed := now.Sub(l.started)
			msg := fmt.Sprintf("running for %.1f s", elapsed.Seconds())
			if lines != "" {
				msg += "; newest output:\n" + textLines(lines) // a client may show it on a terminal
			}
			err := srv.SendNotificationToClient(ctx, string(mcpgo.MethodNotificationProgress), map[string]any{
				"progressToken": token,
				"progress":      float64(elapsed.Milliseconds()) / 1000,
				"message":       msg,
			})
			if err == nil {
				sent, last, lastSent = seq, now, now
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
