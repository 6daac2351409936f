"""What warm adds to a failed NVRTC program's log: a hint where what failed is something
nvcc would have taken.

A quoted header not found (`#include "mine.cuh"`) NVRTC looks for only in the `-I`
folders, never in the working folder (`warmcli.backends.cuda.nvrtc.PROGRAM`): where the
working folder holds it (`here`, asked of each such name: the one thing read but the log),
the hint says to name it with `-I`; else (a typo, a header not written yet, or one
elsewhere) it names the folders NVRTC searched, never blaming the working folder, and
each `-I` folder that is none here (`-Iinclude` from another working folder than the one
that holds `include`: a relative `-I` is the working folder's, not the workload's). An
angled one it lacks is most often a host compiler's header (`<cstdint>`, `<cmath>`), which
NVRTC does not have and nvcc does: the hint names CUDA's own (`<cuda/std/...>`),
`--compiler nvcc`, and `-I` for a header of the user's; where it is only `<stdio.h>` or
`<math.h>` (a PyCUDA kernel's, for printf or sqrtf), that NVRTC declares those itself (drop
the include) or `--compiler nvcc`. A macro or type of the host headers nvcc's implicit
`cuda_runtime.h` brings (`INFINITY`, `M_PI`, `INT_MAX`, `int64_t`, glibc's `uint` and
`u_char`), and an nvcc option NVRTC does not know (`-O3`), name `--compiler nvcc`. A C++
header's overloads given C linkage (`<cuda_fp16.h>` in a PyCUDA `SourceModule`, whose source
is wrapped in `extern "C" { }`) name `no_extern_c=True`, and, for a block of the source's
own (warm's `Kernel`: no wrap), moving them out of it. No state, no compiler run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from warmcli.backends.compiler import no_include_folders

_CANNOT_OPEN = "cannot open source file"
# NVRTC's error, then the line it quotes: `#include <cstdint>` or `#include "mine.cuh"`.
_INCLUDE_SHOWN = re.compile(_CANNOT_OPEN + r' "([^"\n]*)"[^\n]*\n\s*#\s*include\s*([<"])')
# What NVRTC declares itself (printf, CUDA's math functions), which these include for nvcc.
_DECLARED = {"stdio.h", "cstdio", "math.h"}
_HOST_NAME = re.compile(
    r'identifier "(?:INFINITY|NAN|HUGE_VALF?|M_[A-Z0-9_]+|U?INT(?:8|16|32|64)?_(?:MAX|MIN)'
    r"|U?LLONG_(?:MAX|MIN)|U?LONG_(?:MAX|MIN)|FLT_[A-Z_]+|DBL_[A-Z_]+|u?int(?:8|16|32|64)_t"
    r"|size_t|ptrdiff_t|uintptr_t|intptr_t|uint|ushort|ulong|u_(?:char|short|int|long))"
    r'" is undefined'
)
_UNKNOWN_OPTION = re.compile(r"unrecognized option \S+")
QUOTED = "warm: as nvcc, NVRTC reads no header from the working folder: name it with -I"
NOWHERE = (
    "warm: NVRTC looks for a quoted header in the including file's folder and the -I folders "
    "only (never the working folder, as nvcc): check its name; one elsewhere: name its "
    "folder with -I"
)
ANGLED = (
    "warm: NVRTC has no host compiler's headers (<cstdint>, <cmath>, <vector>...), which "
    "nvcc has: include CUDA's own (<cuda/std/cstdint>, <cuda/std/cmath>...) or build with "
    "--compiler nvcc; a header of yours: name its folder with -I"
)
DECLARED = (
    "warm: NVRTC declares printf and CUDA's math functions itself, without <stdio.h> or "
    "<math.h> (which it lacks): drop that #include, or build with --compiler nvcc as PyCUDA does"
)
HOST_NAME = (
    "warm: NVRTC reads none of the host headers nvcc's cuda_runtime.h brings (INFINITY, "
    "M_PI, INT_MAX, int64_t...): --compiler nvcc builds this source as nvcc does"
)
UNKNOWN_OPTION = "warm: NVRTC takes its own options, not nvcc's: --compiler nvcc takes nvcc's"
# A C++ header's overloads given C linkage: included inside `extern "C" { }`, as PyCUDA's
# SourceModule wraps a source (`<cuda_fp16.h>`: 40 errors, none naming the wrap).
_C_LINKAGE = re.compile(r'more than one instance of overloaded function "[^"\n]*" has "C" linkage')
C_LINKAGE = (
    'warm: C++ declarations (overloads: cuda_fp16.h\'s...) inside extern "C" { }, which '
    "PyCUDA's SourceModule wraps a source in: pass no_extern_c=True and declare each kernel "
    'extern "C" __global__ (a block in the source itself: move them, or their #include, out '
    "of it)"
)


def hint(log: str, options: Sequence[str] = (), folder: str = "") -> str:
    """The hint lines for a failed program's `log` ("" where none applies); `options`, its
    kernels' as they name them, whose `-I` folders that are none here are named where a header
    was not found; `folder`, the one they were keyed in (else the working folder), where a
    quoted header NVRTC did not find is looked for, and their relative folders."""
    hints = []
    if _CANNOT_OPEN in log:
        shown = {(m.group(2), m.group(1)) for m in _INCLUDE_SHOWN.finditer(log)} or {('"', "")}
        forms = {form for form, _ in shown}
        quoted = [name for form, name in shown if form == '"' and name]
        here = [os.path.isfile(os.path.join(folder, name)) for name in quoted]
        elsewhere = NOWHERE if quoted and not any(here) else QUOTED  # (none here)
        declared = {name for form, name in shown if form == "<"} <= _DECLARED
        angled = DECLARED if declared else ANGLED
        hints += [text for form, text in (('"', elsewhere), ("<", angled)) if form in forms]
        hints += no_include_folders(options, folder)
    if _HOST_NAME.search(log):
        hints.append(HOST_NAME)
    if _UNKNOWN_OPTION.search(log):
        hints.append(UNKNOWN_OPTION)
    if _C_LINKAGE.search(log):
        hints.append(C_LINKAGE)
    return "".join(f"\n{text}" for text in hints)
