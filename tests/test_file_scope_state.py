"""Kernels batched into one translation unit keep their file-scope state apart.

Through the real CLI (`warm run`, which compiles every kernel in one batch) and production
processes of their own (each a fork of a process that imported numpy and warmcli once,
`tests/forked_python.py`, which loaded no kernel): a C kernel whose file-scope variable warm
cannot rename (a non-static global, a `static` of several declarators, one with an
attribute) is compiled in a unit of its own, so the served build counts its own calls, as a
cold process does; C would otherwise merge two kernels' tentative definitions of one name
into one object."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.compiler import declared
from warmcli.backends.sharing import shares_unit
from warmcli.kernel import Kernel

WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
FORMS = {
    "global": ("int total;", "total++; out[0] = total;"),
    "two": ("static int calls, total;", "calls++; total++; out[0] = calls;"),
    "attr": ("static int __attribute__((unused)) u, ctr;", "ctr++; out[0] = ctr;"),
    "aligned": ("int tot __attribute__((aligned(16)));", "tot++; out[0] = tot;"),
    "macro": ("#define COUNTER(n) static int n;\\nCOUNTER(hits)", "hits++; out[0] = hits;"),
    "one": ("static int count;", "count++; out[0] = count;"),
}
KS = {
    form: [Kernel(decl + "\\nvoid %s_%s(int *out) { %s }" % (form, s, use), f"{form}_{s}", "P")
           for s in "ab"]
    for form, (decl, use) in FORMS.items()
}


def workload(rt):
    outs = {}
    for form, (a, b) in KS.items():
        outs[form] = rt.buffer(1, "int32")
        for _ in range(3):
            rt.launch(a, outs[form])
        rt.launch(b, outs[form])
    return outs
"""

SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
outs = module["workload"](rt)
counts = {form: int(rt.read(out)[0]) for form, out in outs.items()}
print(json.dumps({"counts": counts, "kernels": len(warmcli.report().kernels)}))
"""


def test_a_batched_kernels_file_scope_state_is_its_own(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    path = workload_file(WORKLOAD)
    bundle = tmp_path / "s.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    each_once = {
        form: 1 for form in ("global", "two", "attr", "aligned", "macro", "one")
    }  # b's first call: its own count
    assert warm.production(SERVE, path) == {"counts": each_once, "kernels": 12}, "cold"
    assert warm.production(SERVE, path, bundle=bundle) == {"counts": each_once, "kernels": 0}


def test_only_what_warm_renames_shares_a_unit() -> None:
    shared = [
        "static float h(float x) { return x; }\nvoid f(float *x) { x[0] = h(1); }",
        "static const float tab[3] = {1, 2, 3};\nvoid f(float *x) { x[0] = tab[1]; }",
        "typedef struct { int a; } P;\nstruct S { int b; };\nvoid f(P *p) {}",
        "float g(float);\nvoid f(float *x) { x[0] = g(2); }\nfloat g(float v) { return v; }",
        'void f(float *x) { const char *s = "};"; x[0] = s[0]; }',
        "__attribute__((always_inline)) static inline float g(float a) { return a; }\n"
        "void f(float *x) { x[0] = g(1); }",
        "#define REAL float\n#define SQ(a) ((a) * (a))\nvoid f(REAL *x) { x[0] = SQ(2); }",
    ]
    alone = [
        "int n;\nvoid f(int *x) { x[0] = n++; }",
        "static int a, b;\nvoid f(int *x) { x[0] = a + b; }",
        "  static int c;\nvoid f(int *x) { x[0] = c++; }",  # not at column 0: not renamed
        "static int (*fp)(int);\nvoid f(int *x) {}",
        "static struct { int n; } st;\nvoid f(int *x) { x[0] = st.n++; }",
        "int total __attribute__((aligned(16)));\nvoid f(int *x) { x[0] = total++; }",
        "#define COUNTER static int total;\nCOUNTER\nvoid f(int *x) { x[0] = total++; }",
    ]
    for source in shared + alone:
        kernel = Kernel(source, "f", "P")
        assert shares_unit(kernel) == (source in shared), (source, declared(source))
    declaring = Kernel("DECL\nvoid f(int *x) { x[0] = total++; }", "f", "P",
                       defines={"DECL": "static int total;"})  # fmt: skip
    assert not shares_unit(declaring), "a define whose text declares, used at file scope"
