"""A test helper: a seeded generator of host-C workloads and a differential check that a cold
process, a strict hit, a process served a bundle missing some entries, and a process served
after an edit that must force a rebuild all compute the same bits.

`make_case(seed, folder)` writes a workload `w.py` (and the headers it includes) into `folder`,
mixing what `c_kernel_fuzz` and the fuzz tests do not: headers found through several `-I`
folders (one shadowed later by a new file in an earlier folder, one replaced by a symbolic link,
one edited with its size and times put back, one an `#include_next` finds in another folder
once a file is renamed), a define the workload reads from an environment variable, the
predefined macros `__FILE__`, `__BASE_FILE__`, `__LINE__`, `__COUNTER__` in a kernel, one
source launched on buffers of several dtypes, scalars of every numpy dtype (the refused ones
compared as refusals), empty and non-contiguous arrays, a system header whose own include an
`-I` folder later shadows, `-mfma` kernels whose helpers gcc may
inline or not, and tunables whose candidates compute different results checked with
`check_tolerance=(0, 0)`. Its `workload(rt)` returns `(buffers, notes)`: what the process
compared reads back, and the text of every launch refused.

`differences(case, env)` runs the cold process, `warm run`, a strict served process, one served
a copy of the bundle with some kernel, tune and blob rows deleted (or a blob rewritten), then
applies the case's edits and runs a cold process, a served one writing its misses back
(`WARM_BUNDLE_WRITE=1`) and a strict one over what it wrote: it returns every comparison that
differs. Run it
by hand over many seeds: `python tests/equality_gen.py FIRST LAST`. Owns only its folders.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The production process: the workload's buffers read back, its refusals, its misses.
DRIVE = """
import hashlib, json, runpy, sys
import warmcli
m = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
bufs, notes = m["workload"](rt)
out = {name: rt.read(b).tobytes().hex() for name, b in bufs.items()}
r = warmcli.report()
print(json.dumps({"out": out, "notes": notes, "kernels": sorted(x.name for x in r.kernels),
                  "tunes": len(r.tunes)}))
"""

WORKLOAD_HEAD = """
import os
import numpy as np
from warmcli import Kernel, Tunable, LaunchError

HERE = os.path.dirname(os.path.abspath(__file__))
EK = int(os.environ.get("EQ46_K", "2"))


def inc(*names):
    return tuple(f"-I{HERE}/{n}" for n in names)


def launch1(rt, kernel, *args, stream=None):
    rt.launch(kernel, *args, stream=stream)


def try_launch(rt, notes, kernel, *args):
    try:
        rt.launch(kernel, *args)
    except (LaunchError, TypeError, ValueError) as exc:
        notes.append(f"{kernel.entry}: {type(exc).__name__}: {exc}")
"""


@dataclass
class Case:
    """One generated workload: its folder, the parts it holds and the edits it may take."""

    folder: Path
    parts: list[str]
    edits: list[tuple[str, Callable[[Path], None]]] = field(default_factory=list)
    env_after: dict[str, str] = field(default_factory=dict)


def _header_shadow(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """`#include "sh.h"` found in a later -I folder; the edit adds one to an earlier folder."""
    (d / f"sa{i}").mkdir()
    (d / f"sb{i}").mkdir()
    (d / f"sb{i}" / "sh.h").write_text(f"#define SH {rng.randint(1, 50)}\n")
    src = f'#include "sh.h"\nvoid shadow{i}(int *out) {{ out[0] = SH; out[1] = SH * 3; }}\n'

    def edit(d: Path) -> None:
        (d / f"sa{i}" / "sh.h").write_text("#define SH 777\n")

    case.edits.append((f"shadow{i}", edit))
    defs = f"SHADOW{i} = Kernel({src!r}, 'shadow{i}', 'P', options=inc('sa{i}', 'sb{i}'))\n"
    use = f"    b = rt.buffer(2, 'int32'); rt.launch(SHADOW{i}, b); bufs['shadow{i}'] = b\n"
    return defs, use


def _header_symlink(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header that the edit replaces by a symbolic link to another of the same size."""
    (d / f"ln{i}").mkdir()
    a, b = rng.randint(10, 49), rng.randint(50, 99)
    (d / f"ln{i}" / "sel.h").write_text(f"#define SEL {a}\n")
    (d / f"ln{i}" / "alt.h").write_text(f"#define SEL {b}\n")
    if rng.random() < 0.5:  # already a link, pointed elsewhere by the edit
        (d / f"ln{i}" / "one.h").write_text(f"#define SEL {a}\n")
        (d / f"ln{i}" / "sel.h").unlink()
        os.symlink("one.h", d / f"ln{i}" / "sel.h")
    src = f"#include <sel.h>\nvoid link{i}(int *out) {{ out[0] = SEL; }}\n"

    def edit(d: Path) -> None:
        (d / f"ln{i}" / "sel.h").unlink()
        os.symlink("alt.h", d / f"ln{i}" / "sel.h")

    case.edits.append((f"link{i}", edit))
    defs = f"LINK{i} = Kernel({src!r}, 'link{i}', 'P', options=inc('ln{i}'))\n"
    use = f"    b = rt.buffer(1, 'int32'); rt.launch(LINK{i}, b); bufs['link{i}'] = b\n"
    return defs, use


def _header_utime(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header edited to another text of its size, its times put back (`os.utime`)."""
    (d / f"ut{i}").mkdir()
    (d / f"ut{i}" / "u.h").write_text(f"#define UV {rng.randint(10, 49)}\n")
    src = f'#include "u.h"\nvoid utime{i}(int *out) {{ out[0] = UV; }}\n'

    def edit(d: Path) -> None:
        path = d / f"ut{i}" / "u.h"
        st = path.stat()
        path.write_text(path.read_text().replace("#define UV ", "#define UV 9")[:-2] + "\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_size == st.st_size

    case.edits.append((f"utime{i}", edit))
    defs = f"UTIME{i} = Kernel({src!r}, 'utime{i}', 'P', options=inc('ut{i}'))\n"
    use = f"    b = rt.buffer(1, 'int32'); rt.launch(UTIME{i}, b); bufs['utime{i}'] = b\n"
    return defs, use


def _env_define(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A define, or an option's `-D`, whose value the workload reads from the environment."""
    case.env_after["EQ46_K"] = str(rng.randint(3, 9))
    src = f"void envk{i}(int *out) {{ out[0] = EK_D; out[1] = EK_O; }}\n"
    defs = (
        f"ENVK{i} = Kernel({src!r}, 'envk{i}', 'P', defines={{'EK_D': EK}}, "
        f"options=(f'-DEK_O={{EK * 10}}',))\n"
    )
    use = f"    b = rt.buffer(2, 'int32'); rt.launch(ENVK{i}, b); bufs['envk{i}'] = b\n"
    return defs, use


def _include_next(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """`#include_next` reaching a second folder's header; the edit renames it away so the
    third folder's is found."""
    for n in "abc":
        (d / f"nx{n}{i}").mkdir()
    (d / f"nxa{i}" / "n.h").write_text("#include_next <n.h>\n#define NA (NB + 1)\n")
    (d / f"nxb{i}" / "n.h").write_text(f"#define NB {rng.randint(1, 40)}\n")
    (d / f"nxc{i}" / "n.h").write_text(f"#define NB {rng.randint(41, 90)}\n")
    src = f"#include <n.h>\nvoid next{i}(int *out) {{ out[0] = NA; }}\n"

    def edit(d: Path) -> None:
        (d / f"nxb{i}" / "n.h").rename(d / f"nxb{i}" / "n.h.old")

    case.edits.append((f"next{i}", edit))
    defs = f"NEXT{i} = Kernel({src!r}, 'next{i}', 'P', options=inc('nxa{i}', 'nxb{i}', 'nxc{i}'))\n"
    use = f"    b = rt.buffer(1, 'int32'); rt.launch(NEXT{i}, b); bufs['next{i}'] = b\n"
    return defs, use


_SYSTEM = {"stdlib.h": ["stddef.h", "features.h"], "limits.h": ["features.h"],
           "math.h": ["features.h", "bits/wordsize.h"], "string.h": ["stddef.h"],
           "stdint.h": ["bits/wordsize.h", "features.h"]}  # fmt: skip


def _system_shadow(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A system header included with an -I folder; the edit adds to that folder a header the
    system header includes in turn (the compiler reads it: `-I` is searched first)."""
    header = rng.choice(sorted(_SYSTEM))
    shadow = rng.choice(_SYSTEM[header])
    (d / f"sy{i}").mkdir()
    src = (
        f"#include <{header}>\nvoid sys{i}(int *out) {{\n#ifdef SHADOWED\nout[0] = SHADOWED;"
        f"\n#else\nout[0] = -1;\n#endif\n}}\n"
    )

    def edit(d: Path) -> None:
        path = d / f"sy{i}" / shadow
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#define SHADOWED {rng.randint(1, 99)}\n#include_next <{shadow}>\n")

    case.edits.append((f"sys{i}:{header}>{shadow}", edit))
    defs = f"SYS{i} = Kernel({src!r}, 'sys{i}', 'P', options=inc('sy{i}'))\n"
    use = f"    b = rt.buffer(1, 'int32'); rt.launch(SYS{i}, b); bufs['sys{i}'] = b\n"
    return defs, use


def _predefined(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A kernel writing the predefined macros' values (not `__DATE__`/`__TIME__`: such a
    kernel is never served, README, `warmcli.build_clock`)."""
    macro = rng.choice(["__FILE__", "__BASE_FILE__", "__func__"])
    extra = rng.choice(["", "int c0 = __COUNTER__; int c1 = __COUNTER__; out[60] = c0 + c1;"])
    helper = rng.choice(["", "static int twice(int x) { return 2 * x; }\n"])
    call = "out[61] = twice(__LINE__);" if helper else "out[61] = __LINE__;"
    src = (
        f"{helper}void pre{i}(char *out) {{ const char *s = {macro};"
        f" int n = 0; while (s[n] && n < 59) {{ out[n] = s[n]; n++; }} {extra} {call} }}\n"
    )
    defs = f"PRE{i} = Kernel({src!r}, 'pre{i}', 'P')\n"
    use = f"    b = rt.buffer(64, 'int8'); rt.launch(PRE{i}, b); bufs['pre{i}'] = b\n"
    return defs, use


_DTYPES = ["float32", "float64", "int8", "uint16", "int64", "complex64", "bool", "float16"]


def _dtypes(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """One source launched on buffers of several dtypes (read as bytes), tuned on each."""
    src = (
        f"void bsum{i}(const unsigned char *x, long n, long long *out) {{ long long s = 0;"
        f" for (long j = 0; j < n; j++) s = s * 31 + x[j]; out[0] = s; }}\n"
    )
    src2 = src.replace("s * 31", "s * 31 + 0")
    defs = (
        f"BSUM{i} = Kernel({src!r}, 'bsum{i}', 'PlP')\n"
        f"BT{i} = Tunable('bt{i}', {{'a': BSUM{i}, 'b': Kernel({src2!r}, 'bsum{i}', 'PlP')}},"
        f" launch1, check='a', check_tolerance=(0, 0))\n"
    )
    use = ""
    for k, dt in enumerate(rng.sample(_DTYPES, 3)):
        n = rng.randint(0, 5)
        use += (
            f"    x = rt.upload((np.arange({n}) * 3 + 1).astype('{dt}'))\n"
            f"    b = rt.buffer(1, 'int64'); rt.launch(BSUM{i}, x, x.nbytes, b)"
            f"; bufs['bsum{i}_{k}'] = b\n"
            f"    t = rt.buffer(1, 'int64'); rt.tune(BT{i}, x, x.nbytes, t)"
            f"; bufs['bt{i}_{k}'] = t\n"
        )
    return defs, use


_INT_LETTERS = {"b": (-128, 127), "B": (0, 255), "h": (-32768, 32767), "H": (0, 65535),
                "i": (-2**31, 2**31 - 1), "I": (0, 2**32 - 1), "q": (-2**63, 2**63 - 1),
                "Q": (0, 2**64 - 1)}  # fmt: skip
_C_TYPES = {"b": "signed char", "B": "unsigned char", "h": "short", "H": "unsigned short",
            "i": "int", "I": "unsigned", "q": "long long", "Q": "unsigned long long",
            "?": "_Bool", "f": "float", "d": "double"}  # fmt: skip
_NP_INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
_NP_REALS = ["float16", "float32", "float64", "longdouble", "complex64", "complex128", "bool_"]


def _scalar_value(rng: random.Random, letter: str) -> str:
    """A Python expression of a scalar for `letter`, of a random numpy (or Python) type."""
    if letter in _INT_LETTERS:
        lo, hi = _INT_LETTERS[letter]
        kind = rng.choice([*_NP_INTS, "int", "bool_", "bool", "float64"])
        if kind in ("bool", "bool_"):
            return f"np.bool_({rng.random() < 0.5})" if kind == "bool_" else str(rng.random() < 0.5)
        if kind == "int":
            return str(rng.choice([lo, hi, 0, 1, rng.randint(lo, hi)]))
        if kind == "float64":
            return f"np.float64({rng.randint(0, 9)})"
        info_lo, info_hi = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
                            "uint16": (0, 65535), "int32": (-2**31, 2**31 - 1),
                            "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
                            "uint64": (0, 2**64 - 1)}[kind]  # fmt: skip
        v = rng.choice([info_lo, info_hi, 0, 1, rng.randint(info_lo, info_hi)])
        return f"np.{kind}({v})"
    if letter == "?":
        return rng.choice(["True", "False", "0", "1", "np.bool_(True)", "np.int8(1)", "2"])
    kind = rng.choice([*_NP_REALS, "float", "int"])
    v = rng.choice(["0.1", "-2.5", "65504.0", "1e-8", "3.0", "1e39", "float('nan')", "-0.0"])
    if kind == "float":
        return v
    if kind == "int":
        return str(rng.choice([0, 7, 2**53 + 1, -(2**31)]))
    if kind == "bool_":
        return "np.bool_(True)"
    if kind.startswith("complex"):
        return f"np.{kind}({v} + {rng.choice(['0j', '1j'])})"
    return f"np.{kind}({v})"


def _scalars(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A kernel of several scalar letters, launched with numpy scalars of every dtype, first
    before its load, then after; the refused launches compared as their messages."""
    letters = "".join(rng.sample(list(_C_TYPES), rng.randint(2, 6)))
    params = ", ".join(f"{_C_TYPES[c]} a{j}" for j, c in enumerate(letters))
    body = " ".join(
        f"{{ {_C_TYPES[c]} v = a{j}; __builtin_memcpy(out + {8 * j}, &v, sizeof v); }}"
        for j, c in enumerate(letters)
    )
    src = f"void scal{i}(unsigned char *out, {params}) {{ {body} }}\n"
    defs = f"SCAL{i} = Kernel({src!r}, 'scal{i}', 'P{letters}')\n"
    use = ""
    for k in range(3):
        args = ", ".join(_scalar_value(rng, c) for c in letters)
        use += (
            f"    b = rt.buffer(64, 'uint8'); try_launch(rt, notes, SCAL{i}, b, {args})"
            f"; bufs['scal{i}_{k}'] = b\n"
        )
    return defs, use


def _views(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """Empty arrays and non-contiguous views uploaded (and their bytes read by a kernel)."""
    src = (
        f"void vsum{i}(const unsigned char *x, long n, unsigned char *out) {{"
        f" for (long j = 0; j < n; j++) out[j] = x[j] ^ 0x5a; }}\n"
    )
    defs = f"VSUM{i} = Kernel({src!r}, 'vsum{i}', 'PlP')\n"
    views = [
        "a[::2]", "a.T", "a[:, 1]", "a[::-1]", "a[:0]", "a[1:1, :]", "a.reshape(-1)[::3]",
        "np.asfortranarray(a)", "a.astype('>f4')", "a[:, ::-2]", "np.zeros((0, 3))",
    ]  # fmt: skip
    use = "    a = (np.arange(24, dtype=np.float32) * 1.5).reshape(6, 4)\n"
    for k, v in enumerate(rng.sample(views, 3)):
        use += (
            f"    x = rt.upload({v}); b = rt.buffer(max(x.nbytes, 1), 'uint8')\n"
            f"    rt.launch(VSUM{i}, x, x.nbytes, b)\n"
            f"    bufs['view{i}_{k}'] = b; bufs['up{i}_{k}'] = x\n"
        )
    return defs, use


def _fma(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """`-mfma` kernels: a helper's product added to a sum rounds once where gcc inlines it
    and contracts (`-ffp-contract=fast`, GNU C's default), twice where it does not."""
    n_calls = rng.randint(1, 6)
    helper = "static double mul(double a, double b) { double r = a * b; return r; }\n"
    calls = " ".join(f"s = mul(x[j], y[j] + {c}.0) + s;" for c in range(n_calls))
    src = (
        f"{helper}void fma{i}(const double *x, const double *y, double *out, int n) {{"
        f" double s = 0.1; for (int j = 0; j < n; j++) {{ {calls} }} out[0] = s; }}\n"
    )
    opt = rng.choice(["-mfma", "-march=haswell", "-O3", "-mavx2"])
    defs = f"FMA{i} = Kernel({src!r}, 'fma{i}', 'PPPi', options=({opt!r},))\n"
    use = (
        f"    r = np.random.default_rng({rng.randint(0, 99)})\n"
        f"    x = rt.upload(r.standard_normal(37)); y = rt.upload(r.standard_normal(37))\n"
        f"    b = rt.buffer(1, 'float64'); rt.launch(FMA{i}, x, y, b, 37); bufs['fma{i}'] = b\n"
    )
    return defs, use


def _tune_differ(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """Candidates computing different results by design, checked at (0, 0): the excluded
    ones never serve, so a hit and a cold start agree."""
    up, down, short = "j = 0; j < n; j++", "j = n - 1; j >= 0; j--", "j = 0; j + 1 < n; j++"
    loops = {
        "ref": (up, "x[j] * 3.0f + 1.0f"), "same": (down, "1.0f + x[j] * 3.0f"),
        "off": (up, "x[j] * 3.0f + 1.0001f"), "tail": (short, "x[j] * 3.0f + 1.0f"),
    }  # fmt: skip
    srcs = {
        c: f"void td{{i}}(float *x, int n) {{{{ for (int {h}) x[j] = {e}; }}}}"
        for c, (h, e) in loops.items()
    }
    names = ["ref", *rng.sample(["same", "off", "tail"], rng.randint(1, 3))]
    cands = ", ".join(f"'{c}': Kernel({srcs[c].format(i=i)!r}, 'td{i}', 'Pi')" for c in names)
    defs = (
        f"TD{i} = Tunable('td{i}', {{{cands}}}, launch1, check='ref', check_tolerance=(0, 0),"
        f" repeats=2)\n"
    )
    n = rng.choice([0, 1, 5, 64])
    use = (
        f"    x = rt.upload(np.linspace(-1, 1, {n}, dtype=np.float32)); rt.tune(TD{i}, x, {n})"
        f"; bufs['td{i}'] = x\n"
    )
    return defs, use


PARTS: dict[str, Callable[[random.Random, Path, int, Case], tuple[str, str]]] = {
    "shadow": _header_shadow, "symlink": _header_symlink, "utime": _header_utime,
    "env": _env_define, "next": _include_next, "predefined": _predefined, "dtypes": _dtypes,
    "scalars": _scalars, "views": _views, "fma": _fma, "tune_differ": _tune_differ,
    "system": _system_shadow,
}  # fmt: skip


def make_case(seed: int, folder: Path, parts: list[str] | None = None) -> Case:
    """A workload of 2 to 6 parts (or those named) written into `folder`."""
    rng = random.Random(seed)
    chosen = parts or rng.sample(sorted(PARTS), rng.randint(2, 6))
    case = Case(folder, chosen)
    defs, uses = [], []
    for i, part in enumerate(chosen):
        d, u = PARTS[part](rng, folder, i, case)
        defs.append(d)
        uses.append(u)
    body = "".join(uses) or "    pass\n"
    text = WORKLOAD_HEAD + "".join(defs) + "\n\ndef workload(rt):\n    bufs, notes = {}, []\n"
    (folder / "w.py").write_text(text + body + "    return bufs, notes\n")
    return case


def _started(env: dict[str, str], w: Path) -> dict[str, object]:
    """What `python -c DRIVE w` in `env`, in `w`'s folder, printed, or its error's last line."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVE, str(w)], capture_output=True, text=True, env=env,
        timeout=300, cwd=w.parent,
    )  # fmt: skip
    return driven(proc)


def driven(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """What a DRIVE process printed, or `{"error": [its stderr's last line]}` where it failed."""
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return dict(json.loads(proc.stdout))


def partial_copy(bundle: Path, dest: Path, rng: random.Random) -> list[str]:
    """`bundle` copied to `dest` with about half its kernel rows and tune rows deleted."""
    shutil.copyfile(bundle, dest)
    conn = sqlite3.connect(dest)
    labels = [r[0] for r in conn.execute("SELECT label FROM kernels ORDER BY label")]
    gone = [x for x in labels if rng.random() < 0.5]
    conn.executemany("DELETE FROM kernels WHERE label = ?", [(x,) for x in gone])
    ops = [r[0] for r in conn.execute("SELECT operation FROM tunes ORDER BY operation")]
    gone_ops = [x for x in ops if rng.random() < 0.5]
    conn.executemany("DELETE FROM tunes WHERE operation = ?", [(x,) for x in gone_ops])
    if rng.random() < 0.5:  # a kept kernel's binary gone too (`binary`), or its bytes changed
        sha = conn.execute("SELECT sha256 FROM kernels ORDER BY label LIMIT 1").fetchone()
        if sha is not None and rng.random() < 0.5:
            conn.execute("DELETE FROM blobs WHERE sha256 = ?", sha)
            gone.append(f"blob {sha[0][:8]}")
        elif sha is not None:
            conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (b"\x7fELF" * 64, sha[0]))
            gone.append(f"blob {sha[0][:8]} rewritten")
    conn.commit()
    conn.close()
    return gone + gone_ops


def differences(
    case: Case,
    env: dict[str, str],
    seed: int = 0,
    drive: Callable[[dict[str, str], Path], dict[str, object]] | None = None,
) -> list[str]:
    """Every comparison of `case` whose outputs differ from a cold process's, each process
    run by `drive` (`_started`'s `python -c DRIVE` unless a test gives a forked one)."""
    _drive = drive or _started
    w, bundle = case.folder / "w.py", case.folder / "b.warm"
    env = dict(env, PYTHONPATH=str(ROOT))
    cold = _drive(dict(env, WARM_BUNDLE=""), w)
    if "error" in cold:
        return [f"cold failed: {cold['error']}"]
    run = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", str(w), "-b", str(bundle)],
        capture_output=True, text=True, env=env, timeout=300, cwd=case.folder,
    )  # fmt: skip
    if run.returncode != 0:
        return [f"warm run exit {run.returncode}: {run.stderr.strip()[-800:]}"]
    found = []
    strict = _drive(dict(env, WARM_BUNDLE=str(bundle), WARM_STRICT="1"), w)
    found += _compare("strict hit", cold, strict)
    gone = partial_copy(bundle, case.folder / "part.warm", random.Random(seed))
    part = _drive(dict(env, WARM_BUNDLE=str(case.folder / "part.warm")), w)
    found += _compare(f"partial (deleted {gone})", cold, part)
    if case.edits or case.env_after:
        for _, edit in case.edits:
            edit(case.folder)
        after = dict(env, **case.env_after)
        cold2 = _drive(dict(after, WARM_BUNDLE=""), w)
        served2 = _drive(dict(after, WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1"), w)
        edits = [n for n, _ in case.edits]
        found += _compare(f"after edits {edits}", cold2, served2)
        strict2 = _drive(dict(after, WARM_BUNDLE=str(bundle), WARM_STRICT="1"), w)
        found += _compare(f"after edits {edits}, strict on what was written back", cold2, strict2)
    return found


def _compare(what: str, cold: dict[str, object], other: dict[str, object]) -> list[str]:
    if "error" in other:
        return [f"{what}: failed: {other['error']}"]
    diffs = []
    for name, value in cold["out"].items():  # type: ignore[union-attr]
        if other["out"].get(name) != value:  # type: ignore[union-attr]
            diffs.append(f"{what}: {name}: cold {value[:64]} != {other['out'].get(name, '')[:64]}")  # type: ignore[union-attr,index]
    if cold["notes"] != other["notes"]:
        diffs.append(f"{what}: refusals differ: {cold['notes']} != {other['notes']}")
    return diffs


def main(first: int, last: int) -> int:
    bad = 0
    for seed in range(first, last + 1):
        folder = Path(tempfile.mkdtemp(prefix=f"eq46-{seed}-"))
        home = folder / "home"
        home.mkdir()
        case = make_case(seed, folder)
        env = dict(os.environ, WARM_HOME=str(home), CUDA_VISIBLE_DEVICES="")
        found = differences(case, env, seed)
        print(f"seed {seed} {case.parts}: {'ok' if not found else 'DIFFERS'}", flush=True)
        for line in found:
            print("   ", line, flush=True)
        bad += bool(found)
        if not found:
            shutil.rmtree(folder, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
