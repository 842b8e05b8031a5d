package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandpit-dev/sandpit/mcp"
)

// reviewWebP is the 52-byte WebP of the 2026-12-01 review (H1): a VP8X
// canvas of 2000×1 around a VP8L frame of 16384×16384 whose pixels cost no
// bits. Decoded, it is 1 GiB of pixels.
const reviewWebP = "UklGRiwAAABXRUJQVlA4WAoAAAAAAAAAzwcAAAAAVlA4TA0AAAAv////DyhAkYvc/wIAAA=="

// TestMCPImageBombNotDecoded: a program writes the review's WebP and its
// twin with a 1×1 canvas. Before, the server's peak RSS went from 38 MB to
// 1.9 GB and the call took 51 s (2000×1), or the file went to the client
// undecoded as a 1×1 image/webp (1×1). Now both are linked with the reason,
// no image block carries them, and the server's peak RSS barely moves.
func TestMCPImageBombNotDecoded(t *testing.T) {
	before := serverChildren(t)
	c := startServer(t, nil, append(serverArgs(t), "--pool", "0")...)
	pid := newChild(t, before)
	code := fmt.Sprintf(`import base64
bomb = base64.b64decode(%q)
open('chart.webp', 'wb').write(bomb)
tiny = bytearray(bomb)
tiny[24:27] = b'\0\0\0'
open('tiny.webp', 'wb').write(bytes(tiny))
print('written')
`, reviewWebP)
	// A first run, so that what every run costs the server is in the
	// baseline.
	runResult(t, call(t, c, "run_code", map[string]any{"language": "python", "code": "print(1)"}))
	hwm := vmHWM(t, pid)
	res := call(t, c, "run_code", map[string]any{"language": "python", "code": code})
	out := runResult(t, res)
	grown := vmHWM(t, pid) - hwm
	t.Logf("server %d: VmHWM %d MiB before, +%d MiB after the run; %s", pid, hwm>>20, grown>>20, text(res))
	if out.Status != "success" || !strings.Contains(out.Stdout, "written") {
		t.Fatalf("the run did not write the files: %s", text(res))
	}
	links := map[string]bool{}
	for _, b := range res.Content {
		switch b := b.(type) {
		case mcpgo.ImageContent:
			t.Errorf("an image block (%s, %d bytes of base64): the bomb was shown", b.MIMEType, len(b.Data))
		case mcpgo.ResourceLink:
			links[b.URI] = true
		}
	}
	for _, name := range []string{"chart.webp", "tiny.webp"} {
		if !links["sandbox://workspace/"+name] {
			t.Errorf("%s is not linked: %v", name, links)
		}
		if !strings.Contains(text(res), "image not shown: "+name) {
			t.Errorf("the text does not say why %s is not shown", name)
		}
	}
	// The frame is 1 GiB decoded; a refusal costs the server nothing of
	// that size.
	if grown > 64<<20 {
		t.Errorf("the server's peak RSS grew by %d MiB", grown>>20)
	}
}

// serverChildren lists the pids of this test process's children.
func serverChildren(t *testing.T) map[int]bool {
	t.Helper()
	self := os.Getpid()
	out := map[int]bool{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after it.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			out[pid] = true
		}
	}
	return out
}

// newChild is the one child of this process that was not in before: the
// server startServer started.
func newChild(t *testing.T, before map[int]bool) int {
	t.Helper()
	var found []int
	for pid := range serverChildren(t) {
		if !before[pid] {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one new child process (the server), found %v", found)
	}
	return found[0]
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// TestMCPRunResultWithinBudget: eight 590×590 noise PNGs, each just under
// 1 MiB, made an 11.1 MB run_code result (a TypeScript client dropped the
// connection). The result now stays within mcp.MaxResultBytes and says
// what it left out.
func TestMCPRunResultWithinBudget(t *testing.T) {
	c := startServer(t, nil, append(serverArgs(t), "--pool", "0")...)
	code := `import os, struct, zlib
def png(path, w, h):
    raw = b''.join(b'\0' + os.urandom(3 * w) for _ in range(h))
    def chunk(t, d):
        return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
                + chunk(b'IDAT', zlib.compress(raw, 9)) + chunk(b'IEND', b''))
for i in range(8):
    png('noise%d.png' % i, 590, 590)
print(max(os.path.getsize('noise%d.png' % i) for i in range(8)))
`
	res := call(t, c, "run_code", map[string]any{"language": "python", "code": code})
	out := runResult(t, res)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	images, links := 0, 0
	for _, b := range res.Content {
		switch b.(type) {
		case mcpgo.ImageContent:
			images++
		case mcpgo.ResourceLink:
			links++
		}
	}
	t.Logf("largest file %s bytes; result %d bytes, %d images, %d links", strings.TrimSpace(out.Stdout), len(b), images, links)
	if len(b) > mcp.MaxResultBytes {
		t.Errorf("the result is %d bytes, over %d", len(b), mcp.MaxResultBytes)
	}
	if images == 0 || images+links != 8 || !strings.Contains(text(res), "result budget") {
		t.Errorf("%d images and %d links of 8, text: %s", images, links, text(res))
	}
}
