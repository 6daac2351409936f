"""What warm adds to an NVRTC log where a header was not found, by how it was included.

A quoted name (`#include "mine.cuh"`) NVRTC looks for only in the `-I` folders, never in
the working folder (`warmcli.backends.cuda.nvrtc.PROGRAM`): the hint names `-I`. An angled
one it lacks is most often a host compiler's header (`<cstdint>`, `<cmath>`, `<vector>`),
which NVRTC does not have and nvcc does: the hint names CUDA's own (`<cuda/std/...>`) and
`--compiler nvcc`, and `-I` for a header of the user's. Pure functions over the log text:
no state, no compiler run.
"""

from __future__ import annotations

import re

_CANNOT_OPEN = "cannot open source file"
# NVRTC's error, then the line it quotes: `#include <cstdint>` or `#include "mine.cuh"`.
_INCLUDE_SHOWN = re.compile(_CANNOT_OPEN + r' "[^"\n]*"[^\n]*\n\s*#\s*include\s*([<"])')
QUOTED = "warm: as nvcc, NVRTC reads no header from the working folder: name it with -I"
ANGLED = (
    "warm: NVRTC has no host compiler's headers (<cstdint>, <cmath>, <vector>...), which "
    "nvcc has: include CUDA's own (<cuda/std/cstdint>, <cuda/std/cmath>...) or build with "
    "--compiler nvcc; a header of yours: name its folder with -I"
)


def not_found_hint(log: str) -> str:
    """The hint lines for a failed program's `log` ("" where no header was missing)."""
    if _CANNOT_OPEN not in log:
        return ""
    forms = {m.group(1) for m in _INCLUDE_SHOWN.finditer(log)} or {'"'}
    return "".join(f"\n{hint}" for form, hint in (('"', QUOTED), ("<", ANGLED)) if form in forms)
