package oci

import (
	"bufio"
	"context"
	_ "embed"
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
// process's capabilities (so it must run after they are set), and then takes
// every syscall in DeniedSyscalls out of its allow rules, leaving them to the
// profile's default action (EPERM).
func WithSeccomp() coci.SpecOpts {
	return func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
		s.Linux.Seccomp = Stricter(seccomp.DefaultProfile(s), DeniedSyscalls())
		return nil
	}
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
