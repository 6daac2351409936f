"""Review of the 37th stop's merges: what they missed, each shown with real parts.

Found here: a C kernel that puts a function pointer in `.init_array` from a function's body
(`static void (*p)(void) __attribute__((section(".init_array"), used)) = seed;`) is code the
loader runs as much as a constructor is, but `_LOAD_TIME` knew only the words `constructor`,
`destructor` and `ifunc`: it shared a unit, so a hit ran `seed` when a neighbour loaded and
its neighbours' `rand()` differed from a cold start's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_diff37 import Trial, same, served_everything

from warmcli.backends.sharing import shares_unit
from warmcli.kernel import Kernel

_SEED = "static void seed(void) { srand(12345); }\n"
INIT_ARRAY = r"""
from warmcli import Kernel
DEVICE = "host"
PLAIN = [Kernel("void a(int *o) { o[0] = rand() % 1000 + ID; }", "a", "P", defines={"ID": i})
         for i in range(3)]
SEEDS = Kernel(
    "static void seed(void) { srand(12345); }\n"
    "void b(int *o) {\n"
    "  static void (*p)(void) __attribute__((section(\".init_array\"), used)) = seed;\n"
    "  o[0] = rand() % 1000;\n"
    "}\n", "b", "P")
def workload(rt):
    out = {}
    for i, k in enumerate(PLAIN):
        out[f"a{i}"] = rt.buffer(1, "int32")
        rt.launch(k, out[f"a{i}"])
    out["b"] = rt.buffer(1, "int32")
    rt.launch(SEEDS, out["b"])
    return out
"""


def test_a_kernel_that_fills_init_array_from_its_body_is_served_as_cold(tmp_path: Path) -> None:
    """Warmed with `-j 1` (one unit for all that share), then served: `a0..a2` read an
    unseeded `rand()` cold; in a shared binary `seed` ran as it loaded, before them."""
    trial = Trial(tmp_path / "w", INIT_ARRAY)
    cold = trial.cold()
    trial.warmed("-j", "1")
    hot, report = trial.served()
    served_everything(report)
    same(cold, hot)


@pytest.mark.parametrize(
    "body",
    [
        '__attribute__((section(".init_array"), used))',
        '__attribute__((__section__(".init" "_array"), used))',
        '__attribute__((section(".ctors"), used))',
        '__attribute__((used, section(".fini_array")))',
        '[[gnu::section(".init_array"), gnu::used]]',
    ],
)
def test_code_the_loader_runs_from_a_section_is_built_alone(body: str) -> None:
    source = f"{_SEED}void b(int *o) {{ static void (*p)(void) {body} = seed; o[0] = rand(); }}\n"
    assert not shares_unit(Kernel(source, "b", "P"))


def test_a_section_named_by_a_paste_is_built_alone() -> None:
    source = (
        f"#define CAT(a, b) a##b\n{_SEED}void b(int *o) {{ static void (*p)(void) "
        '__attribute__((CAT(sec, tion)(".init_array"), used)) = seed; o[0] = rand(); }\n'
    )
    assert not shares_unit(Kernel(source, "b", "P"))
