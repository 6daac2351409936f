"""What a kernel cache keeps of a kernel its batch compiled (`warmcli.runtime.kernel_cache`): a
`Built`, its `KernelRecord` (the row the bundle will hold: key, symbol, hash, toolchain, key
components, log, time, size) and its binary, and, where the group kept PTX, the same kernel built
for `compute_XX` under a key of its own (`kept_of`); for an unkeyed kernel (its key this process's
own, `warmcli.unkeyed`), one of a toolchain no bundle holds (`unstorable`: its name over 4,096
characters), or one whose headers (`CHANGED`) or compiler's identity (`SETTINGS`), read again once
it is built in the environment it was queued in, no longer give its key (an edit between its key and
its compile, a `git checkout` during a `warm run`, stored the new header's build under the old
one's key; `NVCC_APPEND_FLAGS` set after nvcc was first asked), why it is never served
(`never_served`, `unkeyed_reason`), and why a tunable's picks are (`tune_unkeyed_reason`,
`unkeyed_tune`). Imported where a miss compiles: a serving process never does. Plain records; its
one state is a bounded memo of those reasons of tunables, by their checksums (which cover their
candidates and headers); it never compiles nor stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warmcli import config
from warmcli.include_options import keyed_in
from warmcli.kernel import Kernel, included_headers, kernel_key, key_components
from warmcli.kernel_parts import key_of
from warmcli.records import KernelRecord, MissExplanation, Record
from warmcli.runtime.tune_spec import MAX_NAME
from warmcli.unkeyed import reason_of

FINGERPRINT = "toolchain:"  # a toolchain's fingerprint row is named so (`warmcli.runtime.persist`)

if TYPE_CHECKING:
    from warmcli.backends.base import Device
    from warmcli.backends.compiler import CompiledGroup, Compiler, CompileUnit
    from warmcli.runtime.tune import Tunable


class Built(Record, frozen=False):
    """A build the cache keeps until it is stored: its record and its binary."""

    record: KernelRecord
    binary: bytes
    never_served: str = ""  # why: its key is this process's own (`warmcli.unkeyed`): not stored


def unkeyed_reason(kernel: Kernel, identity: str) -> str:
    """Why `kernel`, keyed by the toolchain `identity`, is unkeyed here; "" if it is not."""
    return reason_of(included_headers(kernel, identity))


def tune_unkeyed_reason(tunable: Tunable) -> str:
    """Why `tunable`'s picks are never served: a candidate is unkeyed, and its checksum holds
    that candidate's headers digest (`Tunable.checksum`), so its tune keys are this process's
    own; "" where none is."""
    if (why := _TUNE_REASONS.get(tunable.checksum)) is None:  # (a tune reached or measured)
        kernels = tunable.candidates.values()  # (keyed as its checksum keys them: no toolchain)
        why = next((why for kernel in kernels if (why := unkeyed_reason(kernel, ""))), "")
        if len(_TUNE_REASONS) >= _MAX_TUNE_REASONS:
            _TUNE_REASONS.clear()
        _TUNE_REASONS[tunable.checksum] = why
    return why


_TUNE_REASONS: dict[str, str] = {}  # a tunable's checksum -> `tune_unkeyed_reason`'s
_MAX_TUNE_REASONS = 4096


CHANGED = (
    "a header it includes changed between its key and its compile (edited while warm ran): "
    "its build may be of either"
)
SETTINGS = (  # (one that includes no header)
    "its compiler's settings changed between its key and its compile (a variable it reads, "
    "NVCC_APPEND_FLAGS..., set after its toolchain was first asked): not the build it is keyed by"
)


def kept_of(
    device: Device,
    unit: CompileUnit,
    built: CompiledGroup,
    compiler: Compiler,
    identities: dict[int, str],
) -> list[tuple[str, Built]]:
    """What the cache of `device` keeps of a unit its group built: its build and, where the
    group kept PTX, the same kernel built for `compute_XX`, each under its key; the headers and
    the identity of `compiler` (nvcc's: with its `NVCC_APPEND_FLAGS`) read where and as the unit
    was keyed, that identity kept in `identities` by the unit's environment (one for most)."""
    with keyed_in(unit.folder), config.read_in(unit.environment):
        if (identity := identities.get(id(unit.environ))) is None:
            identity = identities[id(unit.environ)] = compiler.toolchain.identity
        return _kept_of(device, unit, built, identity)


def _kept_of(
    device: Device, unit: CompileUnit, built: CompiledGroup, identity: str
) -> list[tuple[str, Built]]:
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
    headers = record.components.get("headers", "")
    why = reason_of(headers) or unstorable(identity)  # (noted)
    if not why and key_of(kernel.content_hash, unit.arch, headers, identity) != unit.key:
        why = CHANGED if headers else SETTINGS  # (read again: not as keyed)
    kept = [(unit.key, Built(record, built.binary, why))]
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
        kept.append((key, Built(ptx, built.ptx, why)))
    return kept


def unstorable(identity: str) -> str:
    """Why no bundle holds a build of the toolchain `identity`, "" if one does: a bundle's rows
    hold 4,096 characters of it (its fingerprint's with `toolchain:` first), and a longer one
    (version lines, as/ld's, cc1's and variables each under 1,024) stored rows warm called
    corrupt. Never stored, then, as an unkeyed build is not."""
    if len(identity) + len(FINGERPRINT) <= MAX_NAME:
        return ""
    return f"its toolchain's name is {len(identity):,} characters, more than a bundle holds"


def unkeyed_tune(tunable: Tunable, found: MissExplanation) -> MissExplanation:
    """`found`, the miss of a tune of `tunable`, saying why it is never served where it is not
    (`tune_unkeyed_reason`; as `warmcli.runtime.shown.changed_headers` says it of a kernel)."""
    if not (why := tune_unkeyed_reason(tunable)):
        return found
    never = f" (never served: a candidate's key cannot cover what its build reads: {why})"
    return MissExplanation(**{**found.as_fields(), "detail": found.detail + never})
