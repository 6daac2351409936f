"""Kernels whose blob is not what their row says: never served, so one verdict.

A host kernel is served by `dlsym` of its row's symbol in its blob; where the blob's
dynamic symbol table (`warmcli.backends.host.binary.exported_symbols`, read from its ELF
headers, never loaded) lacks that name, production misses and compiles it, and `warm
check` calls it not servable (`binary`). A CUDA PTX row (arch `compute_XX`) is served to
the driver's JIT: its blob must be PTX of that arch (`warmcli.backends.cuda.ptx.not_ptx_of`;
a cubin's blob, another arch's PTX, is never JIT-ed on the GPUs it is kept for); a cubin row
(arch `sm_XX`) must hold a cubin of that SM (`not_cubin_of`: PTX there is a row of the wrong
kind, served by no rule for it; a cubin cut short, its ELF header's tables past the blob's
length, loads nowhere).
`unexported` names each such kernel so `warm
verify` calls the bundle unsound and `warm clean` removes it as corrupt (a row pointed at
another kernel's blob, a symbol edited with its entry). Blobs are read one at a time, in
the order of their sha256 (a batch's blob, shared by its kernels, once; a CUDA blob's first
bytes, its sha256 checked only where they say it is not of its kind); a blob that
cannot be read (missing, failing its sha256) or is no ELF this machine reads is left to the
checks that name it; a sound one over the size warm loads (`MAX_LOADED_BYTES`), which
`Bundle.blob` refuses, so production never serves (it compiles the kernel), is named here,
as `warm check` names it. It owns no state, never writes and
never prints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from warmcli.backends.cuda.ptx import KIND_BYTES, not_cubin_of, not_ptx_of
from warmcli.backends.host.binary import exported_symbols
from warmcli.bundle.blobs import MAX_LOADED_BYTES, head, sound
from warmcli.bundle.store import Bundle, BundleError
from warmcli.records import KernelRecord, where


def unexported(bundle: Bundle) -> Iterator[tuple[KernelRecord, str]]:
    """Each well-formed host kernel whose blob's exported names lack its symbol, and each
    CUDA row whose blob is not of its kind and arch (PTX, a cubin), and each of either whose
    blob, sound, is over the size warm loads, and why."""
    sha, names = "", None
    big_sha, too_large = "", None  # the last blob's `_too_large`: rows come in sha256 order
    is_sound = _LastSound(bundle)  # one blob's sha256 checked once, however many rows name it
    verdicts: dict[str, str | None] = {}  # the last blob's: arch -> why not
    for k in bundle.each_kernel(on_error=lambda *_: None, order="sha256, key"):
        if k.backend not in ("cuda", "host"):
            continue
        if k.sha256 != big_sha:
            big_sha, too_large = k.sha256, _too_large(bundle, k.sha256, is_sound)
            verdicts.clear()  # rows come in sha256 order: one blob's archs held
        if k.backend == "cuda":
            if k.arch not in verdicts:
                verdicts[k.arch] = _cuda_problem(bundle, k, is_sound)
            why = verdicts[k.arch]
            if why or too_large:
                blob = f"blob {k.sha256[:16]}" + (f": {why}" if why else f" {too_large}")
                yield k, f"kernel {k.label} ({where(k.device, k.arch)}): {blob}"
            continue
        if too_large:
            blob = f"blob {k.sha256[:16]} {too_large}"
            yield k, f"kernel {k.label} ({where(k.device, k.arch)}): {blob}"
            continue
        if k.sha256 != sha:
            sha, names = k.sha256, None
            with contextlib.suppress(BundleError):  # missing, corrupt, too large: named
                names = exported_symbols(bundle.blob(sha))  # by other checks
        if names is not None and k.symbol not in names:
            yield (
                k,
                (
                    f"kernel {k.label} ({where(k.device, k.arch)}): its binary (blob {sha[:16]}) "
                    f"does not export {k.symbol}"
                ),
            )


class _LastSound:
    """`sound` of the last blob asked about (False where it cannot be read), remembered:
    rows come in sha256 order, so a blob that many rows name, under as many archs, is hashed
    once, not once a row (a 32 MB blob named by 160 rows of made-up archs was hashed 160
    times: verify's time grew with rows times the blob's size, not the file's)."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle, self.sha256, self.held = bundle, "", False

    def __call__(self, sha256: str) -> bool:
        if sha256 != self.sha256:
            try:
                held = sound(self.bundle, sha256)
            except BundleError:
                held = False
            self.sha256, self.held = sha256, held
        return self.held


def _cuda_problem(bundle: Bundle, k: KernelRecord, is_sound: _LastSound) -> str | None:
    """Why a CUDA row's blob is not of its kind: PTX of its arch for a PTX row
    (`compute_XX`), a cubin of its SM for a cubin row; None when it is, or when the blob
    cannot be read (missing, corrupt, too large: named by other checks). Told by its first
    `KIND_BYTES` and its length (`head`: they give the verdict the whole gives), its sha256
    checked a chunk at a time (`sound`) only to confirm a wrong kind: a blob over the size
    warm loads too."""
    if (start := head(bundle, k.sha256, KIND_BYTES)) is None or not (why := _kind(*start, k.arch)):
        return None
    return why if is_sound(k.sha256) else None


def _too_large(bundle: Bundle, sha256: str, is_sound: _LastSound) -> str | None:
    """Why a sound blob (its sha256 checked a chunk at a time) is never served: over the
    `MAX_LOADED_BYTES` warm loads (`Bundle.blob` refuses it unread: production misses its
    kernels and compiles them, `warm check` names them); None otherwise (a blob failing its
    sha256 or missing is named by other checks)."""
    if (start := head(bundle, sha256, 0)) is None or start[1] <= MAX_LOADED_BYTES:
        return None
    if not is_sound(sha256):
        return None
    return (
        f"is {start[1]} bytes, over the limit of {MAX_LOADED_BYTES} bytes warm loads: never "
        "served (production compiles it)"
    )


def _kind(data: bytes, length: int, arch: str) -> str | None:
    if arch.startswith("compute_"):
        return not_ptx_of(data, arch)
    return not_cubin_of(data, arch, length)
