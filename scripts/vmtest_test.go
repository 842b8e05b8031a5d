package scripts

// vm-test.sh's guest build, run against an empty cache with stand-ins for
// debootstrap, chroot, unshare, mkfs.ext4 and qemu. Each stand-in prints to
// stdout as the real tool can (mkfs.ext4 -q of e2fsprogs 1.47 prints
// "Creating regular file <image>" when the image file is new): the build's
// stdout is the guest directory the caller hands to qemu, so nothing a tool
// prints may reach it. With a warm cache no tool runs, which is why a machine
// that had built the guest once never saw this.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// vmStubs writes the stand-ins into a new directory and returns it; with
// realMkfs, the host's mkfs.ext4 is used instead of its stand-in.
func vmStubs(t *testing.T, bash string, realMkfs bool) string {
	t.Helper()
	dir := t.TempDir()
	stubs := map[string]string{
		// debootstrap [opts] SUITE TARGET MIRROR: a tree with what
		// guest_configure and the kernel copy touch.
		"debootstrap": `target=${@: -2:1}
echo "I: Retrieving InRelease"
mkdir -p "$target"/boot "$target"/etc/initramfs-tools/conf.d "$target"/etc/systemd/system/multi-user.target.wants "$target"/usr/share/doc/x "$target"/var/cache/apt
: >"$target"/etc/initramfs-tools/modules
echo kernel >"$target"/boot/vmlinuz-6.1.0
echo initrd >"$target"/boot/initrd.img-6.1.0
ln -s boot/vmlinuz-6.1.0 "$target"/vmlinuz
ln -s boot/initrd.img-6.1.0 "$target"/initrd.img
echo "I: Base system installed successfully."
`,
		"chroot":  "echo \"chroot ran: $*\"\n",
		"unshare": "echo \"unshare ran: $*\"\n",
		// mkfs.ext4 ... IMAGE SIZE, as e2fsprogs 1.47 does with -q.
		"mkfs.ext4": `image=${@: -2:1}
[ -e "$image" ] || echo "Creating regular file $image"
[ -z "$STUB_MKFS_FAILS" ] || { echo "mkfs.ext4: No space left on device" >&2; exit 1; }
: >"$image"
`,
		"qemu-system-x86_64": "echo 'QEMU emulator version 7.2.0'\n",
		// Root, as the build requires, whoever runs the test.
		"id": "echo 0\n",
	}
	if realMkfs {
		delete(stubs, "mkfs.ext4")
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!"+bash+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestVMGuestBuildPrintsOnlyItsDirectory(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	for _, mkfs := range []string{"stand-in mkfs.ext4", "real mkfs.ext4"} {
		t.Run(mkfs, func(t *testing.T) {
			real := mkfs == "real mkfs.ext4"
			if real {
				if _, err := exec.LookPath("mkfs.ext4"); err != nil {
					// /sbin is not on every PATH.
					if _, err := os.Stat("/usr/sbin/mkfs.ext4"); err != nil {
						t.Skip("mkfs.ext4 is not installed; the stand-in case covers the script")
					}
				}
			}
			testVMGuestBuild(t, bash, vmStubs(t, bash, real))
		})
	}
}

func testVMGuestBuild(t *testing.T, bash, stubs string) {
	cache := filepath.Join(t.TempDir(), "vm") // empty: not even created
	env := append(os.Environ(),
		"PATH="+stubs+":"+os.Getenv("PATH")+":/usr/sbin:/sbin",
		"SANDPIT_VM_CACHE="+cache,
	)
	var first string
	for _, step := range []struct {
		name       string
		wantStderr []string // proof the step did what it says
	}{
		// The tools' output is logged, not lost.
		{"cold cache builds", []string{"chroot ran: ", "guest image built"}},
		{"warm cache reuses", []string{"guest image cached"}},
	} {
		t.Run(step.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bash, "vm-test.sh", "guest")
			cmd.Env = env
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("vm-test.sh guest: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			out := strings.TrimSuffix(stdout.String(), "\n")
			if strings.Contains(out, "\n") || !strings.HasPrefix(out, cache+"/") {
				t.Fatalf("stdout is not one path under %s:\n%q\nstderr:\n%s", cache, stdout.String(), stderr.String())
			}
			for _, f := range []string{"root.img", "vmlinuz", "initrd.img", "done"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("the printed guest directory lacks %s: %v", f, err)
				}
			}
			for _, want := range step.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			if first == "" {
				first = out
			} else if out != first {
				t.Errorf("warm cache printed %q, the cold build %q", out, first)
			}
		})
	}
}

// A build step that fails fails the build and caches nothing: the guest
// directory is printed from inside $(...), where bash drops set -e unless
// told to keep it.
func TestVMGuestBuildFailureCachesNothing(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	stubs := vmStubs(t, bash, false)
	cache := filepath.Join(t.TempDir(), "vm")
	cmd := exec.Command(bash, "vm-test.sh", "guest")
	cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"), "SANDPIT_VM_CACHE="+cache, "STUB_MKFS_FAILS=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("vm-test.sh guest succeeded though mkfs.ext4 failed:\n%s", out)
	}
	done, _ := filepath.Glob(filepath.Join(cache, "*", "done"))
	if len(done) > 0 {
		t.Errorf("a failed build was cached as done: %v\n%s", done, out)
	}
}
