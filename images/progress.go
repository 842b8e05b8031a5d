package images

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// defaultProgressEvery is how often a build logs how far it is: a cold
// build takes minutes (measured on shared 2-core machines: toolchain 3-5,
// datascience 8-10, plus a minute of import), which one line at its start
// and one at its end left silent.
const defaultProgressEvery = 15 * time.Second

// progress follows one rootfs build: what debootstrap reports on its output
// (packages retrieved, unpacked, configured), the bytes of packages it has
// downloaded, the step after it, and the layer's bytes written.
type progress struct {
	archives string // <rootfs>/var/cache/apt/archives: the downloaded .debs
	layer    string // the layer file being written

	mu                              sync.Mutex
	phase                           string
	retrieved, unpacked, configured int
	downloaded                      int64 // the most seen: the .debs go once installed
	part                            []byte
}

func newProgress(rootfs, layer string) *progress {
	return &progress{archives: filepath.Join(rootfs, "var", "cache", "apt", "archives"), layer: layer, phase: "debootstrap"}
}

// Write takes debootstrap's output. Lines of one package name it alone
// ("I: Unpacking apt...") or with its version ("I: Retrieving apt 2.6.1");
// others say what debootstrap does ("I: Unpacking required packages...").
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.part = append(p.part, b...)
	for {
		i := bytes.IndexByte(p.part, '\n')
		if i < 0 {
			break
		}
		p.line(string(p.part[:i]))
		p.part = p.part[i+1:]
	}
	if len(p.part) > 4<<10 { // no newline for 4 KiB: not a line of debootstrap's
		p.part = p.part[:0]
	}
	return len(b), nil
}

func (p *progress) line(l string) {
	f := strings.Fields(l)
	if len(f) < 3 || f[0] != "I:" {
		return
	}
	switch {
	case f[1] == "Retrieving" && len(f) == 4:
		p.retrieved++
	case f[1] == "Unpacking" && len(f) == 3 && strings.HasSuffix(f[2], "..."):
		p.unpacked++
	case f[1] == "Configuring" && len(f) == 3 && strings.HasSuffix(f[2], "..."):
		p.configured++
	}
}

// step says what the build does after debootstrap.
func (p *progress) step(phase string) {
	p.mu.Lock()
	p.phase = phase
	p.mu.Unlock()
}

// attrs is how far the build is, for the log.
func (p *progress) attrs(start time.Time) []any {
	var size int64
	filepath.WalkDir(p.archives, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.downloaded = max(p.downloaded, size)
	a := []any{"phase", p.phase, "elapsed", time.Since(start).Round(time.Second),
		"packages_retrieved", p.retrieved, "packages_unpacked", p.unpacked, "packages_configured", p.configured,
		"downloaded_kb", p.downloaded >> 10}
	if fi, err := os.Stat(p.layer); err == nil {
		a = append(a, "layer_written_mb", fi.Size()>>20)
	}
	return a
}

// report logs p every interval until ctx ends or stop is called.
func (p *progress) report(ctx context.Context, log *slog.Logger, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				log.Info("building image rootfs: progress", p.attrs(start)...)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
