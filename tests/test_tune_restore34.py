"""`Tunable(restore=...)` takes input positions or names in a list, or a callable: a str
(`restore="xy"`) was taken as the list of its characters, silently meaning inputs `x`
and `y` where the launch function names them, and an int (`restore=1`) failed at the
first tune with Python's "'int' object is not iterable". Both are refused where the
Tunable is made, naming the tunable and `restore=` (pure logic: a Tunable's making)."""

from __future__ import annotations

import pytest

from warmcli import Kernel, Tunable
from warmcli.errors import TuneSpecError

K = Kernel("void k(float *x, float *y, long n) { }", "k", "PPl")


def launch(rt, kernel, x, y, n):
    rt.launch(kernel, x, y, n)


@pytest.mark.parametrize("restore", ["xy", "x", b"x", 1, 2.0])
def test_a_restore_that_is_no_list_is_refused_where_the_tunable_is_made(restore: object) -> None:
    with pytest.raises(TuneSpecError, match=r"tunable t: restore= is a list") as info:
        Tunable("t", {"a": K, "b": K}, launch, restore=restore)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("restore", [["x"], ("x", "y"), [0, "y"], [], None, range(2)])
def test_lists_of_positions_or_names_and_callables_are_taken(restore: object) -> None:
    Tunable("t", {"a": K, "b": K}, launch, restore=restore)  # type: ignore[arg-type]
    Tunable("t", {"a": K, "b": K}, launch, restore=lambda x, y, n: [x])
