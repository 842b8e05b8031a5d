package oci

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/namespaces"
	coci "github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandpit-dev/sandpit"
)

var update = flag.Bool("update", false, "rewrite golden files")

func testProfile() Profile {
	return Profile{
		Limits: DefaultLimits(),
		UserNS: &IDMap{HostBase: 1879048192, Size: 65536},
		UID:    sandpit.SandboxUID,
		GID:    sandpit.SandboxGID,
	}
}

func generate(t *testing.T, opts ...coci.SpecOpts) (*specs.Spec, error) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "sandpit")
	return coci.GenerateSpec(ctx, nil, &containers.Container{ID: "run-1"}, opts...)
}

func mustGenerate(t *testing.T, opts ...coci.SpecOpts) *specs.Spec {
	t.Helper()
	s, err := generate(t, opts...)
	if err != nil {
		t.Fatalf("GenerateSpec: %v", err)
	}
	return s
}

// TestGoldenDefaultSpec keeps the whole default isolation surface under
// review: any change to it shows up as a diff of testdata/default-spec.golden.
func TestGoldenDefaultSpec(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithProcess("/workspace", "python3", "/sandpit/src/main.py"))
	got, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "default-spec.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./oci -update to create it)", err)
	}
	if string(want) != string(got)+"\n" {
		t.Errorf("default spec differs from %s; if the change is intended, run go test ./oci -update and review the diff", golden)
	}
}

func TestHardening(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithProcess("/", "true"))
	checks := []struct {
		name string
		ok   bool
	}{
		{"no new privileges", s.Process.NoNewPrivileges},
		{"read-only rootfs", s.Root.Readonly},
		{"no bounding caps", len(s.Process.Capabilities.Bounding) == 0},
		{"no effective caps", len(s.Process.Capabilities.Effective) == 0},
		{"no permitted caps", len(s.Process.Capabilities.Permitted) == 0},
		{"no ambient caps", len(s.Process.Capabilities.Ambient) == 0},
		{"non-root user", s.Process.User.UID == sandpit.SandboxUID && s.Process.User.GID == sandpit.SandboxGID},
		{"seccomp set", s.Linux.Seccomp != nil && s.Linux.Seccomp.DefaultAction == specs.ActErrno},
		{"memory limited", s.Linux.Resources.Memory != nil && *s.Linux.Resources.Memory.Limit == 512<<20},
		{"no swap", *s.Linux.Resources.Memory.Swap == *s.Linux.Resources.Memory.Limit},
		{"pids limited", s.Linux.Resources.Pids != nil && s.Linux.Resources.Pids.Limit == 128},
		{"cpu quota", s.Linux.Resources.CPU != nil && *s.Linux.Resources.CPU.Quota == 100000},
		{"no host env", !slices.ContainsFunc(s.Process.Env, func(e string) bool { return e == "HOME=/root" })},
		{"no cgroup mount", !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Type == "cgroup" || m.Destination == "/sys/fs/cgroup" })},
		{"core dumps off", slices.ContainsFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == "RLIMIT_CORE" && r.Hard == 0 })},
		{"file size bounded", slices.ContainsFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == "RLIMIT_FSIZE" && r.Hard == 64<<20 })},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not set in spec", c.name)
		}
	}
}

func TestNamespaces(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithProcess("/", "true"))
	want := []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.CgroupNamespace, specs.NetworkNamespace, specs.UserNamespace}
	for _, typ := range want {
		i := slices.IndexFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == typ })
		if i < 0 {
			t.Errorf("namespace %s missing", typ)
			continue
		}
		if p := s.Linux.Namespaces[i].Path; p != "" {
			t.Errorf("namespace %s joins %q; it must be new", typ, p)
		}
	}
	if len(s.Linux.UIDMappings) != 1 || s.Linux.UIDMappings[0].HostID != 1879048192 || s.Linux.UIDMappings[0].ContainerID != 0 {
		t.Errorf("uid mappings = %+v", s.Linux.UIDMappings)
	}

	noUserNS := testProfile()
	noUserNS.UserNS = nil
	s = mustGenerate(t, WithHardening(noUserNS), WithProcess("/", "true"))
	if slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace }) {
		t.Error("user namespace present without an ID map")
	}
}

func TestTmpfsMountsAreBoundedAndNoexec(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithProcess("/", "true"))
	for _, m := range s.Mounts {
		if m.Type != "tmpfs" {
			continue
		}
		if !slices.ContainsFunc(m.Options, func(o string) bool { return len(o) > 5 && o[:5] == "size=" }) {
			t.Errorf("tmpfs %s has no size limit: %v", m.Destination, m.Options)
		}
		if !slices.Contains(m.Options, "noexec") {
			t.Errorf("tmpfs %s is executable: %v", m.Destination, m.Options)
		}
		if m.Destination != "/dev" && !slices.ContainsFunc(m.Options, func(o string) bool { return strings.HasPrefix(o, "nr_inodes=") }) {
			t.Errorf("tmpfs %s has no inode limit: %v", m.Destination, m.Options)
		}
	}
	for _, m := range s.Mounts {
		if m.Type == "devpts" && slices.Contains(m.Options, "gid=5") {
			t.Errorf("devpts has gid=5, which breaks under a user namespace")
		}
	}
}

func TestSeccompDeniesExtraSyscalls(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithProcess("/", "true"))
	allowed := map[string]bool{}
	for _, r := range s.Linux.Seccomp.Syscalls {
		if r.Action == specs.ActAllow {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	deny := DeniedSyscalls()
	if len(deny) < 30 {
		t.Fatalf("deny list has %d entries; seccomp_deny.txt failed to parse?", len(deny))
	}
	for _, n := range deny {
		if allowed[n] {
			t.Errorf("syscall %s is still allowed", n)
		}
	}
	for _, n := range []string{"read", "write", "execve", "clone", "openat", "mmap", "exit_group"} {
		if !allowed[n] {
			t.Errorf("ordinary syscall %s is no longer allowed", n)
		}
	}
}

func TestRejectsUnsafeInput(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Profile)
	}{
		{"root user", func(p *Profile) { p.UID = 0 }},
		{"root group", func(p *Profile) { p.GID = 0 }},
		{"tiny memory", func(p *Profile) { p.Limits.MemoryBytes = 1 << 20 }},
		{"tmpfs not below memory", func(p *Profile) { p.Limits.TmpfsBytes = p.Limits.MemoryBytes }},
		{"too few pids", func(p *Profile) { p.Limits.PidsMax = 2 }},
		{"nofile above host hard limit", func(p *Profile) { p.Limits.OpenFiles = 1 << 20 }},
		{"id map at host root", func(p *Profile) { p.UserNS = &IDMap{HostBase: 0, Size: 65536} }},
		{"id map too small", func(p *Profile) { p.UserNS = &IDMap{HostBase: 1 << 30, Size: 1000} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testProfile()
			tt.mod(&p)
			if _, err := generate(t, WithHardening(p), WithProcess("/", "true")); err == nil {
				t.Error("unsafe profile accepted")
			}
		})
	}
}

func TestBind(t *testing.T) {
	s := mustGenerate(t, WithHardening(testProfile()), WithBind("/host/src", sandpit.SourceDir, false, false), WithBind("/host/ws", sandpit.WorkspaceDir, true, true))
	src := s.Mounts[len(s.Mounts)-2]
	ws := s.Mounts[len(s.Mounts)-1]
	if !slices.Contains(src.Options, "ro") || !slices.Contains(src.Options, "noexec") {
		t.Errorf("read-only bind options = %v", src.Options)
	}
	if !slices.Contains(ws.Options, "rw") || slices.Contains(ws.Options, "noexec") || !slices.Contains(ws.Options, "nosuid") {
		t.Errorf("writable exec bind options = %v", ws.Options)
	}
}

// allows reports whether an allow rule of p admits syscall name with arg0
// set to a, evaluating the rules' argument conditions as libseccomp does
// (all of a rule's conditions must hold; conditions on other arguments are
// taken to hold, the permissive reading).
func allows(p *specs.LinuxSeccomp, name string, a uint64) bool {
	for _, r := range p.Syscalls {
		if r.Action != specs.ActAllow || !slices.Contains(r.Names, name) {
			continue
		}
		ok := true
		for _, c := range r.Args {
			if c.Index != 0 {
				continue
			}
			switch c.Op {
			case specs.OpNotEqual:
				ok = ok && a != c.Value
			case specs.OpLessThan:
				ok = ok && a < c.Value
			case specs.OpLessEqual:
				ok = ok && a <= c.Value
			case specs.OpEqualTo:
				ok = ok && a == c.Value
			case specs.OpGreaterEqual:
				ok = ok && a >= c.Value
			case specs.OpGreaterThan:
				ok = ok && a > c.Value
			case specs.OpMaskedEqual:
				ok = ok && a&c.Value == c.ValueTwo
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestSeccompSocketFamilies: no route in the filter creates an AF_ALG or
// AF_VSOCK socket. socket(2) is filtered on its family, socketcall(2) (the
// 32-bit ABI's multiplexer, which carries the family in memory a filter
// cannot read) is not allowed at all, and no compat ABI is admitted
// (review 2026-11-30, M1).
func TestSeccompSocketFamilies(t *testing.T) {
	p := mustGenerate(t, WithHardening(testProfile()), WithProcess("/", "true")).Linux.Seccomp
	const afALG, afVSOCK, afUNIX, afINET = 38, 40, 1, 2
	for _, fam := range []uint64{afALG, afVSOCK} {
		if allows(p, "socket", fam) {
			t.Errorf("socket(%d, ...) is allowed", fam)
		}
	}
	for _, fam := range []uint64{afUNIX, afINET} {
		if !allows(p, "socket", fam) {
			t.Errorf("socket(%d, ...) is refused; ordinary sockets must work", fam)
		}
	}
	if allows(p, "socketcall", 1) {
		t.Error("socketcall is allowed: socketcall(SYS_SOCKET, {AF_VSOCK, ...}) bypasses socket's family filter")
	}
}

// TestSeccompNativeABIOnly: the profile lists the native architecture and
// nothing else, so int 0x80 (x86) and x32 syscalls meet the filter's
// foreign-architecture action instead of a second, looser rule set
// (review 2026-11-30, M1).
func TestSeccompNativeABIOnly(t *testing.T) {
	p := mustGenerate(t, WithHardening(testProfile()), WithProcess("/", "true")).Linux.Seccomp
	want := map[string][]specs.Arch{"amd64": {specs.ArchX86_64}, "arm64": {specs.ArchAARCH64}}[goruntime.GOARCH]
	if want == nil {
		t.Skipf("no expectation for %s", goruntime.GOARCH)
	}
	if got := p.Architectures; !slices.Equal(got, want) {
		t.Errorf("architectures = %v, want %v", got, want)
	}
}

// TestSeccompNoInotify: inotify instances are charged to the user
// namespace owner's (host root's) budget, so a sandbox may not create any
// (review 2026-11-30, M2).
func TestSeccompNoInotify(t *testing.T) {
	p := mustGenerate(t, WithHardening(testProfile()), WithProcess("/", "true")).Linux.Seccomp
	for _, n := range []string{"inotify_init", "inotify_init1"} {
		if allows(p, n, 0) {
			t.Errorf("%s is allowed", n)
		}
	}
}

func TestOwnerMapping(t *testing.T) {
	zero := uint32(0)
	s := mustGenerate(t, WithHardening(Profile{Limits: DefaultLimits(), UserNS: &IDMap{HostBase: 0, Size: 65536, Owner: &zero}, UID: sandpit.SandboxUID, GID: sandpit.SandboxGID}))
	want := []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: 1, Size: 1000},
		{ContainerID: 1000, HostID: 0, Size: 1},
		{ContainerID: 1001, HostID: 1001, Size: 64535},
	}
	if !reflect.DeepEqual(s.Linux.UIDMappings, want) || !reflect.DeepEqual(s.Linux.GIDMappings, want) {
		t.Errorf("mappings %+v / %+v, want %+v", s.Linux.UIDMappings, s.Linux.GIDMappings, want)
	}
	// Every host id is used once: 0..65535.
	seen := map[uint32]bool{}
	for _, m := range s.Linux.UIDMappings {
		for i := uint32(0); i < m.Size; i++ {
			if seen[m.HostID+i] {
				t.Fatalf("host id %d mapped twice", m.HostID+i)
			}
			seen[m.HostID+i] = true
		}
	}
	if len(seen) != 65536 {
		t.Errorf("%d host ids mapped, want 65536", len(seen))
	}
	bad := uint32(500)
	if _, err := generate(t, WithHardening(Profile{Limits: DefaultLimits(), UserNS: &IDMap{HostBase: 0, Size: 65536, Owner: &bad}})); err == nil {
		t.Error("an owner inside the mapped range was accepted")
	}
}
