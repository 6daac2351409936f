"""`rt.can_build(kernel)`'s answer (README's "the workload contract"): whether a launch of the
kernel would raise `ToolchainError`, asked before any launch so that a workload takes its
fallback. A kernel a compiler here keys is buildable (a failed compile is no ToolchainError);
where none is here, the bundle's build is: the answer is then that build loaded, as a launch
would load it (once; a damaged blob, or one the loader refuses, is no build served, and the
launch would ask for a compiler). A `False` is noted (`CANNOT_BUILD`, once a pass with its
count): a run whose workload took its fallback everywhere, a CI machine without cc, stored
nothing and called the empty bundle complete with no word of why. It holds no state and
prints nothing."""

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
    except ToolchainError as exc:
        from warmcli.errors import message_of
        from warmcli.execution import process_mode

        mode = process_mode.current_process_mode().value
        process_mode.note_reported(
            f"{CANNOT_BUILD}{kernel.label}) answered False under {mode}: {message_of(exc)}; "
            "what the workload did without it is warmed, that kernel is not"
        )
        return False
    return True


CANNOT_BUILD = "rt.can_build("  # (the note's start: no `__main__` hint for a fallback taken)


def _compiles(kernels: KernelCache, kernel: Kernel) -> bool:
    """Whether a compiler here builds `kernel`'s language (a build of another toolchain's
    that the bundle serves, if unusable, is rebuilt by it)."""
    try:
        return bool(kernels.device.compiler(kernel.language).toolchain.identity)
    except ToolchainError:
        return False
