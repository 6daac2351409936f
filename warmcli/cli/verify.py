"""`warm verify`: a bundle's integrity, then (with --workload) a replay that must compile nothing.

Integrity: SQLite's own check, the manifest, every blob against its sha256, every
kernel's blob present, every tune readable, and the signatures (by which key, valid
or not; under WARM_TRUSTED_KEYS every row must be signed by a trusted key). With
`--workload` (or `-m pkg.module`, as `warm run -m` takes it) the workload is replayed
over the bundle: it must compile 0 kernels and measure 0 tunes; each kernel and tune it
missed is named with the reason (text and `--json`). The replay runs in a worker process
(`warmcli.warming.isolation`), so a workload that ends or crashes the process is one line
and exit 2 (an exit function of the workload that crashes its process, or ends it with
`os._exit` of a failing code, is one warning line: the exit code stands). Exit 0 when both
hold, 1 naming what is corrupt or missing, 2 on bad input. The checks are `warmcli.ops.verify`'s
and the replay `warmcli.warming.passes.verify_pass`'s; this module parses and prints, and owns
no state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from warmcli.backends.opening import open_devices
from warmcli.bundle.signing import trusted_keys
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import pinned, readable_bundle, shown_name
from warmcli.cli.common import (
    EXIT_INTERRUPTED,
    AllowReadsOpt,
    ArchOpt,
    BundleOrUrlArg,
    CompilerOpt,
    DeviceOpt,
    EntryOpt,
    JsonOpt,
    NvccOpt,
    QuietOpt,
    emit_json,
    err,
    exit_code,
    exit_interrupted,
    fail,
    guarded,
    holds_nothing,
    out,
    unused_nvcc,
)
from warmcli.cli.render.ops import integrity_json, integrity_renderable
from warmcli.cli.render.run import run_renderable, stats_json
from warmcli.cli.run_pycuda import with_pycuda
from warmcli.cli.streams import workload_output_on_stderr
from warmcli.errors import BundleError
from warmcli.ops.verify import IntegrityReport, check_bundle
from warmcli.warming.crashes import WorkerCrash
from warmcli.warming.isolation import interrupt_on_signals, run_isolated
from warmcli.warming.passes import PassReport, RunReport, verify_pass
from warmcli.warming.shadowed import import_warnings
from warmcli.warming.workload import Workload, load_module, load_workload


def replay(
    path: Path,
    loaded: Workload,
    device: str,
    arch: list[str],
    nvcc: str | None,
    trusted: list[bytes] | None,
    compiler: str | None = None,
    allow_discarded_reads: bool = False,
) -> tuple[PassReport, list[str]]:
    devices = open_devices(device, arch, hint=loaded.device_hint, nvcc=nvcc, compiler=compiler)
    try:
        return verify_pass(
            loaded, devices, path, trusted_keys=trusted, allow_discarded_reads=allow_discarded_reads
        )
    finally:
        for d in devices:
            d.close()


@app.command()
def verify(
    bundle: str | None = BundleOrUrlArg,
    workload: Path | None = typer.Option(
        None, "--workload", "-w", help="Also replay this workload: it must compile nothing."
    ),
    module: str | None = typer.Option(
        None,
        "--module",
        "-m",
        help="Replay a workload module instead (pkg.module), as warm run -m runs it.",
    ),
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    entry: str = EntryOpt,
    nvcc: str | None = NvccOpt,
    compiler: str | None = CompilerOpt,
    allow_discarded_reads: bool = AllowReadsOpt,
    explain_misses: bool = typer.Option(
        False,
        "--explain-misses",
        help="One line per miss: which part of its key differs (always shown now; kept for "
        "scripts).",
    ),
    as_json: bool = JsonOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Check the bundle's integrity; with --workload (or -m), replay it over the bundle too.

    A workload takes no arguments (its sys.argv holds only its path): give it settings in
    environment variables, or warm a module of your own that sets them and calls it."""
    unused_nvcc(nvcc, compiler)
    if workload is not None and module is not None:
        fail("give a workload file (--workload) or -m MODULE, not both")
    if workload is None and module is None:  # the replay's options: never silently dropped
        given = {
            "--device": device != "auto",
            "--arch": bool(arch),
            "--entry": entry != "workload",
            "--nvcc": nvcc is not None,
            "--compiler": compiler is not None,
            "--allow-discarded-reads": allow_discarded_reads,
        }
        for flag in (f for f, on in given.items() if on):
            fail(f"{flag} goes with --workload or -m (the replay): integrity alone takes none")
    path = readable_bundle(bundle)
    trusted = guarded(trusted_keys)
    given = workload is not None or module is not None
    integrity = guarded(lambda: _integrity(path, trusted, given))
    integrity.path = shown_name(bundle, path)  # a URL, not its local copy
    if (workload is None and module is None) or not integrity.ok:
        raise typer.Exit(_report(path, integrity, None, as_json, quiet))

    def worker() -> int:
        interrupt_on_signals()  # a stop the workload catches (pytest's) still stops the replay

        def replayed_here() -> tuple[PassReport, list[str]]:
            return with_pycuda(False, bool(arch), loaded_and_replayed)  # (GPU-less: autoinit)

        def loaded_and_replayed() -> tuple[PassReport, list[str]]:
            with workload_output_on_stderr(as_json):  # stdout keeps the one JSON object
                read, loaded = pinned(  # the caller's bundle, though the workload moves
                    path,
                    lambda: (
                        load_module(module, entry, gpu_less=bool(arch))
                        if module is not None
                        else load_workload(workload or "", entry, gpu_less=bool(arch))
                    ),
                )
                unserved = [a for a in arch if a[-1:] in ("a", "f")]  # `--arch sm_90a`
                if unserved:
                    from warmcli.backends.cuda.arch import no_gpu_keys  # (a CUDA device's)

                    # (none for `compute_90a`: replay refuses it, never a blank warning first)
                    unserved = [f"{a}: {why}" for a in unserved if (why := no_gpu_keys(a))]
                for line in [*import_warnings("", None if module else loaded.path), *unserved]:
                    err.print(f"warm: warning: {line}", markup=False, highlight=False)
                return replay(
                    read, loaded, device, arch, nvcc, trusted, compiler, allow_discarded_reads
                )

        replayed = guarded(replayed_here)
        return _report(path, integrity, replayed, as_json, quiet)

    # The replay runs in a worker process, as `warm run`'s passes do: a workload that ends
    # the process itself (`os._exit`) or crashes it is one line and exit 2, never silence.
    outcome = run_isolated(
        lambda: exit_code(worker),
        output=lambda: workload_output_on_stderr(as_json),  # its exit functions' too
        on_exit_end=lambda line: err.print(line, markup=False, highlight=False),
    )
    holds_nothing()  # the worker replayed and printed (reaped at this process's end)
    if isinstance(outcome, WorkerCrash):
        if outcome.interrupted:
            exit_interrupted()
        fail(f"{outcome.what} during {outcome.during or 'loading the workload'}")
    if outcome == EXIT_INTERRUPTED:  # the worker stopped for Ctrl-C before printing anything
        exit_interrupted()
    raise typer.Exit(outcome)


def _integrity(path: str, trusted: Any, workload_given: bool) -> IntegrityReport:
    """`check_bundle`'s report; a Python file given as the bundle with no workload (`warm
    verify w.py`, as `warm run w.py` takes its workload) is told how to give both."""
    try:
        return check_bundle(path, trusted)
    except BundleError as exc:
        python = str(path).endswith(".py") and "(not an SQLite file)" in str(exc)
        if workload_given or not python:
            raise
        raise BundleError(f"{exc}: to replay it, warm verify BUNDLE --workload {path}") from None


def _report(
    path: Path,
    integrity: IntegrityReport,
    replayed: tuple[PassReport, list[str]] | None,
    as_json: bool,
    quiet: bool,
) -> int:
    """Print the verdict (integrity, then the replay's tables and misses); its exit code."""
    missing = replayed[1] if replayed else []
    doc: dict[str, Any] = {
        "bundle": integrity.path,
        "integrity": integrity_json(integrity),
        "verified": integrity.ok and not missing,
        "missing": missing,
    }
    if as_json:
        if replayed:
            report = replayed[0]
            doc.update(mode=report.mode, seconds=report.seconds, **stats_json(report.total))
            doc["explanations"] = [m.as_dict() for m in report.misses]
            doc["never_served"] = report.never_served  # built in each process: no miss
        emit_json(doc)
    else:
        out.print(integrity_renderable(integrity))
        if replayed:
            report = replayed[0]
            shown = RunReport(path, list(report.per_device), [report], missing=missing)
            out.print(run_renderable(shown, tables=not quiet), soft_wrap=True)  # names each miss
    return 0 if doc["verified"] else 1
