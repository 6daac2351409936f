"""The host C compiler's own include folders: where it finds `<stdlib.h>`, after a kernel's.

`cc -E -v` prints them (`#include <...> search starts here:`), run with `CPATH` and
`C_INCLUDE_PATH` unset (their folders are keyed as a kernel's own), once per compiler binary on a
machine: remembered in warm's home beside its version line (`toolchain.remembered`, by the binary's
stamp and `GCC_EXEC_PREFIX`/`COMPILER_PATH`, which key the compiler too), so a hot start runs no
compiler for them (but for a wrapper script, asked in each process as its version line is: the
compiler it runs may change while its stamp does not). The host compiler tells the key how to ask
for them (`kernel.CC_SYSTEM`, by its toolchain's identity); this module is imported where a key
first asks: a kernel's include folders lack a header it includes (`warmcli.system_shadows`). A
compiler that does not say (another than GCC or Clang: remembered so too; one that fails, asked
again in the next process) names none: such a kernel keys as before. State: the per-process memo of
each compiler's folders.
"""

from __future__ import annotations

import functools
import os

from warmcli import config
from warmcli.backends.toolchain import remembered
from warmcli.errors import ToolchainError

_SEARCH = "cc -E -v includes"  # what `toolchains.json` remembers them under
_UNSET = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH")


@functools.cache
def system_folders(cc: str) -> tuple[str, ...]:
    """`cc`'s own `<...>` folders, in its order; () where it does not say."""
    # Asked, and remembered, under the variables that move cc's own folders as they key it
    # (`GCC_EXEC_PREFIX=/opt/gcc/lib/gcc/`: its `include`): else another's were kept.
    named = "".join(f"; {k}={v}" for k, v in config.compiler_programs().items())
    from warmcli.wrapper_script import script_digest  # (a probe's: imported with the toolchain)

    try:  # a wrapper script's asked in each process, as its version: what it runs may change
        if script_digest(cc):  # (`exec "$REAL_CC" "$@"`) while its own stamp does not
            said = _search_list(_SEARCH, cc)
        else:
            said = remembered(_SEARCH + named, cc, os.stat(cc), _search_list).version
    except (OSError, ToolchainError):
        return ()
    return tuple(said.split("\n")) if said else ()


def _search_list(name: str, cc: str) -> str:
    """The folders `cc -E -v` lists for `<...>`, joined by line breaks; "" where it answers
    and lists none (remembered so: a compiler that never says is not asked again in every
    process, as it was); ToolchainError where it fails."""
    import subprocess  # on first use: a hot start finds them remembered

    unset = [w for name in _UNSET for w in ("-u", name)]  # (`env`: warm's own left as it is)
    command = ["env", *unset, cc, "-E", "-v", "-x", "c", os.devnull]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainError(f"{name}: {exc}") from exc
    lines = out.stderr.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("#include <...>")), None)
    folders = []
    for line in lines[start + 1 :] if start is not None else []:
        if not line.startswith(" "):  # `End of search list.`
            break
        folder = line.strip().removesuffix(" (framework directory)")
        if folder and "\n" not in folder:
            folders.append(os.path.normpath(folder))
    if out.returncode != 0:
        raise ToolchainError(f"{name}: {cc} -E -v failed")
    return "\n".join(folders)
