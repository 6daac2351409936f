"""Differential fuzzing of warm's shared C units against plain `cc` (`c_kernel_fuzz`).

For a few fixed seeds, a batch of generated kernels (colliding helper, typedef, tag and
enumerator names; macros, conditionals, `_Generic`, bit-fields, an `#include`, kernels that
use a neighbour's names) is built alone by plain `cc` and through warm's batch compiler in
one unit: the same kernels compile and each writes the same bytes. Bugs it found:
- a kernel that names its function (`__func__`, `__FUNCTION__`, `__PRETTY_FUNCTION__`)
  saw warm's name for it (`warm_<key>_k`, its renamed helper's), in a shared unit and
  alone: such a kernel is compiled in a unit of its own now, and a kernel in a unit of its
  own keeps its entry's name as written (its symbol is its entry);
- a macro that stringizes its expanded argument (`XSTR(vec_t)`, `XSTR(k)`) spelt warm's
  name of a type, helper or entry (`"warm_<key>_vec_t"`): a C kernel whose macros
  stringize is compiled in a unit of its own now.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from c_kernel_fuzz import alone, batch, batched, differences
from conftest import Warm

from warmcli.kernel import Kernel

SEEDS = [1, 6, 9, 12, 32]  # each held a kernel warm built otherwise than cc, before the fix


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_kernels_build_and_compute_as_alone(seed: int, tmp_path: Path) -> None:
    assert differences(batch(seed, 12), tmp_path) == []


def test_the_generator_covers_what_it_claims(tmp_path: Path) -> None:
    """Some generated kernels fail alone (a neighbour's name), some go alone (an include),
    and both sides agree on each: the fuzz is not vacuous."""
    kernels = [k for seed in SEEDS for k in batch(seed, 12)]
    assert any("#include" in k.source for k in kernels)
    assert any(alone(k, tmp_path) is None for k in kernels)


NEIGHBOUR = Kernel("static int helper(void) { return 1; }\nvoid z(unsigned char *o) { }", "z", "P")
NAMED = {
    "__func__ in the entry": "void k(unsigned char *o) { o[0] = sizeof(__func__); }",
    "__FUNCTION__ in a helper": "static int helper(void) { return sizeof(__FUNCTION__); }\n"
    "void k(unsigned char *o) { o[0] = helper(); }",
    "a type stringized": "#define STR(x) #x\n#define XSTR(x) STR(x)\ntypedef double vec_t;\n"
    "void k(unsigned char *o) { o[0] = sizeof(XSTR(vec_t)); }",
    "the entry stringized": "#define STR(x) #x\n#define XSTR(x) STR(x)\n"
    "void k(unsigned char *o) { o[0] = sizeof(XSTR(k)); }",
    "alone, __func__ in the entry": "#include <stddef.h>\n"
    "void k(unsigned char *o) { o[0] = sizeof(__func__) + sizeof(size_t); }",
}


@pytest.mark.parametrize("case", NAMED)
def test_a_kernel_that_spells_its_names_sees_them_as_written(case: str, tmp_path: Path) -> None:
    kernel = Kernel(NAMED[case], "k", "P")
    assert batched([kernel, NEIGHBOUR], tmp_path)[0] == alone(kernel, tmp_path)


@pytest.mark.parametrize("head", ["", "#include <stddef.h>\n"])
def test_a_static_entry_is_exported_by_no_build(head: str, tmp_path: Path) -> None:
    """cc exports no `static` function; alone (an alias of its entry) warm must not either."""
    kernel = Kernel(head + "static void k(unsigned char *o) { o[0] = 1; }", "k", "P")
    with pytest.raises(AttributeError):
        batched([kernel, NEIGHBOUR], tmp_path)
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


def test_a_served_kernel_names_its_function_as_written(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "workload.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    proc = warm("run", tmp_path / "workload.py", "-b", bundle, "--quiet", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    assert warm.production(SERVE, tmp_path, bundle) == [2, 2]  # "a", "b"
