// Command sandpit-shim is sandpit's long-lived containerd shim: started by
// sandpit once per instance, it serves the task API for all of the
// instance's sandboxes (see package runtime/shim). containerd reaches it
// through containerd-shim-sandpit-v1, the runtime binary it execs.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/sandpit-dev/sandpit/runtime/shim"
)

func main() {
	var cfg shim.Config
	flag.StringVar(&cfg.Namespace, "namespace", "", "containerd namespace")
	flag.StringVar(&cfg.TTRPCAddress, "ttrpc-address", "", "containerd's ttrpc socket (events)")
	flag.StringVar(&cfg.Root, "root", "", "state directory")
	flag.StringVar(&cfg.RuncBinary, "runc", "runc", "runc binary")
	flag.Parse()
	if cfg.Namespace == "" || cfg.TTRPCAddress == "" || cfg.Root == "" {
		fmt.Fprintln(os.Stderr, "sandpit-shim: -namespace, -ttrpc-address and -root are required; sandpit starts this program itself")
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	l, err := net.FileListener(os.NewFile(3, "task-api"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandpit-shim: the task API socket must be fd 3:", err)
		os.Exit(2)
	}
	cfg.Listener, cfg.Owner, cfg.Ready = l, os.Stdin, os.NewFile(4, "ready")
	if err := shim.Serve(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sandpit-shim:", err)
		os.Exit(1)
	}
}
