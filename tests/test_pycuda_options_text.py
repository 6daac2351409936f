"""`SourceModule(..., options="-O3")` (one str where PyCUDA takes a list) is refused where
the module is made, in one line naming the call: it was split into one option per
character and failed the compile with NVRTC's "unrecognized option - found". Likewise
`include_dirs="inc"`. The real `warmcli.pycuda.SourceModule`.
"""

from __future__ import annotations

import pytest

from warmcli.errors import PyCudaError
from warmcli.pycuda import SourceModule

SOURCE = "__global__ void k(float *x) { x[0] = 1; }"


@pytest.mark.parametrize(("arg", "value"), [("options", "-O3"), ("include_dirs", "inc")])
def test_one_str_for_a_list_is_refused_naming_the_call(arg: str, value: str) -> None:
    with pytest.raises(PyCudaError) as caught:
        SourceModule(SOURCE, **{arg: value})
    said = str(caught.value)
    assert f"SourceModule({arg}={value!r})" in said and f"[{value!r}]" in said, said


def test_a_list_is_still_taken() -> None:
    module = SourceModule(SOURCE, options=["-DX=1"], include_dirs=[])
    assert module.defines == {"X": "1"}
