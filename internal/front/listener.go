package front

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener holds at most max connections open. One more is accepted
// and dropped at once — with a 503 when the connection speaks plain HTTP —
// rather than left in the kernel's backlog (as x/net/netutil's
// LimitListener does), where a client waits without knowing why and a
// flood of them holds the accept queue.
type limitListener struct {
	net.Listener
	max   int64
	open  atomic.Int64
	plain bool
	// refusing counts refusals in progress; past maxRefusing a refused
	// connection is just closed, so a flood costs no goroutines.
	refusing atomic.Int64
}

const maxRefusing = 64

func newLimitListener(l net.Listener, max int, plain bool) net.Listener {
	return &limitListener{Listener: l, max: int64(max), plain: plain}
}

const busyResponse = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 38\r\n\r\ntoo many connections: try again later\n"

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			if l.refusing.Add(1) > maxRefusing {
				l.refusing.Add(-1)
				c.Close()
				continue
			}
			go l.refuse(c)
			continue
		}
		return &limitConn{Conn: c, release: l.release}, nil
	}
}

func (l *limitListener) release() { l.open.Add(-1) }

// refuse answers and closes c without reading it (a request it may have
// sent is not parsed: nothing it says is trusted or kept).
func (l *limitListener) refuse(c net.Conn) {
	defer l.refusing.Add(-1)
	if l.plain {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write([]byte(busyResponse))
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// Unread request bytes would turn Close into a reset that can
		// destroy the 503 before the client reads it.
		tc.CloseWrite()
		tc.SetReadDeadline(time.Now().Add(time.Second))
		var buf [512]byte
		for i := 0; i < 16; i++ {
			if _, err := tc.Read(buf[:]); err != nil {
				break
			}
		}
	}
	c.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
