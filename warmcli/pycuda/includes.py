"""`SourceModule`'s list arguments as PyCUDA takes them, and PyCUDA's own include folder,
given to a module whose source includes its headers.

`options` must be a list: PyCUDA's `compile` copies it (`options[:]`) and extends the copy,
which a tuple, a set, a dict or a generator fails (a generator read by a check would leave
no option; a set's order, hence the key, changes with each process's hash seed).
`include_dirs` may be any iterable (PyCUDA's `[*include_dirs, ...]`), read once, here.
`options=None` is PyCUDA's `pycuda.compiler.DEFAULT_NVCC_FLAGS` (a list a script may
extend; the pre-build's stand-in holds one), or `PYCUDA_DEFAULT_NVCC_FLAGS`, whence it comes.
One `str` for either (PyCUDA: one option per character) and an entry that is no text
(`None`, bytes) are refused, naming the call.

PyCUDA's `compile` appends `pycuda/cuda` (`_find_pycuda_include_path`) to every
module's `include_dirs`, so `#include <pycuda-complex.hpp>` needs none of the user's.
warm appends it, last as PyCUDA does, only to a module whose source includes one of
PyCUDA's headers by name (`pycuda-*.hpp`): the folder's path is then in the kernel's
options and key, and no other kernel's key depends on where (or whether) pycuda is
installed. pycuda is found on `sys.path` without being imported (the GPU-less
stand-ins may stand in its place in `sys.modules`). No state; nothing is written.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from warmcli import config
from warmcli.errors import PyCudaError

_OWN_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](pycuda-[\w.-]+\.hpp)[>"]', re.MULTILINE)


def list_arguments(options: Any, include_dirs: Any) -> tuple[list[str] | None, list[str]]:
    """`options` (None: PyCUDA's default) and `include_dirs` as lists, else refused, named."""
    listed: dict[str, list[Any] | None] = {"options": None, "include_dirs": []}
    for arg, value in (("options", options), ("include_dirs", include_dirs)):
        if value is None:
            continue
        try:
            entries = [value] if isinstance(value, str) else list(value)
        except TypeError:
            raise PyCudaError(f"SourceModule({arg}={value!r}): a list of text") from None
        kinds = (str, os.PathLike) if arg == "include_dirs" else str
        bad = [e for e in entries if not isinstance(e, kinds)]  # None, bytes: no option
        unlisted = arg == "options" and not isinstance(value, list)  # PyCUDA: options[:]
        if bad or isinstance(value, str) or unlisted:
            why = f"{bad[0]!r} is no text" if bad else f"a list, one each: {arg}={entries!r}"
            raise PyCudaError(f"SourceModule({arg}={value!r}): {why}")
        listed[arg] = entries
    return listed["options"], listed["include_dirs"] or []


def default_options() -> list[str]:
    """PyCUDA's options of a module made with `options=None`: its compiler's list, as the
    script may have left it, where pycuda's compiler (or its stand-in) is imported."""
    flags = getattr(sys.modules.get("pycuda.compiler"), "DEFAULT_NVCC_FLAGS", None)
    return list(flags) if isinstance(flags, list) else config.pycuda_nvcc_flags()


def pycuda_include_folder() -> str | None:
    """`pycuda/cuda` of the pycuda package on `sys.path`, or None where there is none."""
    spec = importlib.machinery.PathFinder.find_spec("pycuda")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = os.path.join(os.path.abspath(location), "cuda")
        if os.path.isdir(folder):
            return folder
    return None


def own_include_dirs(source: str, include_dirs: Sequence[str]) -> list[str]:
    """PyCUDA's include folder when `source` includes one of its headers (else none);
    without pycuda, a header the given folders do not hold is refused, named."""
    headers = _OWN_HEADER.findall(source)
    if not headers:
        return []
    folder = pycuda_include_folder()
    if folder is not None:
        return [folder]
    for header in headers:
        if not any(os.path.isfile(os.path.join(d, header)) for d in include_dirs):
            raise PyCudaError(
                f"SourceModule: the source includes {header}, PyCUDA's own header, which "
                "PyCUDA finds in its include folder: pycuda is not installed here; install "
                "it, or pass the folder holding the header in include_dirs"
            )
    return []
