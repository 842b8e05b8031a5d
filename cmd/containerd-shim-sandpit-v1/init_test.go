package main

import (
	"os"
	"slices"
	"syscall"
	"testing"
)

// The program's environment is what bash's job gets: the script's and the
// built-in init's runs must not differ (runtime's TestInitEnvironmentSame
// compares them end to end; this pins the rules).
func TestBashEnv(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"spec env", []string{"PATH=/bin", "HOME=/tmp"}, []string{"PATH=/bin", "HOME=/tmp", "PWD=" + wd, "SHLVL=0", "_=/usr/bin/python3"}},
		{"inherited PWD, OLDPWD and _ replaced or dropped", []string{"PWD=/x", "OLDPWD=/y", "_=/z", "A=1"}, []string{"A=1", "PWD=" + wd, "SHLVL=0", "_=/usr/bin/python3"}},
		{"SHLVL kept", []string{"SHLVL=3"}, []string{"PWD=" + wd, "SHLVL=3", "_=/usr/bin/python3"}},
		{"a value with =", []string{"X=a=b"}, []string{"X=a=b", "PWD=" + wd, "SHLVL=0", "_=/usr/bin/python3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bashEnv(tt.env, "/usr/bin/python3"); !slices.Equal(got, tt.want) {
				t.Errorf("bashEnv = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadLine(t *testing.T) {
	tests := []struct {
		name, in, line, rest string
		ok                   bool
	}{
		{"line then the program's stdin", "2500000\nhello", "2500000", "hello", true},
		{"EOF before a newline", "123", "", "", false},
		{"empty", "", "", "", false},
		{"too long", string(make([]byte, 100)) + "\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p [2]int
			if err := syscall.Pipe(p[:]); err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(p[0])
			syscall.Write(p[1], []byte(tt.in))
			syscall.Close(p[1])
			line, ok := readLine(p[0])
			if line != tt.line || ok != tt.ok {
				t.Fatalf("readLine = %q, %v; want %q, %v", line, ok, tt.line, tt.ok)
			}
			if !ok {
				return
			}
			rest := make([]byte, 64)
			n, _ := syscall.Read(p[0], rest)
			if string(rest[:n]) != tt.rest {
				t.Errorf("left for the program: %q, want %q", rest[:n], tt.rest)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		ws   syscall.WaitStatus
		want int
	}{
		{0, 0},
		{42 << 8, 42},
		{syscall.WaitStatus(syscall.SIGKILL), 137},
		{syscall.WaitStatus(syscall.SIGABRT) | 0x80, 134}, // core dumped
	}
	for _, tt := range tests {
		if got := exitCode(tt.ws); got != tt.want {
			t.Errorf("exitCode(%#x) = %d, want %d", uint32(tt.ws), got, tt.want)
		}
	}
}
