# sandpit's session REPL (see session.go). waiter.py runs it as __main__
# in the session's sandbox, with argv: this file, the start-up nonce, the
# language (python or bash). It keeps one namespace for the session's whole
# life and runs the calls the server sends on stdin, one at a time, in that
# namespace; for bash, the namespace is a bash process it starts and feeds.
#
# Server -> REPL, on stdin (the REPL owns fd 0; a call's stdin is given to
# it as sys.stdin), frames of one header line of hex fields, then payloads:
#   call NONCE CWD KIND NAME CODELEN STDINLEN ARG...   + code (or path) + stdin
#   int NONCE                                          interrupt that call
# EOF on stdin means the server went away: the session ends at once.
#
# REPL -> server: the call's output as the program writes it, on fd 1 and
# fd 2, then on each stream one end line:
#   \0sandpit:end:NONCE:JSON\n     (JSON on stdout, empty on stderr)
# The JSON (ASCII, one line) says how the call ended: status ("ok",
# "error", "interrupted", "exit"), exit, the last expression's repr, the
# namespace's names. Everything here is as untrusted as the code it runs:
# the server bounds and checks what it reads, and enforces every deadline
# itself.
import os, sys

_sp_int_ok = False  # interrupts become KeyboardInterrupt only in user code


def _sp_main():
    import ast, importlib, io, json, linecache, queue, signal, threading, types

    nonce0 = sys.argv[1].encode()
    language = sys.argv[2] if len(sys.argv) > 2 else "python"
    value_max = 16384
    names_max = 50
    main_ident = threading.get_ident()
    calls = queue.SimpleQueue()
    state = {"nonce": None, "rel": ""}

    def write_all(fd, b):
        while b:
            n = os.write(fd, b)
            b = b[n:]

    def end(nonce, payload):
        for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                f.flush()
            except Exception:
                pass
        write_all(2, b"\x00sandpit:end:" + nonce + b":\n")
        write_all(1, b"\x00sandpit:end:" + nonce + b":" + json.dumps(payload).encode() + b"\n")

    inp = io.open(0, "rb", buffering=65536, closefd=False)

    def read_exact(n):
        b = inp.read(n) if n else b""
        if len(b) != n:
            os._exit(0)
        return b

    def reader():
        global _sp_int_ok
        while True:
            line = inp.readline(1 << 20)
            if not line.endswith(b"\n"):
                os._exit(0)  # EOF (the server is gone) or a broken frame
            f = [b"" if x == b"-" else bytes.fromhex(x.decode()) for x in line.split()]
            if not f:
                continue
            if f[0] == b"int":
                # Remembered for the call it names, should it not have
                # reached the user's code yet (run checks it there).
                state["intr"] = f[1]
                if f[1] == state["nonce"] and _sp_int_ok:
                    if shell is not None:
                        try:
                            os.killpg(shell.pid, signal.SIGINT)
                        except OSError:
                            pass
                    else:
                        threading.Thread(target=interrupt_main, args=(f[1],), daemon=True).start()
                continue
            if f[0] == b"call":
                nonce, cwd, kind, name = f[1], f[2], f[3], f[4]
                code = read_exact(int(f[5]))
                data = read_exact(int(f[6]))
                calls.put((nonce, cwd, kind, name, code, data, [os.fsdecode(a) for a in f[7:]]))

    def interrupt_main(nonce):
        # Until the handler has raised: a signal that lands after the
        # interpreter's last check but before a blocking call (time.sleep
        # entering clock_nanosleep) only runs the handler when that call
        # returns, so one SIGINT can be lost for as long as the call lasts.
        pause = threading.Event()
        while state["nonce"] == nonce and state.get("intr_seen") != nonce:
            signal.pthread_kill(main_ident, signal.SIGINT)
            pause.wait(0.05)

    def on_int(signum, frame):
        # Once per call: a repeat that crossed the raise must not break
        # into the program's own clean-up (the server interrupts once).
        if _sp_int_ok and state.get("intr_seen") != state["nonce"]:
            state["intr_seen"] = state["nonce"]
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_int)

    # The user's namespace: a fresh __main__, as `python3 -i` has.
    user = types.ModuleType("__main__")
    user.__builtins__ = __builtins__
    user.__annotations__ = {}
    sys.modules["__main__"] = user
    ns = user.__dict__
    sys.path[0] = ""  # imports from the working directory, as in a REPL
    sys.argv = [""]
    sys.stdout.reconfigure(line_buffering=True)  # output shows as it is printed

    def bounded_repr(v):
        r = repr(v)
        if len(r) > value_max:
            return r[:value_max], True
        return r, False

    def names():
        out = sorted(k for k in ns if not k.startswith("_"))
        return out[:names_max], max(0, len(out) - names_max)

    def show_figures():
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or not plt.get_fignums():
            return
        if plt.get_backend() == "module://sandpit_matplotlib":
            plt.show()  # saves figure-N.png in the working directory

    def run(nonce, cwd, kind, name, code, data, args):
        global _sp_int_ok
        out = {"status": "ok", "exit": 0}
        # The package layer is mounted per call (and may change between
        # calls): forget what the import system cached of its absence.
        importlib.invalidate_caches()
        try:
            os.chdir(os.path.join(os.fsdecode(cwd), state["rel"]))
        except OSError:
            os.chdir(os.fsdecode(cwd))
        sys.stdin = io.TextIOWrapper(io.BytesIO(data))
        try:
            if kind == b"path":
                filename = os.fsdecode(code)
                sys.argv = [filename] + args
                with open(filename, "rb") as fh:
                    code = fh.read()
            else:
                filename = "<%s>" % os.fsdecode(name)
                sys.argv = [""] + args
            src = code.decode("utf-8", "replace")
            linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
            _sp_int_ok = True
            if state.get("intr") == nonce:
                state["intr_seen"] = nonce
                raise KeyboardInterrupt  # interrupted before it started
            tree = compile(src, filename, "exec", ast.PyCF_ONLY_AST)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, filename, "exec"), ns)
            if last is not None:
                v = eval(compile(last, filename, "eval"), ns)
                if v is not None:
                    out["value"], out["value_truncated"] = bounded_repr(v)
            show_figures()
            _sp_int_ok = False
        except SystemExit as e:
            _sp_int_ok = False
            c = e.code
            if c is None:
                c = 0
            elif not isinstance(c, int):
                print(c, file=sys.stderr)
                c = 1
            out = {"status": "exit", "exit": c}
        except KeyboardInterrupt as e:
            _sp_int_ok = False
            out = {"status": "interrupted", "exit": 130}
            if e.__traceback__ is not None:
                e.__traceback__ = e.__traceback__.tb_next
            sys.excepthook(type(e), e, e.__traceback__)
        except BaseException as e:
            _sp_int_ok = False
            out = {"status": "error", "exit": 1}
            if e.__traceback__ is not None:
                e.__traceback__ = e.__traceback__.tb_next
            try:
                sys.excepthook(type(e), e, e.__traceback__)
            except BaseException:
                pass
        _sp_int_ok = False
        try:
            cur = os.getcwd()
            base = os.fsdecode(cwd)
            state["rel"] = os.path.relpath(cur, base) if cur.startswith(base + "/") else ""
        except OSError:
            state["rel"] = ""
        os.chdir("/tmp")  # off the call's workspace view, which is detached next
        out["names"], out["more"] = names()
        return out

    # bash: one shell for the session, fed one line per call on its stdin;
    # it reports each call's status, directory and variable names on fd 62.
    # An interrupt is SIGINT to its process group: the trap returns from
    # the sourced call (inside a function, from the function).
    shell, status = None, None
    if language == "bash":
        import select, shlex, subprocess
        r62, w62 = os.pipe()
        os.makedirs("/tmp/.sandpit", exist_ok=True)
        os.dup2(w62, 62)
        os.close(w62)
        shell = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=1, stderr=2,
            pass_fds=(62,), start_new_session=True)
        os.close(62)
        status = io.open(r62, "rb", buffering=0)

        def shell_report():
            # rc, directory, then names, then \x01; EOF: the shell is gone.
            buf = b""
            while not buf.endswith(b"\n\x01\n"):
                ready, _, _ = select.select([status], [], [], 0.5)
                if ready:
                    c = status.read(65536)
                    if not c:
                        os._exit(0)
                    buf += c
                elif shell.poll() is not None:
                    os._exit(0)
            lines = buf[:-3].decode("utf-8", "replace").split("\n")
            return lines[0], lines[1], lines[2:]

        report = "; __sp_rc=$?; printf '%s\\n%s\\n' \"$__sp_rc\" \"$PWD\" >&62; compgen -v >&62; printf '\\001\\n' >&62; cd /tmp\n"
        shell.stdin.write(b"trap 'return 130 2>/dev/null' INT; cd /tmp; true" + report.encode())
        shell.stdin.flush()
        baseline = set(shell_report()[2])

        def run(nonce, cwd, kind, name, code, data, args):
            global _sp_int_ok
            with open("/tmp/.sandpit/stdin", "wb") as fh:
                fh.write(data)
            target = os.fsdecode(code)
            if kind != b"path":
                with open("/tmp/.sandpit/call", "wb") as fh:
                    fh.write(code)
                target = "/tmp/.sandpit/call"
            d = os.path.join(os.fsdecode(cwd), state["rel"])
            line = "cd -- %s 2>/dev/null || cd -- %s; . %s %s </tmp/.sandpit/stdin" % (
                shlex.quote(d), shlex.quote(os.fsdecode(cwd)), shlex.quote(target), " ".join(shlex.quote(a) for a in args))
            _sp_int_ok = True
            if state.get("intr") == nonce:
                _sp_int_ok = False
                return {"status": "interrupted", "exit": 130, "names": [], "more": 0}
            shell.stdin.write(line.encode() + report.encode())
            shell.stdin.flush()
            rc, pwd, names = shell_report()
            _sp_int_ok = False
            base = os.fsdecode(cwd)
            state["rel"] = os.path.relpath(pwd, base) if pwd.startswith(base + "/") else ""
            rc = int(rc) if rc.isdigit() else 1
            user = sorted(n for n in names if n not in baseline and not n.startswith("__sp_"))
            return {"status": "interrupted" if rc == 130 and state.get("intr") == nonce else ("ok" if rc == 0 else "exit"),
                    "exit": rc, "names": user[:names_max], "more": max(0, len(user) - names_max)}

    threading.Thread(target=reader, daemon=True).start()
    end(nonce0, {"status": "ready"})
    while True:
        call = calls.get()
        state["nonce"] = call[0]
        try:
            out = run(*call)
        except BaseException as e:  # a KeyboardInterrupt between the lines above
            out = {"status": "interrupted", "exit": 130, "names": [], "more": 0}
        state["nonce"] = None
        end(call[0], out)


_sp_main()
