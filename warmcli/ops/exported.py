"""Kernels whose blob is not what their row says: never served, so one verdict.

A host kernel is served by `dlsym` of its row's symbol in its blob; where the blob's
dynamic symbol table (`warmcli.backends.host.binary.exported_symbols`, read from its ELF
headers, never loaded) lacks that name, production misses and compiles it, and `warm
check` calls it not servable (`binary`). A CUDA PTX row (arch `compute_XX`) is served to
the driver's JIT: its blob must be PTX of that arch (`warmcli.backends.cuda.ptx.not_ptx_of`;
a cubin's blob, another arch's PTX, is never JIT-ed on the GPUs it is kept for).
`unexported` names each such kernel so `warm
verify` calls the bundle unsound and `warm clean` removes it as corrupt (a row pointed at
another kernel's blob, a symbol edited with its entry). Blobs are read one at a time, in
the order of their sha256 (a batch's blob, shared by its kernels, once); a blob that
cannot be read (missing, failing its sha256, over the size served) or is no ELF this
machine reads is left to the checks that name it. It owns no state, never writes and
never prints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from warmcli.backends.cuda.ptx import not_ptx_of
from warmcli.backends.host.binary import exported_symbols
from warmcli.bundle.store import Bundle, BundleError
from warmcli.records import KernelRecord, where


def unexported(bundle: Bundle) -> Iterator[tuple[KernelRecord, str]]:
    """Each well-formed host kernel whose blob's exported names lack its symbol, and each
    CUDA PTX row whose blob is not PTX of its arch, and why."""
    sha, names = "", None
    for k in bundle.each_kernel(on_error=lambda *_: None, order="sha256, key"):
        if k.backend == "cuda" and k.arch.startswith("compute_"):
            data = None
            with contextlib.suppress(BundleError):  # missing, corrupt, too large: named
                data = bundle.blob(k.sha256)  # by other checks
            if data is not None and (why := not_ptx_of(data, k.arch)):
                blob = f"blob {k.sha256[:16]}"
                yield k, f"kernel {k.label} ({where(k.device, k.arch)}): {blob}: {why}"
            continue
        if k.backend != "host":
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
