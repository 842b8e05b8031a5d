# sandpit pre-flight: reads {"code_b64", "modules", "builtins"} as JSON on
# stdin, parses the code with ast (never runs it) and prints
# {"violations": [...]} or {"syntax_error": "..."} as JSON on stdout. It runs
# inside a sandbox.
#
# The code arrives as the exact bytes the interpreter will read, and is
# parsed as bytes: the interpreter decodes a source file by its PEP 263
# coding cookie (or BOM), and so must the checker, or
# "# -*- coding: utf-7 -*-" turns "# +AAo-import socket" into an import the
# checker never sees. Code that does not parse is reported, never passed:
# what the checker cannot read it cannot vouch for (a NUL byte, for one,
# stops the parser but not every way of running the file).
import ast, base64, json, sys

req = json.load(sys.stdin)
modules = set(req.get("modules") or [])
builtins = set(req.get("builtins") or [])
out = []


def denied_module(name):
    parts = (name or "").split(".")
    for i in range(1, len(parts) + 1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def note(node, kind, name):
    out.append({"line": getattr(node, "lineno", 0), "kind": kind, "name": name})


def const_str(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


try:
    tree = ast.parse(base64.b64decode(req["code_b64"], validate=True))
except SyntaxError as e:
    where = f" (line {e.lineno})" if e.lineno else ""
    print(json.dumps({"syntax_error": f"{e.msg}{where}"}))
    sys.exit(0)
except Exception as e:  # ValueError, RecursionError, MemoryError...: unreadable all the same
    print(json.dumps({"syntax_error": f"{type(e).__name__}: {e}"}))
    sys.exit(0)

for node in ast.walk(tree):
    if isinstance(node, ast.Import):
        for a in node.names:
            m = denied_module(a.name)
            if m:
                note(node, "import", m)
    elif isinstance(node, ast.ImportFrom):
        if node.level == 0:
            m = denied_module(node.module)
            if m:
                note(node, "import", m)
            for a in node.names:
                m = denied_module(f"{node.module}.{a.name}")
                if m and m != denied_module(node.module):
                    note(node, "import", m)
    elif isinstance(node, ast.Call):
        f = node.func
        name = None
        if isinstance(f, ast.Name):
            name = f.id
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("builtins", "__builtins__"):
            name = f.attr
        if name in builtins:
            note(node, "builtin", name)
        # Dynamic imports of a constant name are imports too.
        target = None
        if name == "__import__" and node.args:
            target = const_str(node.args[0])
        elif isinstance(f, ast.Attribute) and f.attr == "import_module" and node.args:
            target = const_str(node.args[0])
        if target and denied_module(target):
            note(node, "import", denied_module(target))
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in builtins:
        # A denied builtin used without calling it (f = eval; f(...)).
        note(node, "builtin", node.id)

seen, uniq = set(), []
for v in out:
    k = (v["line"], v["kind"], v["name"])
    if k not in seen:
        seen.add(k)
        uniq.append(v)
uniq.sort(key=lambda v: (v["line"], v["kind"], v["name"]))
print(json.dumps({"violations": uniq[:20]}))
