"""`rt.can_build(kernel)`'s answer (README's "the workload contract"): whether a launch of the
kernel would raise `ToolchainError`, asked before any launch so that a workload takes its
fallback. A kernel a compiler here keys is buildable (a failed compile is no ToolchainError);
where none is here, the bundle's build is: the answer is then that build loaded, as a launch
would load it (once; a damaged blob, or one the loader refuses, is no build served, and the
launch would ask for a compiler). It holds no state and prints nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warmcli.errors import ToolchainError

if TYPE_CHECKING:
    from warmcli.kernel import Kernel
    from warmcli.runtime.kernel_cache import KernelCache


def can_build(kernels: KernelCache, kernel: Kernel) -> bool:
    """Whether a launch of `kernel` on the device of `kernels` raises no `ToolchainError`."""
    try:  # asked, not launched: no refusal of the pass (`KernelCache.refused`)
        key = kernels.key(kernel)
        if kernels.lookup.keyed_here(key) or kernels.loaded(kernel) or _compiles(kernels, kernel):
            return True
        kernels.get(kernel)  # no compiler here: the bundle's build, loaded as a launch would
    except ToolchainError:
        return False
    return True


def _compiles(kernels: KernelCache, kernel: Kernel) -> bool:
    """Whether a compiler here builds `kernel`'s language (a build of another toolchain's
    that the bundle serves, if unusable, is rebuilt by it)."""
    try:
        return bool(kernels.device.compiler(kernel.language).toolchain.identity)
    except ToolchainError:
        return False
