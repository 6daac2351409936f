"""The macros a kernel's compiler options define or undefine, read from the options' text.

`option_macros` names them (`-DSCALE=2`, `-U NDEBUG`, `--define-macro=N`, and through
`-Wp,` and `-Xpreprocessor`), for `warmcli.backends.sharing`: a kernel that defines or
undoes one of them itself is compiled alone; `macros_named` lists them in order (PyCUDA's
`-D` options made defines count them). Pure functions over text: no state, no
compiler run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Options that define or undefine a macro, as gcc, nvcc and NVRTC spell them: the name
# joined (`-DSCALE=2`, `-USCALE`), after `=` (`--define-macro=SCALE`) or in the next option;
# and the wrappers that hand the preprocessor an option (`-Wp,-DX`, `-Xpreprocessor -DX`).
MACRO_FLAGS = ("-D", "-U", "--define-macro", "--undefine-macro")
_OPTION_MACRO = re.compile(r"[\s=]*([A-Za-z_]\w*)")


def preprocessor_options(options: Sequence[str]) -> list[str]:
    """`options` with `-Wp,a,b` split into its options and `-Xpreprocessor` dropped."""
    flat: list[str] = []
    for option in options:
        if option.startswith("-Wp,"):
            flat.extend(option[4:].split(","))
        elif option != "-Xpreprocessor":
            flat.append(option)
    return flat


def macros_named(options: Sequence[str]) -> list[str | None]:
    """Every macro a `-D`/`-U` option of `options` names (joined, after `=`, or in the
    next option), in order; None for one whose name is not read."""
    names: list[str | None] = []
    for before, option in zip(("", *options), options, strict=False):
        if before in MACRO_FLAGS:
            text = option
        elif option.startswith(("--define-macro=", "--undefine-macro=")):
            text = option.split("=", 1)[1]
        elif option.startswith(("-D", "-U")) and option not in MACRO_FLAGS:
            text = option[2:]
        else:
            continue
        name = _OPTION_MACRO.match(text)
        names.append(name.group(1) if name else None)
    return names


def option_macros(options: Sequence[str]) -> set[str] | None:
    """The macros `options` define or undefine (`-DSCALE=2`, `-U NDEBUG`), or None where
    one such option's name is not read (then any name may be one)."""
    names = macros_named(options)
    return None if None in names else set(names)  # type: ignore[arg-type]
