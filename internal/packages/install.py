# sandpit's install step (internal/packages): unpacks verified artifacts
# into the package layer. It runs in an ordinary sandbox with no network,
# reads the artifacts read-only at /opt/sandpit/artifacts, writes only
# /opt/sandpit/build (the layer being built) and /workspace/sandpit.lock,
# and runs no code of any package: it imports nothing from what it unpacks
# (neither directory is on sys.path) and never runs setup.py or npm
# scripts. The host checked every artifact before (names, links, sizes,
# bombs) and checks the layer after; this script refuses the same things
# again rather than trusting that.
import json, os, shutil, sys, tarfile, zipfile

sys.path[:] = [p for p in sys.path if not p.startswith("/opt/sandpit")]
ART = "/opt/sandpit/artifacts"
BUILD = "/opt/sandpit/build"
steps = json.load(sys.stdin)


def safe(rel):
    parts = rel.split("/")
    if (not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel
            or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 0x20 for c in rel)):
        raise SystemExit("unsafe entry name %r" % rel)
    return rel


def put(root, rel, src, mode):
    path = os.path.join(root, safe(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # O_EXCL|O_NOFOLLOW: never through a link, never over another entry.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode & 0o111 else 0o644)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


done = 0
for w in steps.get("python") or []:
    site = BUILD + "/python"
    prefix = w["data_dir"]
    with zipfile.ZipFile(os.path.join(ART, w["file"])) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            name = info.filename
            if name.startswith(prefix):
                kind, _, rest = name[len(prefix):].partition("/")
                if kind not in ("purelib", "platlib"):
                    continue  # scripts, headers, data: not importable, not installed
                name = rest
            with z.open(info) as src:
                put(site, name, src, (info.external_attr >> 16) & 0o777)
    print("unpacked %s %s" % (w["name"], w["version"]))
    done += 1

for t in steps.get("javascript") or []:
    root = os.path.join(BUILD, safe(t["path"]))
    with tarfile.open(os.path.join(ART, t["file"]), "r:gz") as tf:
        for m in tf:
            if m.isdir():
                continue
            if not m.isfile():
                raise SystemExit("%s: %r is not a file" % (t["name"], m.name))
            _, _, rest = m.name.partition("/")
            if not rest:
                continue
            src = tf.extractfile(m)
            put(root, rest, src, m.mode)
    print("unpacked %s@%s" % (t["name"], t["version"]))
    done += 1

lock = steps.get("lock")
if lock is not None:
    target = "/workspace/sandpit.lock"
    if lock == "":
        if os.path.lexists(target):
            os.remove(target)
        print("removed sandpit.lock: nothing is installed")
    else:
        tmp = "/workspace/.sandpit.lock.tmp"
        with open(tmp, "w") as f:
            f.write(lock)
        os.replace(tmp, target)
        print("wrote sandpit.lock")
print("%d packages unpacked" % done)
