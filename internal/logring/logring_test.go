package logring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func messages(recs []Record) string {
	var s []string
	for _, r := range recs {
		s = append(s, r.Message)
	}
	return strings.Join(s, ",")
}

func TestCapacityAndOrder(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		logged   int
		n        int
		want     string
	}{
		{"under capacity", 4, 2, 0, "m0,m1"},
		{"exactly full", 3, 3, 0, "m0,m1,m2"},
		{"wrapped", 3, 7, 0, "m4,m5,m6"},
		{"wrapped newest two", 3, 7, 2, "m5,m6"},
		{"n above size", 5, 2, 10, "m0,m1"},
		{"capacity one", 1, 3, 0, "m2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(tt.capacity, nil)
			log := slog.New(r.Handler(nil))
			for i := range tt.logged {
				log.Info(fmt.Sprint("m", i))
			}
			if got := messages(r.Records(tt.n)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if r.Total() != uint64(tt.logged) {
				t.Errorf("total = %d, want %d", r.Total(), tt.logged)
			}
		})
	}
}

func TestTeeAndLevels(t *testing.T) {
	var buf bytes.Buffer
	r := New(10, slog.LevelWarn)
	log := slog.New(r.Handler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	log.Debug("d")
	log.Info("i")
	log.Warn("w")
	log.Error("e")
	if got := messages(r.Records(0)); got != "w,e" {
		t.Errorf("ring kept %s, want w,e (its own level)", got)
	}
	out := buf.String()
	for _, m := range []string{"msg=i", "msg=w", "msg=e"} {
		if !strings.Contains(out, m) {
			t.Errorf("wrapped handler missed %s:\n%s", m, out)
		}
	}
	if strings.Contains(out, "msg=d") {
		t.Errorf("wrapped handler got a record below its level:\n%s", out)
	}
	if recs := r.Records(0); recs[0].Level != "WARN" || recs[0].Time.Location() != time.UTC || recs[0].Time.IsZero() {
		t.Errorf("record = %+v", recs[0])
	}
}

type point struct{ X, Y int }

func TestAttrsAndGroups(t *testing.T) {
	var buf bytes.Buffer
	r := New(10, nil)
	base := slog.New(r.Handler(slog.NewJSONHandler(&buf, nil)))
	tests := []struct {
		name string
		log  func()
		want string // JSON of the record's attrs
	}{
		{"plain", func() { base.Info("x", "a", 1, "b", "s", "ok", true) }, `{"a":1,"b":"s","ok":true}`},
		{"with attrs", func() { base.With("run", "r1").Info("x", "n", 2) }, `{"n":2,"run":"r1"}`},
		{"group", func() { base.WithGroup("g").Info("x", "n", 2) }, `{"g":{"n":2}}`},
		{"attrs before group", func() { base.With("a", 1).WithGroup("g").With("b", 2).Info("x", "c", 3) }, `{"a":1,"g":{"b":2,"c":3}}`},
		{"nested groups", func() { base.WithGroup("g").WithGroup("h").Info("x", "n", 1) }, `{"g":{"h":{"n":1}}}`},
		{"empty group dropped", func() { base.WithGroup("g").Info("x") }, `null`},
		{"group attr", func() { base.Info("x", slog.Group("req", "lang", "c", "bytes", 10)) }, `{"req":{"bytes":10,"lang":"c"}}`},
		{"inline group", func() { base.Info("x", slog.Group("", "k", "v")) }, `{"k":"v"}`},
		{"error and duration", func() { base.Info("x", "err", errors.New("boom"), "d", 1500*time.Millisecond) }, `{"d":"1.5s","err":"boom"}`},
		{"struct", func() { base.Info("x", "p", point{1, 2}) }, `{"p":{"X":1,"Y":2}}`},
		{"empty attr ignored", func() { base.Info("x", slog.Attr{}, "k", "v") }, `{"k":"v"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.log()
			recs := r.Records(1)
			got, err := json.Marshal(recs[0].Attrs)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("attrs = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestSnapshotIsACopy(t *testing.T) {
	r := New(2, nil)
	log := slog.New(r.Handler(nil))
	m := map[string]int{"a": 1}
	log.Info("x", "m", m)
	m["a"] = 99
	got, _ := json.Marshal(r.Records(0)[0].Attrs)
	if string(got) != `{"m":{"a":1}}` {
		t.Errorf("attrs = %s, want the value at log time", got)
	}
}

func TestConcurrent(t *testing.T) {
	r := New(64, nil)
	log := slog.New(r.Handler(slog.NewTextHandler(&lockedDiscard{}, nil)))
	var wg sync.WaitGroup
	const writers, each = 8, 200
	for w := range writers {
		wg.Go(func() {
			l := log.With("w", w).WithGroup("g")
			for i := range each {
				l.Info("m", "i", i)
				if i%50 == 0 {
					r.Records(10)
				}
			}
		})
	}
	wg.Wait()
	if r.Total() != writers*each {
		t.Errorf("total = %d, want %d", r.Total(), writers*each)
	}
	if got := len(r.Records(0)); got != 64 {
		t.Errorf("kept %d, want 64", got)
	}
}

type lockedDiscard struct{ mu sync.Mutex }

func (d *lockedDiscard) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(p), nil
}

// TestRecordsAreBounded: the ring kept every attribute whole, so one record
// listing 10,000 dropped paths was 35 MiB, served by sandbox://logs (review
// M6). Every kept record now fits MaxRecordBytes of JSON, with markers where
// something was cut; small records are unchanged.
func TestRecordsAreBounded(t *testing.T) {
	r := New(10, nil)
	log := slog.New(r.Handler(nil))
	long := strings.Repeat("p", 100<<10)
	paths := make([]string, 10000)
	for i := range paths {
		paths[i] = fmt.Sprintf("%05d%s", i, strings.Repeat("l", 240))
	}
	many := make([]any, 0, 2000)
	for i := range 1000 {
		many = append(many, fmt.Sprint("k", i), strings.Repeat("v", 100))
	}
	tests := []struct {
		name   string
		log    func()
		marker string
	}{
		{"long string", func() { log.Info("x", "s", long) }, "bytes cut"},
		{"long message", func() { log.Info(long) }, "bytes cut"},
		{"big slice", func() { log.Info("dropped", "paths", paths) }, "bytes cut"},
		{"long error", func() { log.Info("x", "err", errors.New(long)) }, "bytes cut"},
		{"many attributes", func() { log.Info("x", many...) }, "more attributes"},
		{"many in a group", func() { log.Info("x", slog.Group("g", many...)) }, "more attributes"},
		{"long key", func() { log.Info("x", long, 1) }, "cut"},
		{"escaped characters", func() { log.Info("<&>", "s", strings.Repeat("<\x01\"\xff", 20000)) }, "bytes cut"},
		{"with attrs and groups", func() {
			log.With(many...).WithGroup(long).With("a", long).Info("x", many...)
		}, "more attributes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.log()
			b, err := json.Marshal(r.Records(1)[0])
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 4<<10 {
				t.Errorf("record is %d bytes of JSON, want at most 4 KiB", len(b))
			}
			if !strings.Contains(string(b), tt.marker) {
				t.Errorf("record %.200s... has no %q marker", b, tt.marker)
			}
		})
	}
}
