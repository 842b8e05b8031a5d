package runtime

import (
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// The init protocol: how a sandbox of an image built by sandpit starts its
// program, pooled or cold. Its first process (PID 1) is a bash script,
// initScript, which reads the run's wall-clock limit from the first line of
// stdin and then starts the command it was given: waiter.py (which reads a
// header line and becomes the program) or, for a cold run that needs no
// waiter, the program itself.

//go:embed waiter.py
var waiterPy string

// initScript is PID 1. A program must not be PID 1 of its pid namespace:
// the kernel drops the signals PID 1 has no handler for, so a failed C
// assert() (abort) would end as SIGSEGV instead of SIGABRT and kill -TERM $$
// would do nothing. PID 1 reaps orphans while it waits and exits with the
// program's status (128 + the signal that killed it).
//
// It also ends the run by itself when the server cannot: at the deadline,
// and at once when the server goes away. The run's limit, in microseconds
// (the server's timeout plus initGrace), is the first line of the
// sandbox's stdin. A cold sandbox (mode "stdin") starts with its request:
// PID 1 reads that line itself (bash reads one byte at a time, so nothing of
// the program's stdin is consumed) and then starts the command. A pooled
// sandbox (mode "pool") must start its waiter ahead of the request, so the
// waiter reads the line and hands it to PID 1 through a FIFO made at
// start-up (mkfifo and rm run then, off the request's path).
//
// The server's presence is the liveness FIFO (aliveFile, see makeAlive),
// which the server alone holds open for writing: stdin cannot tell, as
// containerd's runc shim keeps its own writer on every task's stdin. While
// a pooled sandbox waits for its request, a watcher reads that FIFO and
// ends the sandbox on EOF (no untrusted code runs yet). During a run, the
// timer is a child reading the FIFO with a timeout of at most a second:
// a timeout is a tick; EOF (the server is gone), a timer killed, or a timer
// stopped by the program (wait returns when a job stops) ends the sandbox:
// PID 1 kills every other process of it, and nothing inside can stop PID 1,
// since signals from inside a pid namespace cannot kill its init.
//
// PID 1 waits for the program with wait -n beside that timer, and checks
// the program is still there before each wait: bash may reap a program that
// ends between its start and the first wait (a job it has already reported
// is not waited for again), and the tick bounds how long such an end goes
// unnoticed. Job control (set -m) keeps SIGINT and SIGQUIT at their
// defaults for the program, which a plain background job would ignore; the
// program gets this stdin explicitly and the original stderr, while PID 1's
// own (its job reports) goes to /dev/null; it never gets the liveness FIFO.
const initScript = `set -m
exec 3>&2 2>/dev/null
mode=$1
shift
exec 6<` + sandpit.SourceDir + "/" + aliveFile + ` || exit 125
if [ "$mode" = pool ]; then
	( IFS= read -r -u 6 _; kill -KILL -1 ) </dev/null >/dev/null &
	iw=$!
	f=/tmp/.sandpit-init
	mkfifo -m 600 "$f" || exit 125
	"$@" <&0 2>&3 3>&- 6<&- 4>"$f" &
	p=$!
	exec 5<"$f"
	rm -f "$f"
	IFS= read -r t <&5 || { wait "$p"; exit $?; }
	exec 5<&-
	kill -KILL "$iw"
else
	IFS= read -r t || exit 0
	"$@" <&0 2>&3 3>&- 6<&- &
	p=$!
fi
end=$(( ${EPOCHREALTIME/./} + t ))
exec 3>&-
w=
while kill -0 "$p"; do
	if [ -z "$w" ]; then
		left=$(( end - ${EPOCHREALTIME/./} ))
		if (( left <= 0 )); then kill -KILL -1; break; fi
		(( left > 1000000 )) && left=1000000
		printf -v d '%d.%06d' $(( left / 1000000 )) $(( left % 1000000 ))
		( IFS= read -r -t "$d" -u 6 _ ) </dev/null >/dev/null &
		w=$!
	fi
	done=
	wait -n -p done "$p" "$w"
	st=$?
	if [ "$done" = "$p" ]; then kill -KILL "$w"; exit "$st"; fi
	if [ "$done" = "$w" ]; then
		(( st == 142 )) || { kill -KILL -1; break; }
		w=
	elif [ -r /proc/$w/stat ]; then
		read -r _ _ s _ </proc/$w/stat
		[ "$s" = T ] && { kill -KILL -1; break; }
	fi
done
wait "$p"
exit $?`

// initGrace is how long after the server's own deadline PID 1 kills the
// run: the server normally does it first, and tells a timeout from a kill.
const initGrace = 2 * time.Second

// initProcess is PID 1 running argv under initScript, in mode "stdin" (a
// cold sandbox: PID 1 reads the deadline line) or "pool".
func initProcess(cwd, mode string, argv ...string) engine.Spec {
	return engine.Spec{
		Args:        append([]string{"/bin/bash", "-c", initScript, "sandpit-init", mode}, argv...),
		Cwd:         cwd,
		Annotations: map[string]string{sandpit.InitAnnotation: mode},
	}
}

// waiterProcess is the first process of a pooled sandbox: waiter.py,
// started ahead of its request, forwards the deadline line to PID 1.
var waiterProcess = initProcess("/tmp", "pool", "python3", "-c", waiterPy, "pool")

// buildScript is a cold sandbox's build step (C and C++: compile, then
// run), PID 1's child: waiter.py's "build" mode, same lines on stdout and
// same verdicts, without a Python interpreter's start-up (15-20 ms of a
// cold compile's ~100) for a request that is known when the sandbox is
// made. Its arguments: the compiler's argv, "--", the program's argv. The
// compiler's messages are kept only when it fails, as the waiter keeps
// them. (exec gives back the level this shell added to SHLVL, so the
// program's SHLVL is a pooled one's; only "_", which bash sets to the
// command it runs, differs.)
const buildScript = `printf '\0sandpit:started\n'
n=1
for a; do [ "$a" = -- ] && break; n=$((n + 1)); done
msgs=$("${@:1:n-1}" 2>&1 </dev/null)
st=$?
if (( st != 0 )); then
	printf '\0sandpit:compile-failed\n'
	[ -n "$msgs" ] && printf '%s\n' "$msgs" >&2
	exit "$st"
fi
printf '\0sandpit:compiled\n'
shift "$n"
exec "$@"`

// coldBuildProcess is PID 1 running buildScript for req in a cold sandbox.
func coldBuildProcess(cwd string, lang *LanguageSpec, req sandpit.Request) engine.Spec {
	argv := append([]string{"/bin/bash", "-c", buildScript, "sandpit-build"}, lang.argv(lang.Compile, req.Path)...)
	return initProcess(cwd, "stdin", append(append(argv, "--"), lang.runArgv(req)...)...)
}

// deadlineLine is the first line of an init sandbox's stdin: the
// microseconds PID 1 allows the run, from now until deadline plus
// initGrace.
func deadlineLine(deadline time.Time) []byte {
	us := time.Until(deadline.Add(initGrace)).Microseconds()
	return []byte(strconv.FormatInt(max(us, 100_000), 10) + "\n")
}

// aliveFile is the liveness FIFO, in the sandbox's source dir.
const aliveFile = "alive"

// makeAlive creates the liveness FIFO in src (a sandbox's source dir, bound
// read-only) and returns its only writer, which the server holds for the
// sandbox's life: when the server exits or dies, the kernel closes it and
// the sandbox's readers see EOF. O_RDWR opens a FIFO without waiting for a
// reader. The FIFO is mode 0444 once opened: even where the sandbox user is
// its owner (rootless, keep-id) it can neither open it for writing nor
// chmod it (the bind is read-only).
func makeAlive(src string) (*os.File, error) {
	fifo := filepath.Join(src, aliveFile)
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		return nil, fmt.Errorf("liveness fifo: %w", err)
	}
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("liveness fifo: %w", err)
	}
	if err := os.Chmod(fifo, 0o444); err != nil {
		f.Close()
		return nil, fmt.Errorf("liveness fifo: %w", err)
	}
	return f, nil
}

// initSpec is the spec of a sandbox whose first process is the init
// (process): that process, the source dir, the build dir, then mounts
// (the workspace, a package layer).
func (r *Runtime) initSpec(dir string, process engine.Spec, mounts ...engine.Mount) engine.Spec {
	process.Mounts = append([]engine.Mount{
		engine.Bind(filepath.Join(dir, "src"), sandpit.SourceDir, false, false),
		// The compiler writes the program here and the same sandbox runs
		// it: a size-limited tmpfs, charged to the sandbox's memory.
		{Destination: sandpit.BuildDir, Tmpfs: true, Size: r.cfg.Limits.TmpfsBytes, Exec: true},
	}, mounts...)
	return process
}

// initRequest is the mode and header line that make waiter.py run req.
func initRequest(lang *LanguageSpec, req sandpit.Request, cwd string) (mode string, header []byte) {
	argv := lang.runArgv(req)
	mode = "exec"
	switch {
	case len(lang.Compile) > 0:
		mode = "build"
		argv = append(append(lang.argv(lang.Compile, req.Path), "--"), argv...)
	case lang.Name == "python":
		mode = "python" // run in the waiting interpreter: no second start-up
		argv = argv[1:] // drop "python3"
	}
	return mode, waiterHeader(mode, cwd, argv)
}

// finishInit strips waiter.py's lines from the output and turns a failed
// compile into StatusCompileError. It reports false when the waiter never
// acknowledged the request, so nothing of it ran.
func (r *Runtime) finishInit(out *stepOutput, mode string) bool {
	if !out.stdout.stripPrefix(started) && out.status != sandpit.StatusTimeout && out.status != sandpit.StatusCancelled {
		return false
	}
	if mode == "build" {
		// The waiter reports the compiler's verdict in a line at the very
		// start of stdout, before the program can write anything.
		switch {
		case out.stdout.stripPrefix(compileOK):
		case out.stdout.stripPrefix(compileFailed):
			if out.status == sandpit.StatusError {
				out.status = sandpit.StatusCompileError
			}
		}
	}
	out.stdout.clamp(r.cfg.OutputBytes)
	return true
}

// errNoInit: the image cannot run waiter.py (see Runtime.hasInit).
var errNoInit = errors.New("image has no python3 for sandpit's init")

// errWarmLost: a pooled sandbox could not take its request; run it cold.
var errWarmLost = errors.New("pooled sandbox lost before it started the request")

// The waiter's acknowledgement and compile verdicts (waiter.py writes the
// same bytes at the very start of stdout, before the program can).
var (
	started       = []byte("\x00sandpit:started\n")
	compileOK     = []byte("\x00sandpit:compiled\n")
	compileFailed = []byte("\x00sandpit:compile-failed\n")
)

// markerBytes is how much the waiter's lines add to stdout at most: the
// capture is that much larger so the program still gets its full cap.
var markerBytes = int64(len(started) + len(compileFailed))

// waiterHeader is the one line waiter.py reads before it becomes the
// program: hex-encoded fields separated by spaces, so any byte can pass.
func waiterHeader(mode, cwd string, argv []string) []byte {
	fields := append([]string{mode, cwd}, argv...)
	enc := make([]string, len(fields))
	for i, f := range fields {
		enc[i] = hex.EncodeToString([]byte(f))
		if enc[i] == "" {
			enc[i] = "-" // an empty argument
		}
	}
	return []byte(strings.Join(enc, " ") + "\n")
}
