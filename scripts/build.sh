#!/usr/bin/env bash
# Build sandpit's four programs into bin/ (serve.sh and test.sh call this):
#   bin/sandpit                     the server and CLI
#   bin/sandpit-shim                sandpit's containerd shim (libcontainer,
#                                   seccomp through cgo: needs gcc and
#                                   libseccomp-dev)
#   bin/sandpit-shim-init           each sandbox's init (libcontainer's, in a
#                                   binary far smaller than the shim; cgo)
#   bin/containerd-shim-sandpit-v1  the runtime binary containerd execs for
#                                   each task, and the in-sandbox seccomp
#                                   loader; static, standard library only
# sandpit finds the shims beside itself (--shim-dir to look elsewhere).
# --rootless builds bin/sandpit only: a rootless containerd runs sandboxes
# under its runc shim.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
mkdir -p bin
go build -o bin/sandpit ./cmd/sandpit
[ "${1:-}" = --rootless ] && exit 0
go build -tags seccomp,runc_nocriu -o bin/sandpit-shim ./cmd/sandpit-shim
go build -tags runc_nocriu -o bin/sandpit-shim-init ./cmd/sandpit-shim-init
CGO_ENABLED=0 go build -o bin/containerd-shim-sandpit-v1 ./cmd/containerd-shim-sandpit-v1
