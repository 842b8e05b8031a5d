package scripts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's commands start with sudo, and a root shell without sudo
// (containers, CI images) is a common place to run them. They must work
// there as well: no script runs sudo itself (each checks id -u), and the
// README says to drop sudo in a root shell.
func TestReadmeSudoCommandsWorkAsRootWithoutSudo(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// Every script a README command runs under sudo.
	run := regexp.MustCompile(`(?m)^sudo (?:env \S+ )*(scripts/[\w.-]+\.sh)`)
	scripts := map[string]bool{}
	for _, m := range run.FindAllSubmatch(readme, -1) {
		scripts[string(m[1])] = true
	}
	if len(scripts) == 0 {
		t.Fatal("found no `sudo scripts/...` command in the README")
	}
	quoted := regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'[^']*'`)
	sudoCmd := regexp.MustCompile(`(^|[;&|(]\s*|\bexec\s+)sudo\b`)
	for s := range scripts {
		b, err := os.ReadFile(filepath.Join("..", s))
		if err != nil {
			t.Errorf("the README runs %s: %v", s, err)
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			code := strings.TrimSpace(quoted.ReplaceAllString(line, `""`))
			if strings.HasPrefix(code, "#") {
				continue
			}
			if sudoCmd.MatchString(code) {
				t.Errorf("%s:%d runs sudo, which a root shell may not have: %s", s, i+1, strings.TrimSpace(line))
			}
		}
	}
	// What to run where sudo is not installed, said once in "Run it".
	_, section, _ := strings.Cut(string(readme), "\n## Run it\n")
	section, _, _ = strings.Cut(section, "\n## ")
	if !regexp.MustCompile("(?s)root shell.{0,200}without `sudo`").MatchString(section) {
		t.Errorf("the README's \"Run it\" section does not say that in a root shell the commands run without `sudo`")
	}
}
