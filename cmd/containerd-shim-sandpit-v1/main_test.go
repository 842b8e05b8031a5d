package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/protobuf"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/proto"
)

// marshalOptions is what containerd hands the start exec on stdin: the
// runtime options as a protobuf Any.
func marshalOptions(t *testing.T, o *options.Options) []byte {
	t.Helper()
	a, err := typeurl.MarshalAny(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(protobuf.FromAny(a))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStartPrintsTheTaskAPIAddress(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	in := marshalOptions(t, &options.Options{BinaryName: "runc", Root: "/run/x", TaskApiAddress: "unix:///run/sandpit/shim.sock", SystemdCgroup: true, IoUid: 7})
	var out bytes.Buffer
	if err := start(bytes.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "unix:///run/sandpit/shim.sock"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "address"))
	if err != nil || string(b) != "unix:///run/sandpit/shim.sock" {
		t.Errorf("address file = %q, %v", b, err)
	}
}

func TestStartRefusesOptionsWithoutAnAddress(t *testing.T) {
	t.Chdir(t.TempDir())
	for name, in := range map[string][]byte{
		"none":       nil,
		"no address": marshalOptions(t, &options.Options{BinaryName: "runc"}),
		"not unix":   marshalOptions(t, &options.Options{TaskApiAddress: "tcp://1.2.3.4:5"}),
		"garbage":    {0xff, 0xff, 0xff},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := start(bytes.NewReader(in), &out)
			if err == nil || out.Len() != 0 {
				t.Fatalf("start = %q, %v; want an error and no output", out.String(), err)
			}
			if name == "none" && !strings.Contains(err.Error(), "--runtime sandpit") {
				t.Errorf("error %q does not say how this runtime is used", err)
			}
		})
	}
}
