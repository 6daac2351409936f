"""`warm run`: the two warming passes, the bundle written, then the verify pass.

The run happens in a worker process (`warmcli.warming.isolation`): a tune candidate that
crashes it is excluded and the run starts again; a workload that crashes outside
tuning is one line and exit 2. SIGINT, SIGTERM or SIGHUP stops every compiler at once,
keeps what was stored, says how much and exits 130. `--dask` fans the run out
(`warmcli.cli.run_dask`, imported only then; `--key`'s checks, `warmcli.cli.sign`, as well).
Once the worker has returned its code, this process
holds nothing and ends without the interpreter's teardown (`common.holds_nothing`). A
worker that died (killed, as by the OOM killer, or after an interrupt it did not stop for)
in the middle of a store left its journal: it is rolled back (or, never synced, removed)
here first, so the bundle is what the one line says it holds, no journal beside it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from warmcli import config
from warmcli.backends.base import Device
from warmcli.backends.batch import JOBS_PER_CPU
from warmcli.backends.compiler import DEFAULT_COMPILE_TIMEOUT
from warmcli.backends.opening import open_devices
from warmcli.bundle.file import recover
from warmcli.bundle.lock import write_lock
from warmcli.bundle.replacing import is_empty_file, remove_new
from warmcli.bundle.signing import trusted_keys
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import bundle_to_write, pinned
from warmcli.cli.common import (
    AllowReadsOpt,
    ArchOpt,
    BundleOpt,
    CompilerOpt,
    DeviceOpt,
    EntryOpt,
    JsonOpt,
    NvccOpt,
    QuietOpt,
    SignKeyOpt,
    VerboseOpt,
    emit_json,
    err,
    exit_code,
    fail,
    guarded,
    holds_nothing,
    interrupted,
    out,
    passed_on,
    unused_nvcc,
)
from warmcli.cli.render import compiler_line
from warmcli.cli.render.run import folded_notes, run_json, run_renderable
from warmcli.cli.run_pycuda import with_pycuda
from warmcli.cli.streams import workload_output_on_stderr
from warmcli.errors import BundleError, RunInterrupted, WarmError
from warmcli.kernel_parts import cuda_release
from warmcli.printable import printable
from warmcli.runtime.shard import resolve_shard
from warmcli.warming.crashes import CrashedCandidate, WorkerCrash
from warmcli.warming.isolation import interrupt_on_signals, run_isolated
from warmcli.warming.passes import warm_bundle
from warmcli.warming.shadowed import import_warnings
from warmcli.warming.workload import Workload, load_module, load_workload

if TYPE_CHECKING:
    from warmcli.cli.progress import RunProgress


@app.command()
def run(
    workload: Path | None = typer.Argument(
        None, help="The workload file, defining workload(runtime)."
    ),
    module: str | None = typer.Option(
        None,
        "--module",
        "-m",
        help="Run a workload module instead (pkg.module), as python -m would.",
    ),
    bundle: str | None = BundleOpt,
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    entry: str = EntryOpt,
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        help=f"Compiler processes at once [default: the usable CPUs; at most {JOBS_PER_CPU} "
        "per usable CPU].",
    ),
    compile_timeout: float | None = typer.Option(
        None,
        "--compile-timeout",
        min=0.1,
        max=1_000_000,  # (about 11 days: a wait past what the OS can time, inf, is refused)
        help="Seconds before a compiler process is stopped "
        f"[default: {DEFAULT_COMPILE_TIMEOUT:g}].",
    ),
    nvcc: str | None = NvccOpt,
    compiler: str | None = CompilerOpt,
    ptx: str | None = typer.Option(
        None,
        "--ptx",
        help="Keep PTX for this compute_XX [default: the highest --arch built's] for newer GPUs.",
    ),
    no_ptx: bool = typer.Option(False, "--no-ptx", help="Keep cubins only, no PTX."),
    allow_discarded_reads: bool = AllowReadsOpt,
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the verify pass."),
    pycuda: bool = typer.Option(
        False,
        "--pycuda",
        help="An unmodified PyCUDA script: pycuda.compiler.SourceModule is warm's, the entry "
        "may be main(); with --arch, PyCUDA's allocations are shape-only stand-ins.",
    ),
    shard_text: str | None = typer.Option(
        None,
        "--shard",
        help="Do shard I of N only (I/N, such as 0/4), for `warm merge` to join; else "
        "WARM_SHARD, JOB_COMPLETION_INDEX/WARM_SHARD_COUNT, SLURM_ARRAY_TASK_ID/"
        "SLURM_ARRAY_TASK_COUNT or RANK/WORLD_SIZE.",
    ),
    dask: str | None = typer.Option(
        None,
        "--dask",
        help="Fan the run out over a Dask cluster (scheduler address): one shard per worker, "
        "merged into the bundle, then verified here (needs warmcli[dask]).",
    ),
    dask_env: list[str] = typer.Option(
        [],
        "--dask-env",
        help="With --dask: the shards' workload sees this variable as it is here (set or "
        "unset), not as each worker has it; repeatable.",
    ),
    as_json: bool = JsonOpt,
    quiet: bool = QuietOpt,
    verbose: bool = VerboseOpt,
    key: Path | None = SignKeyOpt,
) -> None:
    """Run WORKLOAD under CompileOnly, then CompileAndAutotune; store everything; verify.

    A workload takes no arguments (its sys.argv holds only its path): give it settings in
    environment variables, or warm a module of your own that sets them and calls it.

    With a shard, only that shard's tunes are measured and its kernels built; its verify
    pass checks that part under CompileOnly.

    Under WARM_TRUSTED_KEYS an existing bundle must be signed by a trusted key, only
    the entries such keys signed are used, and --key signs what was stored (a new
    bundle needs it).
    """
    unused_nvcc(nvcc, compiler)
    if (workload is None) == (module is None):
        fail("give a workload file or -m MODULE (one of them)")
    if ptx is not None and no_ptx:
        fail("--ptx keeps PTX, --no-ptx keeps none: give one of them")
    if ptx is not None:  # malformed: refused at once, as a CUDA run's devices refuse it
        from warmcli.backends.cuda.ptx import check_ptx_arch

        guarded(lambda: check_ptx_arch(ptx))
    if verbose and quiet:
        fail("--verbose shows every compiler command, --quiet the summary only: give one of them")
    path = bundle_to_write(bundle)
    trusted = guarded(trusted_keys)
    signing_key = None
    if key is not None:  # the verify pass would refuse what it signed, after all the work
        from warmcli.cli.sign import private_key_of, refuse_untrusted  # (a signing run's only:

        signing_key = private_key_of(key)  # `sign`'s report and key files, ~2.5 ms, unused
        refuse_untrusted(key, signing_key, trusted)  # by every other run)
    if trusted is not None and signing_key is None and (not path.exists() or is_empty_file(path)):
        fail(  # its verify pass would refuse what the run stored, unsigned, after all the work
            f"{path}: a new bundle under WARM_TRUSTED_KEYS holds only what this run stores, "
            "which they would refuse unsigned: give --key (a trusted key) to sign it"
        )

    def loader() -> Workload:
        fallback = "main" if pycuda else None
        if module is not None:
            return load_module(module, entry, fallback, gpu_less=bool(arch))
        return load_workload(workload or "", entry, fallback, gpu_less=bool(arch))

    if dask_env and dask is None:
        fail("--dask-env names variables for --dask's shards: give --dask too")
    if any(not name or "=" in name or "\0" in name for name in dask_env):
        fail("--dask-env takes a variable's name (no '='): its value is this process's")
    if kept := [n for n in dask_env if n in config.NOT_PASSED]:
        fail(
            f"--dask-env {printable(kept[0])}: the shard and trusted-key variables are never "
            "given to the shards (each is its own shard; this side checks signatures)"
        )
    if dask is not None:
        if shard_text is not None:
            fail("--dask makes one shard per worker itself: leave out --shard")
        argv = [str(Path(workload).resolve())] if workload else ["-m", module or ""]
        for name, value in (("--entry", entry), ("--device", device), ("--nvcc", nvcc)):
            argv += [name, value] if value else []
        chosen = compiler or config.cuda_compiler()  # this side's choice, not each worker's
        argv += ["--compiler", chosen] if chosen in ("nvrtc", "nvcc") else []
        argv += ["--no-ptx"] if no_ptx else ["--ptx", ptx] if ptx else []
        argv += [a for arch_name in arch for a in ("--arch", arch_name)]
        argv += ["--jobs", str(jobs)] if jobs else []
        argv += ["--compile-timeout", str(compile_timeout)] if compile_timeout else []
        argv += ["--allow-discarded-reads"] if allow_discarded_reads else []
        argv += ["--pycuda"] if pycuda else []
        hooked = lambda act: with_pycuda(pycuda, bool(arch), act)  # noqa: E731 (the replay's)
        verify_args = (hooked, loader, device, arch, nvcc, trusted, compiler, allow_discarded_reads)
        from warmcli.cli.run_dask import dask_run  # only a run fanned out pays for Dask's parts

        raise typer.Exit(
            dask_run(
                dask,
                argv,
                path,
                None if no_verify else verify_args,
                signing_key,
                (as_json, quiet, verbose),
                gpu=not arch and device != "host",  # measured on GPUs: GPU workers, if any
                trusted=trusted,
                passed=config.caller_values(dask_env),
            )
        )
    shard = guarded(lambda: resolve_shard(shard_text))

    def action(progress: RunProgress | None) -> Any:
        written, loaded = pinned(path, loader)  # the caller's bundle, though the workload moves
        for line in import_warnings(loaded.unbound, None if module else loaded.path):
            err.print(f"warm: warning: {line}", markup=False, highlight=False)
        hint = loaded.device_hint or ("cuda" if pycuda else None)

        def opener() -> list[Device]:
            return open_devices(
                device,
                arch,
                hint=hint,
                nvcc=nvcc,
                compiler=compiler,
                ptx=None if no_ptx else ptx or "auto",
                builds=True,
            )

        report = warm_bundle(
            loaded,
            opener,
            written,
            verify=not no_verify,
            jobs=jobs,
            compile_timeout=compile_timeout,
            allow_discarded_reads=allow_discarded_reads,
            observer=progress,
            trusted_keys=trusted,
            signing_key=signing_key,
            shard=shard,
        )
        report.bundle = path  # named as the caller named it
        return report

    def _passes(as_json: bool, pycuda: bool, gpu_less: bool, progress: Any) -> Any:
        with workload_output_on_stderr(as_json):  # stdout keeps the one JSON object
            try:
                return with_pycuda(pycuda, gpu_less, lambda: action(progress))
            except WarmError as exc:  # the notes its pass made, before its line (as run says)
                for note in folded_notes(n for n in exc.notes_before if not _said(n, exc)):
                    err.print(f"warm: note: {printable(note)}", markup=False, highlight=False)
                raise

    def worker() -> int:
        """The run itself, in the worker process `run_isolated` forks."""
        interrupt_on_signals()
        progress = None
        if not (as_json or quiet) and out.is_terminal:  # bars only on a terminal: Rich's
            from warmcli.cli.progress import RunProgress  # progress is imported only then

            progress = RunProgress(out)
        try:
            with progress or contextlib.nullcontext():
                report = guarded(lambda: _passes(as_json, pycuda, bool(arch), progress))
        except RunInterrupted as exc:
            interrupted(exc.stored_kernels, exc.stored_tunes)
        # Any other Ctrl-C (before the passes began, or while this prints once they stored
        # the bundle) is said by the supervisor, with what the worker's journal stored.
        if as_json:
            emit_json({**run_json(report), "compilers": report.compilers})
        else:
            if verbose:
                for c in report.compilers:
                    out.print(compiler_line(c), markup=False, highlight=False, soft_wrap=True)
            out.print(run_renderable(report, verbose=verbose, tables=not quiet), soft_wrap=True)
            for line in filter(None, map(_driver_line, report.compilers if arch else [])):
                out.print(line, markup=False, highlight=False, soft_wrap=True)
        return 1 if report.verified is False else 0

    existed, empty = path.exists(), is_empty_file(path)  # an empty file given: a new bundle
    had_folder = path.parent.is_dir()  # else made for the bundle: removed where left empty
    outcome = run_isolated(
        lambda: exit_code(worker),
        on_crash=_excluded,
        output=lambda: workload_output_on_stderr(as_json),  # its exit functions' too
        on_exit_end=lambda line: err.print(line, markup=False, highlight=False),
    )
    holds_nothing()  # the worker did the run (reaped at this process's end): no teardown
    try:
        if isinstance(outcome, WorkerCrash):
            _crashed(outcome, path, existed and not empty, empty)
    finally:
        if not had_folder:  # a run that made no bundle leaves no empty folder (as `merge -o`)
            with contextlib.suppress(OSError):  # not empty: the bundle, or another's file
                path.parent.rmdir()
    passed_on(outcome)  # (130: the worker said it)


def _excluded(crash: CrashedCandidate) -> None:
    err.print(  # a workload's names, shown inert as the bundle's are
        printable(
            f"warm: tune {crash.operation} {crash.shape}: candidate {crash.candidate} "
            f"{crash.reason}; it is excluded and the passes run again"
        ),
        markup=False,
        highlight=False,
    )


def _crashed(crash: WorkerCrash, path: Path, existed: bool, empty: bool) -> None:
    """The worker died outside any candidate: one line, exit 130 (interrupted) or 2."""
    _roll_back_left_write(path)
    kernels, tunes = crash.stored
    if crash.interrupted:
        interrupted(kernels, tunes)
    during = crash.during or "loading the workload"
    if kernels or tunes:
        kept = f"{kernels} kernel(s) and {tunes} tune(s) stored in {path} before it are kept"
    else:
        if not existed:  # a bundle the crashed run only created leaves nothing behind,
            remove_new(path, was_empty=empty)  # and no lock file of it (an empty file: empty)
        kept = f"nothing was stored in {path}"
    fail(f"{crash.what} during {during}: {kept}")


def _roll_back_left_write(path: Path) -> None:
    """Under the bundle's write lock (no writer of warm's is mid-write then), roll back the
    write a dead worker left unfinished, as the next writer would (a hot journal: SQLite's
    recovery removes it), and remove a journal it left that no write will play (its header
    never synced: cold). Nothing where there is none, or where it cannot be done (a bundle
    no longer writable: the next writable open does)."""
    journal = Path(f"{os.path.realpath(path)}-journal")
    if not os.path.lexists(journal):
        return
    with contextlib.suppress(BundleError, OSError, sqlite3.Error), write_lock(path):
        recover(path)
        journal.unlink(missing_ok=True)


def _said(note: str, exc: WarmError) -> bool:
    """Whether `note` is the compile that ended the run (failed, or timed out), which the
    line of `exc` names, with its log: said once, by the error, which stays the first line
    (another kernel's note is said, its error the same text: a variant of one source; and
    another of its label, its options not in the error, where its error line differs), or
    whose error line a tune's failure lists among its candidates' reasons; or a refused
    read's, where that read's `DiscardedReadError` ended the run (not caught)."""
    if note.startswith("a read back under ") and "), and the workload caught it" in note:
        return "DiscardedRead" in str(exc)  # it did not: the read's error ended the run
    if not note.startswith("compile of "):
        return False
    named_as, _, keyed = note.partition(" (key ")
    words = named_as.removeprefix("compile of ").split(" ")  # label, options
    labels = [" ".join(words[: n + 1]) for n in range(len(words))]  # (a name= may hold " ")
    ends = ("failed to compile", "timed out compiling")
    first, text = str(exc).partition("\n")[0], str(exc)
    line = keyed.partition(": ")[2]  # its error line (after `KEY) failed: `)
    if any(f"kernel {label} {end}" in first for label in labels for end in ends):
        # its own compile; another kernel's, its error the same text, is said, as is one of
        # its label and other options (the error names no options) whose error differs
        return line in text
    named = any(end in first for end in ends)  # (a tune's failure lists its candidates')
    return not named and note.rsplit(" failed: ", 1)[-1] in text


def _driver_line(info: dict[str, str]) -> str | None:
    """What driver a CUDA device's builds need (`warm run --arch`), None where none."""
    needs, ptx = info.get("needs_driver"), info.get("ptx_needs_driver")
    if not needs:
        return None
    major, release = needs.split(".")[0], cuda_release(info["version"]) or (0, 0)
    jit = f"; its PTX a driver supporting CUDA >= {ptx}" if ptx else ""
    return printable(
        f"cuda {info['device']}: built by {info['compiler']} {release[0]}.{release[1]}: "
        f"its cubins need a driver supporting CUDA >= {needs} (any CUDA {major}.x driver: "
        f"minor version compatibility){jit}; older drivers: pre-build with a compiler of "
        "their CUDA release" + (f"; {info['unserved']}" if info.get("unserved") else "")
    )
