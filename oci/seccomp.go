package oci

import (
	"bufio"
	"context"
	_ "embed"
	goruntime "runtime"
	"strings"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/contrib/seccomp"
	coci "github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

//go:embed seccomp_deny.txt
var denyList string

// DeniedSyscalls lists the syscalls sandpit removes from containerd's default
// seccomp profile, read from seccomp_deny.txt.
func DeniedSyscalls() []string {
	var names []string
	sc := bufio.NewScanner(strings.NewReader(denyList))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			names = append(names, line)
		}
	}
	return names
}

// WithSeccomp applies containerd's default profile, derived from the
// process's capabilities (so it must run after they are set), takes every
// syscall in DeniedSyscalls out of its allow rules, leaving them to the
// profile's default action (EPERM), and admits only the native ABI.
func WithSeccomp() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		p := Stricter(seccomp.DefaultProfile(s), DeniedSyscalls())
		p.Architectures = NativeArchitectures()
		s.Linux.Seccomp = p
		return nil
	}
}

// nativeArch is the seccomp name of each Go architecture's own ABI.
var nativeArch = map[string]specs.Arch{
	"amd64":   specs.ArchX86_64,
	"arm64":   specs.ArchAARCH64,
	"ppc64le": specs.ArchPPC64LE,
	"riscv64": specs.ArchRISCV64,
	"s390x":   specs.ArchS390X,
}

// NativeArchitectures is the profile's architecture list: the native ABI
// only. containerd's default also admits the compat ABIs (x86 and x32 on
// amd64, arm on arm64), each a second syscall table with calls the rules
// were not written for: on x86, socketcall(2) reaches socket(2) without its
// address-family filter. A syscall made through an ABI not listed here gets
// the filter's action for a foreign architecture (libseccomp kills the
// process). An empty list, for an architecture not in the table, means the
// same to runc and crun: the native ABI alone.
func NativeArchitectures() []specs.Arch {
	if a, ok := nativeArch[goruntime.GOARCH]; ok {
		return []specs.Arch{a}
	}
	return nil
}

// Stricter returns p without allow rules for the named syscalls.
func Stricter(p *specs.LinuxSeccomp, deny []string) *specs.LinuxSeccomp {
	denied := make(map[string]bool, len(deny))
	for _, n := range deny {
		denied[n] = true
	}
	out := *p
	out.Syscalls = nil
	for _, rule := range p.Syscalls {
		if rule.Action != specs.ActAllow {
			out.Syscalls = append(out.Syscalls, rule)
			continue
		}
		var keep []string
		for _, n := range rule.Names {
			if !denied[n] {
				keep = append(keep, n)
			}
		}
		if len(keep) == 0 {
			continue
		}
		rule.Names = keep
		out.Syscalls = append(out.Syscalls, rule)
	}
	return &out
}
