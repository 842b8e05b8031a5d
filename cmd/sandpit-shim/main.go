// Command sandpit-shim is sandpit's long-lived containerd shim: started by
// sandpit once per instance, it serves the task API for all of the
// instance's sandboxes, creating them in-process with runc's libcontainer
// (see package runtime/shim). containerd reaches it through
// containerd-shim-sandpit-v1, the runtime binary it execs. It is also each
// sandbox's first process before the program: libcontainer re-executes this
// binary as "sandpit-shim init" inside the new namespaces.
//
// Build it with seccomp (cgo and libseccomp-dev), or it refuses to start:
//
//	go build -tags seccomp,runc_nocriu ./cmd/sandpit-shim
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // the C half of "init", run before Go starts

	"github.com/sandpit-dev/sandpit/runtime/shim"
)

func init() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "init":
			// A sandbox's init: libcontainer's nsexec has set up the
			// namespaces; this finishes the container and execs the program.
			libcontainer.Init()
		case shim.CompileMode:
			shim.RunCompileHelper()
		}
	}
}

func main() {
	var cfg shim.Config
	flag.StringVar(&cfg.Namespace, "namespace", "", "containerd namespace")
	flag.StringVar(&cfg.TTRPCAddress, "ttrpc-address", "", "containerd's ttrpc socket (events)")
	flag.StringVar(&cfg.Root, "root", "", "state directory")
	flag.StringVar(&cfg.Loader, "seccomp-loader", "", "containerd-shim-sandpit-v1, which loads seccomp programs compiled once (empty: libcontainer compiles per sandbox)")
	flag.StringVar(&cfg.Init, "init", "", "sandpit-shim-init, each sandbox's init in place of this binary (needs -seccomp-loader; empty: this binary)")
	flag.Parse()
	if cfg.Namespace == "" || cfg.TTRPCAddress == "" || cfg.Root == "" {
		fmt.Fprintln(os.Stderr, "sandpit-shim: -namespace, -ttrpc-address and -root are required; sandpit starts this program itself")
		os.Exit(2)
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
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
