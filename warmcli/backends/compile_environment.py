"""The part of a compile unit's environment a compile can read (`compiler_reads`).

A unit keeps the whole environment it was queued in (`CompileUnit.queued`), and its compiler
runs in it; but most of it no compiler reads (a workload's step counter, set before each
launch). Units that differ only outside this part share a translation unit (`plan_groups`,
compiled in the first's environment); each is still keyed and stored by its compiler's identity
asked in its own (`runtime.built.kept_of`: ~4 us a cc's, ~13 an nvcc's, as cheap as this).
The part: what the compilers document reading (gcc's `CPATH` and kin, `LIBRARY_PATH`,
`COMPILER_PATH`, `GCC_*`, `TMPDIR`, `SOURCE_DATE_EPOCH`, the dependency outputs, the locale's
messages, `PATH` that finds `as`, `ld`, `cc1`, the loader's `LD_*`, binutils' `GNUTARGET`;
nvcc's `NVCC_*`, `CUDA_*` and what its `nvcc.profile` adds to, `INCLUDES`..., or it hands cicc
and ptxas, `OCG_FLAGS`; NVRTC's), a shell's start-up file (`BASH_ENV`, `ENV`) and a Python
script's variables, warm's own settings (`WARM_*`), and every variable a wrapper script this
process keyed names (`wrapper_script.names_read`: a `WARM_CC` script's `$MYFLAGS`, a `-ccbin`'s,
an `nvcc.profile`'s `$(NAME)`).
Pure: it owns no state (the names scripts read are `wrapper_script`'s); it never reads the
environment itself, only the pairs it is given.
"""

from __future__ import annotations

from warmcli import config
from warmcli.backends.cuda.profile import FROM_ENVIRONMENT, PASSED_ON
from warmcli.include_options import INCLUDE_PATHS
from warmcli.wrapper_script import names_read

# Variables a compile reads by name, those warm already lists for what it keys reused.
READ_NAMES = frozenset(
    {*INCLUDE_PATHS, *config.COMPILER_PROGRAMS, *config.NVCC_FLAGS, *config.CUDA_HOMES,
     *FROM_ENVIRONMENT, *PASSED_ON,
     "OBJC_INCLUDE_PATH", "LIBRARY_PATH", "TMPDIR", "TMP", "TEMP", "SOURCE_DATE_EPOCH",
     "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES", "LANG", "LANGUAGE", "PATH", "BASH_ENV", "ENV",
     "PYCUDA_DEFAULT_NVCC_FLAGS", "GNUTARGET"}
)  # fmt: skip
# And by prefix: gcc's, the locale's, the loader's, nvcc's, CUDA's and NVRTC's, warm's own, a
# compiler launcher's, a Python wrapper script's interpreter's.
READ_PREFIXES = ("GCC_", "LC_", "LD_", "NVCC_", "CUDA_", "NVRTC_", "WARM_", "CCACHE_", "PYTHON")


def compiler_reads(environ: config.Pairs) -> config.Pairs:
    """The pairs of `environ` (a unit's) a compile can read, in its order: two units whose
    environments give the same are built alike in either (all of it where a script named more
    variables than are told apart: `names_read` None)."""
    scripts = names_read()
    if scripts is None:
        return environ
    return tuple(
        pair
        for pair in environ
        if pair[0] in READ_NAMES or pair[0].startswith(READ_PREFIXES) or pair[0] in scripts
    )
