"""What a kernel cache keeps of a kernel its batch compiled (`warmcli.runtime.kernel_cache`):
a `Built`, its `KernelRecord` (the row the bundle will hold: key, symbol, hash, toolchain, key
components, log, time, size) and its binary, and, where the group kept PTX, the same kernel
built for `compute_XX` under a key of its own (`kept_of`). Imported where a miss compiles: a
serving process never does. Plain records; it owns no state, never compiles nor stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warmcli.kernel import kernel_key, key_components
from warmcli.records import KernelRecord, Record

if TYPE_CHECKING:
    from warmcli.backends.base import Device
    from warmcli.backends.compiler import CompiledGroup, CompileUnit


class Built(Record, frozen=False):
    """A build the cache keeps until it is stored: its record and its binary."""

    record: KernelRecord
    binary: bytes


def kept_of(
    device: Device, unit: CompileUnit, built: CompiledGroup, identity: str
) -> list[tuple[str, Built]]:
    """What the cache of `device` keeps of a unit its group built: its build and, where the
    group kept PTX, the same kernel built for `compute_XX`, each under its key."""
    kernel = unit.kernel
    if kernel.tunes_native:  # keyed with this CPU (`lookup`)
        from warmcli.backends.native import keyed_identity

        identity = keyed_identity(identity)
    record = KernelRecord(
        key=unit.key,
        device=device.id,
        backend=device.backend,
        arch=unit.arch,
        entry=kernel.entry,
        label=kernel.label,
        symbol=built.symbols[unit.key],
        sha256=built.sha256,
        toolchain=identity,
        components=key_components(kernel, unit.arch, identity),
        compile_log=built.log,
        seconds=built.seconds / max(1, len(built.symbols)),
        size=len(built.binary),
    )
    kept = [(unit.key, Built(record, built.binary))]
    if built.ptx:  # the group's PTX, kept as the same kernel built for `compute_XX`
        key = kernel_key(kernel, built.ptx_arch, identity)
        from dataclasses import replace  # on first use: a serving process never compiles

        ptx = replace(
            record,
            key=key,
            arch=built.ptx_arch,
            sha256=built.ptx_sha256,
            components=key_components(kernel, built.ptx_arch, identity),
            size=len(built.ptx),
        )
        kept.append((key, Built(ptx, built.ptx)))
    return kept
