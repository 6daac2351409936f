"""How a tune's output check compares a candidate's outputs with what it expects: the
reference candidate's outputs, or one value (`differs`, `alike`, `compare`). Pure numpy over
arrays read back: it owns no state, never launches and never prints (split from
`warmcli.runtime.tune_guard`, which reads the outputs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def differs(got: np.ndarray, want: Any, tolerance: tuple[float, float]) -> np.ndarray:
    """Where `got` differs from `want` (an array or one value) beyond `(rtol, atol)`
    (floats and complex; every other dtype exactly)."""
    if got.dtype.kind in "fc":
        rtol, atol = tolerance
        return ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return np.asarray(got != want)


def alike(got: np.ndarray, want: Any, tolerance: tuple[float, float]) -> bool:
    """Whether `got` is `want` (an array of its shape, or one value) within `tolerance`,
    judged a slice at a time: real data differs in the first, read in microseconds."""
    flat = got.reshape(-1)
    wanted = want.reshape(-1) if isinstance(want, np.ndarray) else want
    for at in range(0, flat.size, _SLICE):
        part = wanted[at : at + _SLICE] if isinstance(wanted, np.ndarray) else wanted
        if differs(flat[at : at + _SLICE], part, tolerance).any():
            return False
    return True


_SLICE = 1 << 16  # elements a time: small temporaries, an early answer


def compare(
    outputs: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    reference: str,
    tolerance: tuple[float, float],
) -> str | None:
    """Why `outputs` differ from the reference candidate's, or None when they agree."""
    rtol, atol = tolerance
    for index, (got, want) in enumerate(zip(outputs, expected, strict=True), start=1):
        bad = differs(got, want, tolerance)
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            where = at if len(at) != 1 else at[0]
            return (
                f"check: output {index} ({got.dtype}{list(got.shape)}) differs from candidate "
                f"{reference!r}: {got[at].item()!r} != {want[at].item()!r} at [{where}] "
                f"({int(bad.sum())} element(s), rtol {rtol:g}, atol {atol:g})"
            )
    return None
