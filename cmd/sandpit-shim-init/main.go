// Command sandpit-shim-init is the first program of each sandbox that
// sandpit-shim creates: libcontainer's init (nsexec, which enters the new
// namespaces, then the Go half, which builds the container and execs its
// process), in a binary that links libcontainer and nothing else.
//
// libcontainer re-executes the shim's own binary as "init". That binary
// links containerd's shim library, ttrpc, gRPC and protobuf, whose ~170
// package initialisers run in every sandbox before libcontainer's init
// can; this one has 64, and a quarter of the size. sandpit-shim hands each
// sandbox a sealed copy of this binary and re-executes into it before
// nsexec runs (cmd/sandpit-shim/initexec.go), so libcontainer's protocol
// is untouched: the same fds, environment and arguments reach the same
// code, built from the same module version. Measured on the CI host with
// the two interleaved: libcontainer's start of a sandbox (to its init
// parked on the exec FIFO) 13.8 against 15.2 ms median, and the sandbox's
// cgroup CPU for print(1) 34.0-35.1 against 34.8-37.8 ms.
//
// It is never run by hand; build it with cgo (nsexec is C):
//
//	go build -tags runc_nocriu ./cmd/sandpit-shim-init
package main

import (
	"fmt"
	"os"

	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // nsexec, before Go starts
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init() // does not return
	}
}

func main() {
	fmt.Fprintln(os.Stderr, "sandpit-shim-init: sandpit-shim starts this program inside each new sandbox (as \"init\"); it is not run by hand")
	os.Exit(2)
}
