"""What nvcc hands its host compiler (`-Xcompiler`): an include folder or header the key sees.

nvcc preprocesses a kernel's device code with its host compiler and the options given it by
`-Xcompiler` (`--compiler-options`), so a header read there (`-Xcompiler -include,h`, or a
folder `-Xcompiler=-Idir`) changes what the device code is. The key reads include folders
and headers from the kernel's own options only (`warmcli.headers`): one option given alone
after `-Xcompiler` (`-Xcompiler`, `-I/opt/inc`) is read there as it is, any other spelling
(joined by `=`, several by commas or blanks, which nvcc splits at too, a flag whose value
is the next option) is not, and an
edit there was served the old build. `hidden_include` finds those, for nvcc to refuse. This
module holds no state and reads no file.
"""

from __future__ import annotations

from collections.abc import Sequence

from warmcli.kernel_parts import PASSED_INCLUDE_PREFIXES

_HOST_OPTIONS = ("-Xcompiler", "--compiler-options")
# A flag that takes its value from the next option, given alone (`-Xcompiler -include`).
_BARE = ("I", "isystem", "iquote", "idirafter", "include", "imacros", "include-path")


def hidden_include(options: Sequence[str]) -> str | None:
    """The first of `options` that hands nvcc's host compiler an include folder or header in
    a spelling the key does not read (the module doc), or None."""
    for before, option in zip(("", *options), options, strict=False):
        name, joined, value = option.partition("=")
        if before in _HOST_OPTIONS:
            given, alone = option, True
        elif name in _HOST_OPTIONS and joined:
            given, alone = value, False
        else:
            continue
        pieces = given.replace(",", " ").split() or [""]  # nvcc splits at blanks too
        if not any(p.startswith(PASSED_INCLUDE_PREFIXES) for p in pieces):
            continue
        if not alone or len(pieces) > 1 or pieces[0].lstrip("-") in _BARE:
            return f"{before} {option}" if alone else option
    return None
