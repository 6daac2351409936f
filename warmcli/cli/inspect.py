"""`warm stats` and `warm devices`: what a bundle holds (read in one snapshot: a writer's
commit waits until all is read), and what this machine offers (its devices, whether
pycuda is there, and the compilers warm would use).

The reading is `warmcli.ops.stats`' and the bundle's (each compile's time given once among the
rows it made: `warmcli.bundle.compiles`), the look `warmcli.cli.render`'s; this module parses,
opens read-only and prints. It owns no state and never writes a bundle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import typer

from warmcli import config
from warmcli.bundle.compiles import shared_compiles
from warmcli.bundle.consistency import require_consistent
from warmcli.bundle.counts import HeldCounts
from warmcli.bundle.location import is_url, shown
from warmcli.bundle.store import Bundle
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import readable_bundle
from warmcli.cli.common import (
    BundleOrUrlArg,
    CompilerOpt,
    JsonOpt,
    NvccOpt,
    emit_json,
    fail,
    guarded,
    holds_nothing,
    out,
    unused_nvcc,
)
from warmcli.cli.json_stream import held, stream_json
from warmcli.cli.render import compiler_line, line
from warmcli.cli.render.stats import stats_renderable
from warmcli.cli.render.summary import summary_renderable
from warmcli.cli.render.tune_line import tune_bytes, tune_line
from warmcli.ops.stats import held_kernels, read_once, summarise
from warmcli.printable import cut, lone_surrogate, printable
from warmcli.records import KernelRecord

NAMED_TUNES = 20_000  # a larger bundle streams in SQL's order, kernels not named by candidates


def stats_stream(
    bundle: Bundle,
    operation: str | None = None,
    *,
    as_text: bool = False,
    live: contextlib.ExitStack | None = None,
) -> dict[str, Any]:
    """The `warm stats --json` document of an open bundle (the tunes of one `operation`, if
    given), its kernels and tunes read as they are consumed (each tune as JSON text, for
    `stream_json`, if `as_text`: those of a large bundle read and written by several
    processes, in the same order, `warmcli.bundle.listing`, each range's as bytes written
    as they are, `tune_bytes`; that listing is closed, its
    processes stopped, when `live` ends: before the bundle closes, however it ends)."""
    from warmcli.cli.render.held_tunes import briefed
    from warmcli.cli.render.stats import kernel_order, stats_document, tune_order, tune_shown

    named: dict[str, set[str]] = {}
    listed: set[str] | None = None  # the keys of the kernels listed, where all are held
    ours: set[str] | None = None  # those `operation`'s candidates name, where all are read
    only: Callable[[KernelRecord], bool] | None = None  # which kernels are listed (None: all)
    kernels: Iterable[tuple[KernelRecord, tuple[float, float]]] = bundle.each_kernel_used()
    tunes: Iterable[Any] = bundle.each_tune(operation)
    tune: Callable[[Any], Any] = tune_line if as_text else tune_shown  # (a table's part)
    large = _streamed(bundle)
    lines = None
    if large and as_text and not operation:
        from warmcli.bundle.listing import converted_tunes  # a large listing only

        lines = converted_tunes(bundle, tune_bytes)
        if lines is not None and live is not None:
            live.callback(lines.close)
    if lines is not None:  # read and written by several processes, in the same order
        tunes, tune = lines, _as_given
    if not large:
        # Small enough to hold: kernels named by their candidates, numbers sorted as numbers.
        kernels = sorted(kernels, key=lambda ku: kernel_order(ku[0]))
        listed = {k.key for k, _ in kernels}  # (a candidate naming no kernel held: not kept)
        # each tune read once and converted as it is read, then sorted: never every tune's
        # candidates held (a long line deflated until it is written; a table's until shown)
        hold = held if as_text else briefed(every_candidate=operation is not None)
        made_of = lambda t: (tune_order(t), hold(tune(t)))  # noqa: E731
        ordered, ours = read_once(bundle, operation, listed, named, made_of)
        ordered.sort(key=lambda p: p[0])
        tunes, tune = (doc for _, doc in ordered), _as_given
    if operation is not None:  # its candidates' kernels only, each build of them
        ours = held_kernels(bundle, operation, listed) if ours is None else ours
        # (read in key order: of several corrupt rows, the one named is the same every run)
        made = {_made(k) for k in map(bundle.kernel, sorted(ours)) if k is not None} - {None}
        # every kernel read, the operation's shown: each with the share it has in the whole list
        only = lambda k: k.key in ours or _made(k) in made  # noqa: E731
    return stats_document(
        bundle.manifest(),
        bundle.fingerprints(),
        kernels,
        tunes,
        shared=HeldCounts((((sha,), n) for sha, n in bundle.blob_users()), of=bundle.fspath),
        compiles=shared_compiles(bundle),
        named=named,
        tune=tune,
        format_version=bundle.format_version(),
        shown=only,
    )


def _as_given(line: Any) -> Any:
    return line


def _made(kernel: KernelRecord) -> object:
    """What a kernel is whoever built it, for whatever arch (its key's `kernel` part: source,
    entry, letters, options, defines): a candidate's PTX and another compiler's build of it
    are that candidate's too. None where a row names none."""
    return kernel.components.get("kernel")


HELD_SHOWN = 20  # operations named when the one asked for is not held


@app.command()
def stats(
    bundle: str | None = BundleOrUrlArg,
    operation: str | None = typer.Option(None, "--explain", help="Only this tunable operation."),
    as_json: bool = JsonOpt,
) -> None:
    """What a bundle holds: kernels per device and arch, every tune with all candidates."""
    path = readable_bundle(bundle)
    given = bundle or config.bundle()  # a URL is named as given, its copy after it
    url = shown(given) if given is not None and is_url(given) else None
    with guarded(lambda: Bundle.open(path)) as opened:
        guarded(lambda: _stats(path, opened, operation, as_json, url))
    holds_nothing()  # the bundle is closed, all is printed: no teardown needed


def _stats(
    path: Path, bundle: Bundle, operation: str | None, as_json: bool, url: str | None
) -> None:
    """Every entry streams (`--json`), or a large bundle is summarised: never all in memory.
    The bundle is named by its `url`, if given one (then `path`, its local copy, after it).
    What is shown is read in one snapshot (a writer's commit waits for it), which ends
    before it is written out, but where a large listing streams (`--json`): then after."""
    shown, copy = (url, str(path)) if url is not None else (str(path), None)
    require_consistent(bundle)  # what its indexes say is what its rows say
    if operation is not None and (lone_surrogate(operation) or not bundle.has_operation(operation)):
        names = bundle.operations(HELD_SHOWN + 1)
        held = ", ".join(printable(cut(n)) for n in names[:HELD_SHOWN])
        held += ", ..." if len(names) > HELD_SHOWN else ""
        named = cut(operation)  # (a name of 100,000 characters: cut, as every line cuts one)
        fail(f"{shown}: no tunes for operation {named!r} (it holds: {held or 'none'})")
    if as_json:  # a reader gone or Ctrl-C: the listing's processes stop, then the bundle closes
        with contextlib.ExitStack() as live:
            live.enter_context(bundle.snapshot())  # ends last: after the listing stops
            tunes = stats_stream(bundle, operation, as_text=True, live=live)
            doc = {"bundle": shown, **({"copy": copy} if copy else {}), **tunes}
            if not _streamed(bundle):  # all read already: the snapshot ends before writing
                doc = {k: iter(list(v)) if isinstance(v, Iterator) else v for k, v in doc.items()}
                live.close()
            stream_json(doc)
        return
    with bundle.snapshot():
        from warmcli.cli.render.held_tunes import Held
        from warmcli.cli.render.stats import tune_shown

        # (docs, not records; their candidates deflated until shown)
        summary = summarise(bundle, operation=operation, shown=lambda t: Held(tune_shown(t)))
        if summary is None:
            doc = {
                key: list(v) if isinstance(v, Iterator) else v
                for key, v in stats_stream(bundle, operation).items()
            }
    if summary is not None:  # too large to list: counts by SQL, a few tunes shown
        parts = summary_renderable(shown, summary, copy)
    else:
        parts = stats_renderable(shown, doc, every_candidate=operation is not None, copy=copy)
    for part in parts:  # each made as it is printed: a tune's table of 1,000 at a time
        out.print(part)


def _streamed(bundle: Bundle) -> bool:
    """Whether `stats_stream` reads the bundle as its entries are written (a large one)."""
    return max(bundle.count("tunes"), bundle.count("kernels")) > NAMED_TUNES


PYCUDA_MISSING = "pycuda is not installed: no CUDA device can be listed or used (extra: cuda)"


@app.command()
def devices(
    nvcc: str | None = NvccOpt, compiler: str | None = CompilerOpt, as_json: bool = JsonOpt
) -> None:
    """The devices warm can use here (the host, and every CUDA device PyCUDA sees), and the
    compiler each backend builds with: its path, its version and why it was chosen."""
    unused_nvcc(nvcc, compiler)
    from warmcli.backends.machine import inventory  # numpy and toolchains: `devices` only
    from warmcli.cli.render.ops import devices_json, devices_table

    machine = guarded(lambda: inventory(nvcc=nvcc, compiler=compiler))
    compilers = guarded(lambda: machine.compilers)  # a compiler named wrong: one line, exit 2
    if as_json:
        emit_json(devices_json(machine))
        return
    out.print(devices_table(machine.devices))
    if not machine.pycuda:
        out.print(line(PYCUDA_MISSING, style="yellow"))
    elif machine.no_gpu:
        out.print(line(f"no CUDA device: {machine.no_gpu}", style="yellow"))
    for info in compilers:
        out.print(compiler_line(info), markup=False, highlight=False, soft_wrap=True)
