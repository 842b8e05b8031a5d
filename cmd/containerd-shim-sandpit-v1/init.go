package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// initFlag, after seccompExecMode, makes the loader itself the sandbox's
// PID 1 for a cold run instead of exec'ing runtime/init.go's bash script:
// "/proc/self/fd/3 seccomp-exec --init PROGRAM ARGS...". The shim rewrites
// a sandbox's args to this (runtime/shim.goInit) only when the runtime asked
// for it and the script is in its "stdin" mode; the semantics are the
// script's, which stays the init wherever this one is not used (containerd's
// runc shim, pooled sandboxes). It saves a bash start-up (a dynamic
// binary's exec, a script to parse) and the timer subshell's fork on every
// cold run: the Go runtime has already started for the loader.
const initFlag = "--init"

// initAlive is the liveness FIFO (runtime/init.go's aliveFile, in the
// read-only source dir).
const initAlive = "/sandpit/src/alive"

// sandpitInit runs argv as PID 1's child and returns PID 1's exit status:
//
//   - the first line of stdin is the microseconds the run may take; it is
//     read a byte at a time, so nothing of the program's stdin is consumed
//     (EOF before it: exit 0, as the script's `read` does);
//   - the liveness FIFO (the server holds its only writer) is opened
//     first; EOF or anything else readable on it, or the deadline, kills
//     every other process of the sandbox (kill -KILL -1), and PID 1 then
//     reports the program's status as usual;
//   - the program gets stdin, stdout and stderr, its own process group
//     (job control: SIGINT and SIGQUIT at their defaults), and the
//     environment bash would give it (PWD set, OLDPWD removed, SHLVL 0 when
//     unset, _ the program's path);
//   - PID 1 reaps every orphan, ignores every signal it can be sent from
//     inside (it installs handlers: signals with a handler reach a pid
//     namespace's init, and nothing is done with them), and exits with the
//     program's status, 128+N for a signal N.
func sandpitInit(argv []string) int {
	fail := func(code int, err error) int {
		fmt.Fprintf(os.Stderr, "sandpit: init: %v\n", err)
		return code
	}
	if len(argv) == 0 {
		return fail(125, errors.New("no program"))
	}
	goruntime.GOMAXPROCS(1)
	debug.SetGCPercent(-1) // a few kilobytes are allocated in all

	// Everything that blocks before the program starts runs before any
	// other goroutine exists, so no thread is added for it: each thread
	// of PID 1 counts against the sandbox's pids limit (7 measured; the
	// script and its timer are 2).
	alive, err := os.Open(initAlive)
	if err != nil {
		return fail(125, err)
	}
	line, ok := readLine(0)
	if !ok {
		return 0
	}
	us, err := strconv.ParseInt(line, 10, 64)
	if err != nil || us < 0 {
		return fail(125, fmt.Errorf("deadline line %q", line))
	}
	end := time.Now().Add(time.Duration(us) * time.Microsecond)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fail(127, err)
	}
	// Handlers for every signal, whose deliveries are dropped once the
	// channel is full: a handler is what lets a signal reach a pid
	// namespace's init, and the Go runtime's own would end PID 1 on
	// SIGTERM and the like. Handled (not ignored) signals are reset to
	// their defaults in the program by exec.
	signal.Notify(make(chan os.Signal, 1))
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   bashEnv(os.Environ(), path),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return fail(126, fmt.Errorf("start %s: %w", argv[0], err))
	}
	go reapAll(pid) // exits with the program's status
	watch(int(alive.Fd()), end)
	select {} // the sandbox is being killed; reapAll exits
}

// readLine reads fd up to a newline, one byte at a time; ok is false at
// EOF or an error before the newline.
func readLine(fd int) (string, bool) {
	var b strings.Builder
	buf := make([]byte, 1)
	for b.Len() < 64 {
		n, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if n != 1 || err != nil {
			return "", false
		}
		if buf[0] == '\n' {
			return b.String(), true
		}
		b.WriteByte(buf[0])
	}
	return "", false
}

// reapAll reaps every child (orphans are re-parented to PID 1) and exits
// with the program's status once it is reaped: its other processes die
// with PID 1, as they do when the script exits.
func reapAll(pid int) {
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD cannot happen before the program is reaped.
			os.Exit(fail125(err))
		}
		if p == pid && (ws.Exited() || ws.Signaled()) {
			os.Exit(exitCode(ws))
		}
	}
}

func fail125(err error) int {
	fmt.Fprintf(os.Stderr, "sandpit: init: wait: %v\n", err)
	return 125
}

// watch ends the sandbox at the deadline, or when the liveness FIFO is
// readable (EOF: the server is gone), polling it at most a second at a
// time as the script's timer does.
func watch(fd int, end time.Time) {
	for {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		ms := int(min(left, time.Second) / time.Millisecond)
		fds := []pollFd{{fd: int32(fd), events: pollIn}}
		n, err := poll(fds, max(ms, 1))
		if errors.Is(err, syscall.EINTR) || err == nil && n == 0 {
			continue
		}
		break
	}
	syscall.Kill(-1, syscall.SIGKILL)
}

// bashEnv is env as bash's job gives it to a program it starts.
func bashEnv(env []string, path string) []string {
	out := make([]string, 0, len(env)+3)
	shlvl := "0"
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PWD", "OLDPWD", "_":
			continue
		case "SHLVL":
			shlvl = v
			continue
		}
		out = append(out, kv)
	}
	if wd, err := os.Getwd(); err == nil {
		out = append(out, "PWD="+filepath.Clean(wd))
	}
	return append(out, "SHLVL="+shlvl, "_="+path)
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const pollIn = 0x1

func poll(fds []pollFd, timeoutMS int) (int, error) {
	n, _, e := syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(timeoutMS))
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}
