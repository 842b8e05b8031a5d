# sandpit's waiter. Every pooled run runs it under sandpit's init (PID 1,
# see init.go), ahead of its request (argument "pool": it first reads the
# request's deadline line and hands it to PID 1 on fd 4), and so does a
# session, under its own init (session_init.go). (A cold run that compiles
# runs init.go's buildScript, which reports as "build" mode does here.) It
# blocks on stdin for one header line, acknowledges it, then becomes the
# program:
#   "exec":   os.execvp(argv) -- any language;
#   "build":  compiles (argv up to "--"), then execs the result;
#   "python": runs argv[0] as __main__ in this already-started interpreter,
#             the way `python3 argv[0] argv[1:]` would, minus start-up time.
# Header: hex-encoded fields separated by spaces: mode cwd argv...
# It reads the header with os.read, byte by byte, so not one byte of the
# program's own stdin is consumed, and imports nothing: no module that a
# plain `python3 main.py` would not have loaded is in sys.modules.
import os, sys
def _sandpit_header():
    b = bytearray()
    while True:
        c = os.read(0, 1)
        if not c:
            os._exit(0)  # the pool closed this sandbox unused
        if c == b"\n":
            break
        b += c
    return [b"" if f == "-" else bytes.fromhex(f) for f in b.decode("ascii").split(" ")]
if sys.argv[1:] == ["pool"]:
    # The first compile() of a process builds the interpreter's AST types
    # (its check for an AST argument does): 4-7 ms that `python3 main.py`
    # never pays, since running a file does not go through the builtin. A
    # pooled sandbox pays it here, while it waits; it loads no module.
    compile("", "<sandpit>", "exec")
    # A pooled sandbox: the request's first line is the run's deadline,
    # for PID 1 (sandpit's init), which waits for it on fd 4.
    _sandpit_d = bytearray()
    while True:
        _sandpit_c = os.read(0, 1)
        if not _sandpit_c:
            os._exit(0)  # the server went away before a request came
        _sandpit_d += _sandpit_c
        if _sandpit_c == b"\n":
            break
    os.write(4, bytes(_sandpit_d))
    os.close(4)
    del _sandpit_d, _sandpit_c
_sandpit_f = _sandpit_header()
os.chdir(_sandpit_f[1])
# Acknowledge the request before anything of it runs: a server that does not
# see this line knows nothing ran and may run the request elsewhere.
os.write(1, b"\x00sandpit:started\n")
if _sandpit_f[0] == b"build":
    # Compile (argv up to "--"), then run (argv after it). The verdict goes
    # to stdout first, as one line the server strips; compiler messages are
    # kept only when it fails, as with a separate compile step.
    _sandpit_i = _sandpit_f.index(b"--")
    _sandpit_cc, _sandpit_run = _sandpit_f[2:_sandpit_i], _sandpit_f[_sandpit_i + 1:]
    _sandpit_r, _sandpit_w = os.pipe()
    # posix_spawn (vfork): fork would copy this interpreter's page tables.
    _sandpit_null = os.open("/dev/null", os.O_RDONLY)
    try:
        _sandpit_pid = os.posix_spawnp(_sandpit_cc[0], [os.fsdecode(a) for a in _sandpit_cc], os.environ,
            file_actions=[(os.POSIX_SPAWN_DUP2, _sandpit_null, 0), (os.POSIX_SPAWN_DUP2, _sandpit_w, 1), (os.POSIX_SPAWN_DUP2, _sandpit_w, 2)])
    except OSError as e:
        os.write(1, b"\x00sandpit:compile-failed\n")
        os.write(2, ("%s: %s\n" % (os.fsdecode(_sandpit_cc[0]), e.strerror)).encode())
        os._exit(127)
    os.close(_sandpit_null)
    os.close(_sandpit_w)
    _sandpit_msgs = bytearray()
    while True:
        _sandpit_c = os.read(_sandpit_r, 65536)
        if not _sandpit_c:
            break
        _sandpit_msgs += _sandpit_c
    _sandpit_st = os.waitstatus_to_exitcode(os.waitpid(_sandpit_pid, 0)[1])
    if _sandpit_st != 0:
        os.write(1, b"\x00sandpit:compile-failed\n")
        os.write(2, bytes(_sandpit_msgs))
        os._exit(_sandpit_st if _sandpit_st > 0 else 128 - _sandpit_st)
    os.write(1, b"\x00sandpit:compiled\n")
    os.execv(_sandpit_run[0], [os.fsdecode(a) for a in _sandpit_run])
if _sandpit_f[0] == b"exec":
    os.execvp(_sandpit_f[2], [os.fsdecode(a) for a in _sandpit_f[2:]])
_sandpit_argv = [os.fsdecode(a) for a in _sandpit_f[2:]]
del _sandpit_header, _sandpit_f
sys.argv = _sandpit_argv
sys.path[0] = os.path.dirname(_sandpit_argv[0])
# The package layer (PYTHONPATH) was mounted after this interpreter
# started: drop its negative entry, cached when the directory was absent.
sys.path_importer_cache.pop("/opt/sandpit/env/python", None)
_sandpit_m = type(sys)("__main__")
_sandpit_m.__file__ = _sandpit_argv[0]
_sandpit_m.__cached__ = None
_sandpit_m.__loader__ = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", _sandpit_argv[0])
_sandpit_m.__builtins__ = __builtins__
_sandpit_m.__annotations__ = {}
sys.modules["__main__"] = _sandpit_m
try:
    with open(_sandpit_argv[0], "rb") as _sandpit_fh:
        _sandpit_src = _sandpit_fh.read()
except OSError as e:
    sys.stderr.write("python3: can't open file %r: [Errno %d] %s\n" % (_sandpit_argv[0], e.errno, e.strerror))
    sys.exit(2)
try:
    exec(compile(_sandpit_src, _sandpit_argv[0], "exec"), _sandpit_m.__dict__)
except SystemExit:
    raise
except BaseException as e:
    # Show the traceback the program would have had: without this frame
    # (a SyntaxError from compile() then has none, as at start-up).
    e.__traceback__ = e.__traceback__.tb_next
    sys.excepthook(type(e), e, e.__traceback__)
    sys.exit(1)
