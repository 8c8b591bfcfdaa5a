#!/usr/bin/env python3
"""Compare the SASS of the CUDA objects of two builds, kernel by kernel.

A refactor of device code that compiles to the same SASS for every kernel behaves as the code the
last GPU run tested, so this check (no GPU needed) is what lets such a change land between device
runs. Both builds must use the same flags (configure them alike: `cmake -S . -B build-x -G Ninja
-DCMAKE_BUILD_TYPE=Release`, as scripts/test.sh does).

    python3 scripts/sass_compare.py OLD_BUILD NEW_BUILD [object-name-substring ...]
    python3 scripts/sass_compare.py --pooled OLD_BUILD NEW_BUILD

--pooled matches kernels by name over all the CUDA objects of each build instead of object by
object: the check for device code moved between translation units (a kernel defined in several
objects must have one SASS text in each build; a kernel whose name alone changed, e.g. because a
parameter type left an anonymous namespace, is paired by its identical SASS and listed).

ptxas was seen to vary run to run on one kernel of an untouched file (session 44:
wy_kernel<float, false, true, __half> in chunk_bwd_wy.cu differed between two builds of the same
source; a rebuild matched): rebuild such an object before reading its difference as a change.

Objects are the CUDA objects under CMakeFiles/linattn.dir of OLD_BUILD (filtered by the
substrings, if any). Kernels are matched by mangled name (the path hash of anonymous namespaces
left out); the SASS text is compared without its leading and trailing blanks. cuobjdump comes from PATH, /usr/local/cuda/bin or $CUOBJDUMP (a toolkit
without it: `pip install nvidia-cuda-cuobjdump`, then CUOBJDUMP=<site-packages>/nvidia/cu13/bin/
cuobjdump; both builds are read by the same one). Exit status 0 when every kernel of every
object is identical, 1 otherwise (the differing kernels are listed), 2 on a usage or tool error.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys


def cuobjdump() -> str:
    for c in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.access(c, os.X_OK):
            return c
    raise RuntimeError("no cuobjdump (see this script's docstring)")


# Anonymous namespaces mangle as `<n>_GLOBAL__N__<hash>_<m>_<file>_<hash>` (the source file's name and
# hash of its path and contents): two checkouts of one commit, or an edit elsewhere in the file,
# differ there, and a kernel moved to another file changes its <file>. All become one token.
ANON = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}")


def sass_by_function(obj: pathlib.Path) -> dict:
    out = subprocess.run([cuobjdump(), "-sass", str(obj)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"cuobjdump failed on {obj}: {out.stderr.strip()}")
    funcs, name, body = {}, None, []
    for line in ANON.sub("(anon)", out.stdout).splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name is not None:
                funcs[name] = "\n".join(body)
            name, body = m.group(1), []
        elif name is not None:
            body.append(" ".join(line.split()))  # (column widths follow the object's longest line)
    if name is not None:
        funcs[name] = "\n".join(body)
    return funcs


def pooled(old_root: pathlib.Path, new_root: pathlib.Path) -> int:
    """Every kernel of every CUDA object, matched by name across objects."""
    def pool(root):
        texts = {}
        for obj in sorted((root / "CMakeFiles" / "linattn.dir").rglob("*.cu.o")):
            for k, body in sass_by_function(obj).items():
                texts.setdefault(k, set()).add(body)
        return texts
    a, b = pool(old_root), pool(new_root)
    if not a:
        print("no CUDA objects in " + str(old_root), file=sys.stderr)
        return 2
    same = [k for k in a if k in b and a[k] == b[k] and len(a[k]) == 1]
    changed = [k for k in a if k in b and (a[k] != b[k] or len(a[k]) > 1)]
    gone, added = sorted(k for k in a if k not in b), sorted(k for k in b if k not in a)
    # a kernel whose name changed but whose SASS did not (e.g. a parameter type moved out of an
    # anonymous namespace): paired by its SASS text
    renamed = []
    for k in list(gone):
        match = [n for n in added if b[n] == a[k]]
        if len(match) == 1:
            renamed.append((k, match[0]))
            gone.remove(k)
            added.remove(match[0])
    ok = not changed and not gone and not added
    print(f"{'SAME    ' if ok else 'DIFFERS '} pooled: {len(same)} identical kernels"
          + (f", {len(renamed)} renamed with identical SASS" if renamed else "")
          + (f", {len(changed)} changed" if changed else "")
          + (f", {len(gone)} only in old" if gone else "") + (f", {len(added)} only in new" if added else ""))
    for k, n in renamed:
        print(f"         renamed {k}\n              -> {n}")
    for k in changed + gone + added:
        print(f"         {k}")
    return 0 if ok else 1


def main(argv) -> int:
    if len(argv) >= 2 and argv[1] == "--pooled":
        if len(argv) != 4:
            print(__doc__, file=sys.stderr)
            return 2
        try:
            cuobjdump()
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 2
        return pooled(pathlib.Path(argv[2]), pathlib.Path(argv[3]))
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    old_root, new_root = pathlib.Path(argv[1]), pathlib.Path(argv[2])
    filters = argv[3:]
    objs = sorted(p.relative_to(old_root) for p in (old_root / "CMakeFiles" / "linattn.dir").rglob("*.cu.o"))
    objs = [o for o in objs if not filters or any(f in str(o) for f in filters)]
    if not objs:
        print("no CUDA objects matched", file=sys.stderr)
        return 2
    differ = 0
    try:
        cuobjdump()
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    for rel in objs:
        new = new_root / rel
        if not new.exists():
            print(f"MISSING  {rel} (not built in {new_root})")
            differ += 1
            continue
        a, b = sass_by_function(old_root / rel), sass_by_function(new)
        same = [k for k in a if k in b and a[k] == b[k]]
        changed = [k for k in a if k in b and a[k] != b[k]]
        gone, added = [k for k in a if k not in b], [k for k in b if k not in a]
        ok = not changed and not gone and not added
        print(f"{'SAME    ' if ok else 'DIFFERS '} {rel}: {len(same)} identical kernels"
              + (f", {len(changed)} changed" if changed else "")
              + (f", {len(gone)} only in old" if gone else "") + (f", {len(added)} only in new" if added else ""))
        for k in changed + gone + added:
            print(f"         {k}")
        differ += 0 if ok else 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
