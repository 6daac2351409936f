"""Differential fuzzing of warm's shared C units against plain `cc` (`c_kernel_fuzz`).

For a few fixed seeds, a batch of generated kernels (colliding helper, typedef, tag and
enumerator names; macros, conditionals, `_Generic`, bit-fields, an `#include`, kernels that
use a neighbour's names) is built alone by plain `cc` and through warm's batch compiler in
one unit: the same kernels compile and each writes the same bytes. Bugs it found:
- a kernel that names its function (`__func__`, `__FUNCTION__`, `__PRETTY_FUNCTION__`)
  saw warm's name for it (`warm_<key>_k`, its renamed helper's), in a shared unit and
  alone: such a kernel is compiled in a unit of its own now, and a kernel in a unit of its
  own keeps its entry's name as written (its symbol is its entry);
- `__func__` made by token pasting (`CAT(__fu, nc__)`) still saw warm's name: a kernel
  that pastes where a piece of such a name shows is compiled in a unit of its own;
- a macro that stringizes its expanded argument (`XSTR(vec_t)`, `XSTR(k)`) spelt warm's
  name of a type, helper or entry (`"warm_<key>_vec_t"`): a C kernel whose macros
  stringize is compiled in a unit of its own now.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from c_kernel_fuzz import alone, batch, batched, differences
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.kernel import Kernel

SEEDS = [1, 6, 9, 12, 32]  # each held a kernel warm built otherwise than cc, before the fix


@pytest.fixture(scope="module")
def built_alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch folder for this module's builds by plain `cc` (`alone` keeps each by its
    source and defines): the generator's check reads the seeds' builds, never makes them
    again."""
    return tmp_path_factory.mktemp("alone")


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_kernels_build_and_compute_as_alone(seed: int, built_alone: Path) -> None:
    assert differences(batch(seed, 12), built_alone) == []


def test_the_generator_covers_what_it_claims(built_alone: Path) -> None:
    """Some generated kernels fail alone (a neighbour's name), some go alone (an include),
    and both sides agree on each: the fuzz is not vacuous."""
    kernels = [k for seed in SEEDS for k in batch(seed, 12)]
    assert any("#include" in k.source for k in kernels)
    assert any(alone(k, built_alone) is None for k in kernels)


# Sources that held (each computes R as alone), kernels between neighbours declaring the same
# names otherwise; and names an earlier kernel declares, which a later one cannot use.
HELD = [
    "static int (helper)(int x) { return x + 1; }\n#define R helper(4)",
    "static int helper(x) int x; { return x + 2; }\n#define R helper(4)",
    "static int helper(int a[static 2]) { return a[0] + a[1]; }\n#define R helper((int[]){3, 4})",
    "static _Thread_local int counter = 3;\n#define R (counter += 2)",
    "static int *tbl = (int[]){5, 6, 7};\n#define R tbl[2]",
    "struct pair { int helper; };\nstatic int helper(int x) { return x; }\n"
    "#define R ((struct pair){ .helper = 9 }).helper + helper(1)",
    "struct o { struct inner { int a; } i; enum e { X = 3, Y } v; };\n"
    "#define R sizeof(struct inner) + Y",
    "typedef int vec_t[4];\ntypedef int A_t, *B_t;\n#define R sizeof(vec_t) + sizeof(B_t)",
    "struct pair { int a, b; };\n"
    "static const struct pair tbl[] = { [1] = { .a = 1 }, [0] = { 3, 4 } };\n"
    "#define R tbl[0].b + tbl[1].a + sizeof tbl",
    'static const char msg[] = "helper";\n#define R sizeof msg',
    "static int\nhelper (int x)\n{\n  return x * 3;\n}\n#define R helper (5)",
    "__attribute__((weak)) int g_helper(int x) { return x + 7; }\n#define R g_helper(1)",
    "static int counter;\n__attribute__((constructor)) static void init_c(void) { counter = 42; }"
    "\n#define R counter",
    "static int helper(int x) { return x - 1; }\n#define R ({ int helper(int); helper(10); })",
    "static int helper(int x) { goto helper; helper: return x; }\n#define R helper(3)",
    "static int counter;\nstatic int counter = 5;\n#define R counter",
    "static int helper(int);\nint helper(int x) { return x * 13; }\n#define R helper(2)",
    "static int twice(int x) { return 2 * x; }\nstatic int (*fp)(int) = twice;\n#define R fp(4)",
    "typedef enum node { node_a = 2 } node;\n#define R node_a + sizeof(node)",
    "typedef struct pair pair;\nstruct pair { int a; };\n#define R sizeof(pair)",
    "struct mix { int a; };\nstatic int mix(int x) { return x + sizeof(struct mix); }\n"
    "#define R mix(1)",
]
OTHERS = (
    "typedef double T;\nstruct pair { double z[9]; };\nenum cell { Y = 41, X = 40, node_a = 5 };\n"
    "static int helper(int x) { return 1000 + x; }\nstatic int counter = 1000;\n"
    "int g_helper(int x) { return -x; }\nstatic int tbl[3] = {9, 9, 9};\n"
)
LATER = {
    "struct o { struct inner { int a; } i; enum { X1 = 3, Y1 } v; };": "Y1 + sizeof(struct inner)",
    "typedef int vec_t[4], *B_t;": "sizeof(vec_t) + sizeof(B_t)",
    "typedef struct { int x; } P;": "sizeof(P)",
    "typedef enum node { node_a = 2 } node;": "node_a + sizeof(node)",
    "struct s { int a : 3; enum { Q1, Q2 } b : 2; };": "Q2",
    "static int f(struct st { int w; } *p) { return 0; }": "sizeof(struct st)",
    "enum { E1 = 1 } ev;": "E1 + ev",
    "static enum col { RED2, BLUE2 } cv = BLUE2;": "cv + BLUE2",
    "typedef struct tg { int a; } tg_t, *tg_p;": "sizeof(tg_p) + sizeof(struct tg)",
}


def _writing(name: str, value: str, head: str = "") -> Kernel:
    """A kernel `name` that writes `value`'s two low bytes, after `head`."""
    out = f"out[0] = (unsigned char)({value}); out[1] = (unsigned char)(({value}) >> 8);"
    return Kernel(f"{head}\nvoid {name}(unsigned char *out) {{ {out} }}\n", name, "P")


def test_hand_written_kernels_build_and_compute_as_alone(tmp_path: Path) -> None:
    kernels = [_writing("z", "1", OTHERS)]
    kernels += [_writing(f"k{i}", "R", head) for i, head in enumerate(HELD)]
    for i, (head, use) in enumerate(LATER.items()):
        kernels.insert(0, _writing(f"p{i}", "1", head))  # before: the later ones fail alone
        kernels.append(_writing(f"u{i}", use))
    assert differences(kernels, tmp_path) == []
    assert [alone(k, tmp_path) is None for k in kernels].count(True) == len(LATER)


NEIGHBOUR = Kernel("static int helper(void) { return 1; }\nvoid z(unsigned char *o) { }", "z", "P")
NAMED = {
    "__func__ in the entry": "void k(unsigned char *o) { o[0] = sizeof(__func__); }",
    "__FUNCTION__ in a helper": "static int helper(void) { return sizeof(__FUNCTION__); }\n"
    "void k(unsigned char *o) { o[0] = helper(); }",
    "a type stringized": "#define STR(x) #x\n#define XSTR(x) STR(x)\ntypedef double vec_t;\n"
    "void k(unsigned char *o) { o[0] = sizeof(XSTR(vec_t)); }",
    "the entry stringized": "#define STR(x) #x\n#define XSTR(x) STR(x)\n"
    "void k(unsigned char *o) { o[0] = sizeof(XSTR(k)); }",
    "__func__ pasted": "#define CAT(a, b) a##b\n"
    "void k(unsigned char *o) { o[0] = sizeof(CAT(__fu, nc__)) + sizeof(CAT(__FUNC, TION__)); }",
    "alone, __func__ in the entry": "#include <stddef.h>\n"
    "void k(unsigned char *o) { o[0] = sizeof(__func__) + sizeof(size_t); }",
}


@pytest.mark.parametrize("case", NAMED)
def test_a_kernel_that_spells_its_names_sees_them_as_written(case: str, tmp_path: Path) -> None:
    kernel = Kernel(NAMED[case], "k", "P")
    assert batched([kernel, NEIGHBOUR], tmp_path)[0] == alone(kernel, tmp_path)


@pytest.mark.parametrize("head", ["", "#include <stddef.h>\n"])
def test_a_static_entry_is_exported_by_no_build(head: str, tmp_path: Path) -> None:
    """cc exports no `static` function; alone (an alias of its entry) warm must not either:
    such an entry fails its compile, named (test_launch35), its neighbour built."""
    kernel = Kernel(head + "static void k(unsigned char *o) { o[0] = 1; }", "k", "P")
    built = batched([kernel, NEIGHBOUR], tmp_path)
    assert built[0] is None and built[1] is not None
    assert alone(kernel, tmp_path) is None


SERVE = """\
import json, sys, warmcli
sys.path.insert(0, sys.argv[1])
import workload
warmcli.use_bundle(None if sys.argv[2] == "none" else sys.argv[2])
rt = warmcli.runtime("host")
print(json.dumps([int(v) for v in rt.read(workload.workload(rt))[:2]]))
"""
WORKLOAD = """\
from warmcli import Kernel
DEVICE = "host"
A = Kernel("void a(int *y, int n) { y[0] = sizeof(__func__); }", "a", "Pi")
B = Kernel("#define S(x) #x\\n#define X(x) S(x)\\nvoid b(int *y, int n) { y[1] = sizeof(X(b)); }",
           "b", "Pi")
def workload(rt):
    y = rt.buffer(4, "int32")
    rt.launch(A, y, 4)
    rt.launch(B, y, 4)
    return y
"""


def warmed_and_served(warm: Warm, tmp_path: Path, workload: str) -> list[int]:
    """`workload` (a `workload.py` whose entry returns a buffer) warmed by `warm run` into
    `tmp_path`/b.warm, one compiler process at a time; its buffer's first two values, read
    by a production process served from that bundle (`SERVE`)."""
    (tmp_path / "workload.py").write_text(workload)
    bundle = tmp_path / "b.warm"
    proc = warm("run", tmp_path / "workload.py", "-b", bundle, "--quiet", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    return warm.production(SERVE, tmp_path, bundle)  # type: ignore[no-any-return]


def test_a_served_kernel_names_its_function_as_written(warm: Warm, tmp_path: Path) -> None:
    assert warmed_and_served(warm, tmp_path, WORKLOAD) == [2, 2]  # "a", "b"
