package runtime

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/runtime/engine"
)

// A session's sandbox must end by itself when its server goes away, and
// stdin cannot tell it: containerd's runc shim holds a writer on every
// task's stdin FIFO until the task's IO is closed (CloseIO), so a server
// that dies never makes its sandboxes see EOF. A session's sandbox has a
// liveness FIFO instead: the server creates it in the sandbox's source dir
// (bound read-only), so that nothing in the sandbox can open it for
// writing, and holds it open for the session's
// life. When the server exits or dies, the kernel closes its descriptor and
// the sandbox's PID 1, which reads that FIFO, sees EOF. The FIFO is mode
// 0444 once the server has it open: even where the sandbox user is the
// FIFO's owner (rootless, keep-id) it cannot open it for writing, nor chmod
// it (the source dir is bound read-only).

// sessionInitScript is PID 1 of a session's sandbox: initScript's deadline
// (the first line of stdin: the session's age limit), plus the liveness
// FIFO. Its timer is a read of that FIFO with a timeout, in PID 1 itself:
// no child timer that a program could stop (SIGSTOP) to stall PID 1, which
// nothing in its pid namespace can signal, and ptrace is denied. PID 1
// kills everything at the deadline, on EOF (the server is gone), and when
// the program (the REPL) ends, noticed within half a second.
const sessionInitScript = `set -m
exec 3>&2 2>/dev/null
IFS= read -r t || exit 0
end=$(( ${EPOCHREALTIME/./} + t ))
exec 4<` + sandpit.SourceDir + "/" + aliveFile + `
"$@" <&0 2>&3 3>&- 4<&- &
p=$!
exec 3>&-
while kill -0 "$p"; do
	(( ${EPOCHREALTIME/./} < end )) || break
	read -t 0.5 -u 4 _
	(( $? > 128 )) || break
done
kill -KILL -1
wait "$p"
exit $?`

// sessionProcess is the first process of a session's sandbox: the session
// init running waiter.py, which becomes the REPL on the session's header.
var sessionProcess = engine.Spec{Cwd: "/tmp", Args: []string{"/bin/bash", "-c", sessionInitScript, "sandpit-session-init", "python3", "-c", waiterPy}}

// newSessionSandbox creates and starts a session's sandbox: a pooled
// sandbox's layout (src/, ws/ as a shared mount point, fifo/) under the
// session init, with the liveness FIFO, which alive holds open.
func (r *Runtime) newSessionSandbox(ctx context.Context, image string) (w *warm, alive *os.File, retErr error) {
	if _, err := r.image(ctx, image); err != nil {
		return nil, nil, err
	}
	if !r.hasInit(image) {
		return nil, nil, errNoInit
	}
	id := "sess-" + newRunID()
	dir := filepath.Join(r.cfg.StateDir, "runs", id)
	w = &warm{dir: dir, created: time.Now()}
	r.setLive(id, true)
	defer func() {
		if retErr != nil {
			if alive != nil {
				alive.Close()
			}
			r.destroyWarm(w)
		}
	}()
	for _, d := range []string{"src", "fifo"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return w, nil, err
		}
	}
	alive, err := makeAlive(filepath.Join(dir, "src"))
	if err != nil {
		return w, nil, err
	}
	// ws/ and env/ receive each call's workspace and layer: envmount.go.
	points, err := attachPoints(dir)
	if err != nil {
		return w, alive, err
	}
	sb, err := r.create(ctx, image, id, dir, r.initSpec(dir, sessionProcess, points...), engine.LateStdin(), r.cfg.OutputBytes+markerBytes)
	if err != nil {
		return w, alive, err
	}
	w.sb = sb
	if err := r.start(ctx, sb); err != nil {
		return w, alive, err
	}
	return w, alive, nil
}
