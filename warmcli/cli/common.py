"""What every `warm` command shares: one-line errors, options, JSON output (the bundle a
command names: `warmcli.cli.bundle_paths`).

Exit codes: 0 ok; 1 verify found something missing or corrupt, diff a corrupt entry (bundles that
differ are 0), check found entries this machine cannot serve, merge wrote OUT but its shards are
not one whole run, or stdout's reader went away before all was written (`| head -1`); 2 bad input
or environment (a missing or broken workload, a corrupt or foreign bundle, no compiler, a kernel
that fails to compile: any `WarmError`, or an `OSError`); 130 interrupted (SIGINT, SIGTERM or
SIGHUP).
Every such error is one line on stderr (a compiler's log follows it, indented), never a traceback;
under `--json` it is also one JSON object on stdout, `{"error": ..., "exit": N}`; a URL's secret
and key text on the command line or in `WARM_TRUSTED_KEYS` are never in it. The consoles, `out`
and `err`, are `warmcli.cli.consoles`'; a command that has finished
holding nothing says so (`holds_nothing`), and the entry point then ends the process without the
interpreter's teardown (`end_process`). It prints only in warm's own forms what a command hands it:
an error's line (`fail`), a warning line, `interrupted`, a command's JSON (`emit_json`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

import typer

from warmcli import config
from warmcli.bundle.location import withheld
from warmcli.bundle.unshown import unshown_keys  # (a private key's text: never shown)
from warmcli.cli.consoles import err, out
from warmcli.cli.output import drop_stdout, refused, writing_output
from warmcli.errors import OUT_OF_MEMORY, OutputError, WarmError
from warmcli.interrupted import held_interrupts
from warmcli.printable import escaped_within, printable, printable_lines, spelled_surrogates

# One line and exit 2: every error warm raises on purpose, and the system's (a full disk...).
EXPECTED = (WarmError, OSError)

BundleOpt = typer.Option(
    None, "--bundle", "-b", help="Bundle path [default: WARM_BUNDLE, else in WARM_HOME]."
)
BundleArg = typer.Argument(None, help="Bundle [default: WARM_BUNDLE, else in WARM_HOME].")
# A command that only reads its bundle (stats, verify, check) takes it by URL too.
BundleOrUrlArg = typer.Argument(
    None,
    help="Bundle, or its https:// or s3:// URL (fetched into WARM_HOME once) "
    "[default: WARM_BUNDLE, else in WARM_HOME].",
)
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")
DeviceOpt = typer.Option("auto", "--device", "-d", help="host, cuda, cuda:N or auto.")
ArchOpt = typer.Option(
    [],
    "--arch",
    help="Compile-only for a GPU architecture (sm_90...), no GPU needed; repeat for several.",
)
EntryOpt = typer.Option("workload", "--entry", help="The workload's entry function.")


def _named_nvcc(value: str | None) -> str | None:
    """`--nvcc ""` (a CI's `--nvcc "$NVCC"`, the variable unset) is one line and exit 2,
    never taken as no `--nvcc`: that searched WARM_NVCC, CUDA_HOME and PATH instead."""
    if value is not None and not value.strip():
        fail(f"--nvcc {value!r} names no nvcc: give its path, or leave out --nvcc")
    return value


NvccOpt = typer.Option(
    None,
    "--nvcc",
    callback=_named_nvcc,
    help="nvcc to use (else WARM_NVCC, CUDA_HOME, PATH...).",
)


def _known_compiler(value: str | None) -> str | None:
    """An unknown CUDA compiler (`--compiler`, else `WARM_CUDA_COMPILER`) is one line and
    exit 2 at once, also for a command that opens no CUDA device, and so is a blank
    `--compiler ""` (before, taken as none given); a known one is the name, spaces around
    it stripped (`"nvrtc "` is nvrtc, never nvcc: `choose` reads it so)."""
    if value is not None and not value.strip():
        fail(f"--compiler {value!r} is not a CUDA compiler: use nvrtc, nvcc or auto")
    if value or config.cuda_compiler():
        from warmcli.backends.cuda.choose import check_name, named  # only when one is named

        try:
            check_name(value)
        except WarmError as exc:
            fail(str(exc))
        return named(value) or None
    return value


def unused_nvcc(nvcc: str | None, compiler: str | None) -> None:
    """A warning line where `--nvcc` names an nvcc the chosen CUDA compiler never runs:
    NVRTC, chosen by `--compiler nvrtc`, else `WARM_CUDA_COMPILER=nvrtc` (which come
    before a named nvcc: `warmcli.backends.cuda.choose`)."""
    by = "--compiler" if compiler else "WARM_CUDA_COMPILER"
    if nvcc and (compiler or config.cuda_compiler()).strip() == "nvrtc":
        said = f"--nvcc {nvcc} is not used: {by} nvrtc compiles CUDA with NVRTC"
        err.print(f"warm: warning: {printable(said)}", markup=False, highlight=False)


CompilerOpt = typer.Option(
    None,
    "--compiler",
    callback=_known_compiler,
    help="CUDA compiler: nvrtc, nvcc or auto [default: WARM_CUDA_COMPILER, else auto: "
    "nvrtc if installed].",
)
AllowReadsOpt = typer.Option(
    False, "--allow-discarded-reads", help="Warn instead of failing on reads under discard."
)
QuietOpt = typer.Option(False, "--quiet", "-q", help="No tables or progress: the summary only.")
SignKeyOpt = typer.Option(
    None, "--key", "-k", help="Ed25519 private key (PEM): sign the bundle written."
)
VerboseOpt = typer.Option(False, "--verbose", "-v", help="Show each compiler command.")


EXIT_INTERRUPTED = 130


class _Emitted:
    """Whether this process printed its JSON document (one object per command), or began
    one that an error cut short (`warmcli.cli.json_stream`: the error's keys end it); and
    the exit code its last line said (`fail`'s, or a worker's it passes on: `passed_on`)."""

    json = cut = False
    said: int | None = None


class _Teardown:
    """Whether this process holds nothing its interpreter's teardown must release (no
    open file, no thread at work): its command said so (`holds_nothing`)."""

    needless = False


def holds_nothing() -> None:
    """Said by a command that has finished and holds nothing open: its bundle closed, its
    output printed, or its work done in a worker that has exited (`warm run`)."""
    _Teardown.needless = True


def end_process(code: object, answer_ctrl_c: bool = True) -> None:
    """For the `warm` process's entry point, after a command ended with `code` (a
    `SystemExit`'s): where `holds_nothing` was said and no other thread runs, the
    `atexit` functions run, the output is flushed and the process ends at once, without
    the interpreter's teardown of numpy, Rich and every module (tens of milliseconds
    that change nothing); else this returns and the interpreter exits as usual. The entry
    point ignores Ctrl-C before calling this (the command's code stands); where a thread
    is left for the interpreter to wait for, Ctrl-C is answered again while it waits (not
    where `answer_ctrl_c` is false: warm was started ignoring it)."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    working = any(not t.daemon for t in others)
    if not _Teardown.needless or working:
        if working and answer_ctrl_c:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return
    status = code if isinstance(code, int) else 0 if code is None else 1
    if not isinstance(code, int | None):
        sys.stderr.write(f"{code}\n")
    getattr(atexit, "_run_exitfuncs", lambda: None)()
    try:
        with writing_output():
            made = vars(out).get("_console")  # (`out` is made only when something printed)
            if made is not None:
                made.file.flush()
            sys.stdout.flush()
        with contextlib.suppress(OSError):
            sys.stderr.flush()
    except OSError as exc:  # the reader went away (exit 1), or a full disk (one line, exit 2)
        said = refused(exc)  # (said whatever the code: a verify that found a miss, exit 1)
        status = status or said
    os._exit(status)


def json_requested() -> bool:
    """The command line asked for `--json` (also known before a usage error is parsed)."""
    return "--json" in sys.argv[1:]


def fail(message: str, code: int = 2, *, label: str = "error: ") -> NoReturn:
    """One line on stderr (further lines, a compiler log, indented; a path given with a
    newline escaped), then exit; under `--json` also `{"error": ..., "exit": code}`. A Ctrl-C
    while it says so is held, then dropped (the command has ended: its line and code stand;
    else that line was said twice, or cut), and an interrupt is said once, however many
    Ctrl-C the command's unwinding meets."""
    if code == EXIT_INTERRUPTED and _Emitted.said == code:
        raise typer.Exit(code)
    _Emitted.said = None
    try:
        with held_interrupts():
            _say(message, code, label)
    except KeyboardInterrupt:
        if _Emitted.said != code:  # it came before the hold began: answered as any Ctrl-C
            raise
    raise typer.Exit(code)


def _say(message: str, code: int, label: str) -> None:
    """`fail`'s line (and its JSON), noted as said (`_Emitted.said`)."""
    given = (*sys.argv[1:], config.bundle(), config.home())
    message = withheld(str(message).strip(), given)  # (a URL's secret, a path's spelling too)
    message = unshown_keys(message, (*given, *(config.trusted_keys() or ())))
    first, *rest = printable_lines(escaped_within(message, given)) or ["error"]
    try:  # stderr refused too (`2> /dev/full`): the code stands
        err.print(f"warm: {label}{first}", markup=False, highlight=False)
        for line in rest:
            err.print(f"    {line}", markup=False, highlight=False)
    except (OSError, MemoryError, ImportError):  # or Rich could not be imported (no memory,
        # no descriptor: its extensions refused, "failed to map segment from shared object")
        if getattr(err, "_console", None) is None:  # then in plain words, as said
            with contextlib.suppress(OSError, MemoryError):
                lines = [f"warm: {label}{first}", *(f"    {line}" for line in rest)]
                sys.stderr.write("\n".join(lines) + "\n")
                sys.stderr.flush()
    _Emitted.said = code
    if json_requested() and not _Emitted.json:
        doc: dict[str, Any] = {"error": first, "exit": code}
        if rest:
            doc["detail"] = "\n".join(rest)
        try:
            emit_json(doc)
        except OSError:  # stdout refused it (`| false`): the line above said it, the code stands
            drop_stdout()


def passed_on(code: int) -> NoReturn:
    """Exit with `code`, a worker's, whose line (`interrupted`'s too) the worker said."""
    _Emitted.said = code
    raise typer.Exit(code)


def unsaid_interrupt(code: object) -> bool:
    """Whether `code` is 130 that no line said: Typer's own answer to a KeyboardInterrupt
    that reaches it (one landing as warm's group begins to parse or to invoke, before their
    `try`, or as its context closes) is a bare exit 130, printing nothing."""
    return code == EXIT_INTERRUPTED and _Emitted.said != code


def exit_code(action: Callable[[], int], saying: bool = False) -> int:
    """Run a command's `action`, turning `typer.Exit` into the exit code it carries; out of
    memory said in one line (past the command's guard: `warm run`'s worker, past its passes)."""
    try:
        return action()
    except typer.Exit as exc:
        return exc.exit_code
    except OSError as exc:  # its output refused (`> /dev/full`), past the command's guard
        return answer(exc)
    except MemoryError:
        if saying:  # even the line ran out: said as bytes made before
            _out_of_memory_bytes()
            return 2
    # Said here, past the handler: inside it, its traceback held the frames holding what ran
    # out, so saying it ran out again, and again (a stack overflow: SIGSEGV, stop 49)
    return exit_code(lambda: fail(OUT_OF_MEMORY), saying=True)


def _out_of_memory_bytes() -> None:
    """Out of memory said where even `fail` ran out: its line, and under `--json` its
    document (the keys ending one begun), as bytes made before, so stdout still holds one
    JSON object (`warm stats --json` under ulimit -v 46 to 52 MB: stdout empty, stop 49)."""
    with contextlib.suppress(OSError):
        os.write(2, _OUT_OF_MEMORY_LINE)
    if json_requested() and not _Emitted.json:
        _Emitted.json = True
        with contextlib.suppress(OSError, MemoryError, ValueError):
            sys.stdout.flush()  # (what a document begun holds, before its end)
            os.write(1, b"," + _OUT_OF_MEMORY_JSON[1:] if _Emitted.cut else _OUT_OF_MEMORY_JSON)


def answer(exc: WarmError | OSError) -> int:
    """The exit code of an expected failure (`guarded`'s, or one met before or past a
    command's guard: stdout refused, a name too long): stdout's reader gone (`| head`) is
    no failure of warm's, exit 1 said by nothing, as Python's own tools do; anything else
    is one line (and its JSON under `--json`) and exit 2."""
    if isinstance(exc, BrokenPipeError):
        return refused(exc)
    if isinstance(exc, OutputError):  # what stdout still holds would fail again
        drop_stdout()
    return exit_code(lambda: fail(_said(exc)))


def _said(exc: WarmError | OSError) -> str:
    """`exc`'s line; a file not found that names no file, met where the working folder is
    gone (removed under the shell that started warm: `os.getcwd` fails), names that: a
    relative path can neither be found nor made there (it said `[Errno 2] No such file or
    directory`, nothing more)."""
    if isinstance(exc, FileNotFoundError) and exc.filename is None:
        try:
            os.getcwd()
        except FileNotFoundError:
            return (
                "the working folder was removed after warm's shell entered it: a relative "
                "path is neither found nor made there (cd to a folder that is there, or "
                "name absolute paths)"
            )
    return str(exc)


def interrupted(kernels: int, tunes: int) -> NoReturn:
    """Stopped by SIGINT, SIGTERM or SIGHUP: say what this run stored (it is kept), exit 130."""
    stored = f"{kernels} kernel(s) and {tunes} tune(s) stored are kept"
    fail(f"interrupted: {stored}", EXIT_INTERRUPTED, label="")


def exit_now(message: str, code: int, *, label: str = "error: ") -> NoReturn:
    """`fail`, then exit the process itself: for where no command's runner turns its
    `typer.Exit` into the exit code (the parser's errors, a command module's import)."""
    with contextlib.suppress(typer.Exit):
        fail(message, code, label=label)
    raise SystemExit(code)


def exit_interrupted() -> NoReturn:
    """Stopped by Ctrl-C where no command's own handling answered it (while parsing, while
    a command's module is imported, or inside a command): one line, exit 130."""
    exit_now("interrupted", EXIT_INTERRUPTED, label="")


_OUT_OF_MEMORY_LINE = f"warm: error: {OUT_OF_MEMORY}\n".encode()
_OUT_OF_MEMORY_JSON = (json.dumps({"error": OUT_OF_MEMORY, "exit": 2}, indent=2) + "\n").encode()


def guarded(action: Callable[[], Any]) -> Any:
    """Run `action`; an expected failure is answered (`answer`: one line and exit 2; the
    reader of stdout gone, exit 1 quietly), and so is running out of memory."""
    try:
        return action()
    except EXPECTED as exc:
        raise typer.Exit(answer(exc)) from None
    except MemoryError:
        raise typer.Exit(exit_code(lambda: fail(OUT_OF_MEMORY))) from None


def json_text(value: Any) -> str:
    """`value` as indented JSON, each lone surrogate in its texts (a path's byte no UTF-8 has)
    as the text `\\udcff` (`spelled_surrogates`), looked for only where an escape may be one."""
    text = json.dumps(value, indent=2, default=str)
    return json.dumps(spelled_surrogates(value), indent=2, default=str) if "\\ud" in text else text


def emit_json(doc: Any) -> None:
    text, _Emitted.json = json_text(doc), True
    with writing_output():
        sys.stdout.write(("," + text[1:] if _Emitted.cut else text) + "\n")  # its keys end it
        sys.stdout.flush()
