"""`python -m warmcli` and the `warm` command: the CLI, with `warm --version` answered before
the CLI's own imports (typer, rich, every command) are paid for, those imports made with
Python's cyclic garbage collector paused (`warmcli.cli.main` turns it on again), and a
process whose work ran in a worker that has exited (`warm run`) ended without the
interpreter's teardown (`warmcli.cli.common.end_process`). Ctrl-C while the CLI is still
imported is one line and exit 130, never the import's traceback; once a command has ended,
Ctrl-C is ignored and its exit code stands. SIGTERM and SIGHUP (a closed terminal, a dropped
ssh session) are answered as Ctrl-C is (each, Ctrl-C too, unless warm was started ignoring
it, as under `nohup` or as a background job of a script: it stays ignored, as Python leaves
it), so no command is ended by them in silence, its temporary files left; none
answered ends the process by the signal after all (`_exit`). A standard stream the caller
closed (`>&-`, `2>&-`, `<&-`) is /dev/null first, and an ASCII stdout writes escapes
(`_open_standard_streams`); production's at-exit report (`WARM_REPORT`) is never printed
by a command; output that cannot be written (`| false`, `> /dev/full`) is
answered by `warmcli.cli.output`. A finalizer out of memory says nothing beside the
command's one line, and a stop answered in a finalizer is sent again, never lost in Python's
"Exception ignored" (`_unraisable`); out of memory as CPython's C code may say it under an
address-space limit (a SystemError or RecursionError, or an ImportError where a library could
not be mapped: `_out_of_memory`) is that one line too. A library the CLI imports that is missing
or too old (a typer another install put back) is one line, exit 2, naming what warm needs
(`_cannot_start`)."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # `typing.TYPE_CHECKING`: `warm --version` imports no typing (nor re)
if TYPE_CHECKING:
    from typing import Any, NoReturn


def main() -> None:
    """`warm`: `--version` alone is printed at once; anything else goes to the CLI."""
    _answer_early_stops()
    _open_standard_streams()
    if sys.argv[1:] == ["--version"]:
        from warmcli._version import __version__

        try:
            sys.stdout.write(f"warm {__version__}\n")
            sys.stdout.flush()
        except OSError as exc:  # (`| false`, `> /dev/full`): as any command's output
            from warmcli.cli.output import as_output, refused

            raise SystemExit(refused(as_output(exc))) from None
        return
    sys.unraisablehook = _unraisable
    import gc

    paused = gc.isenabled()  # (a caller's own choice to run without it stays so)
    gc.disable()  # until the command's modules are imported (`warmcli.cli.main` turns it on)
    try:
        import signal

        import warmcli.interrupted  # noqa: F401  (`_on_ctrl_c`'s, loaded before it answers)

        heeded = [
            stop  # (started ignoring one, a script's background job SIGINT: it stays so)
            for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(stop) != signal.SIG_IGN
        ]
        for stop in heeded:  # SIGINT as Python's own, SIGTERM and SIGHUP as Ctrl-C: one
            signal.signal(stop, _on_ctrl_c)  # line, exit 130, until the command ends
        from warmcli import cli
        from warmcli.cli import main as cli_main

        cli.Collector.paused_by_entry = paused
        from warmcli.cli.common import end_process, exit_interrupted
    except KeyboardInterrupt:  # Ctrl-C while the CLI is imported: one line, as anywhere else
        _interrupted()
    except ImportError as exc:  # a library the CLI needs, missing or too old: one line
        _cannot_start(exc)
    code: object = None
    interrupted = False
    try:
        cli_main()
    except SystemExit as exc:
        _Ended.now = True  # first, before any call: a Ctrl-C from here on is no exception
        code = exc.code
    except KeyboardInterrupt:  # past the command's own answer, as it ended
        _Ended.now = True
        interrupted = True
    except OSError as exc:  # a write no command answered (help into /dev/full): one line
        _Ended.now = True
        from warmcli.cli.common import answer

        code = answer(_stdouts(exc))
    except (MemoryError, RecursionError, SystemError, ImportError) as exc:  # out of memory
        _Ended.now = True  # where no command answered it (an import): one line (`_out_of_memory`)
        if not _out_of_memory(exc):
            raise
        from warmcli.cli.common import OUT_OF_MEMORY, exit_now

        try:
            exit_now(OUT_OF_MEMORY, 2)
        except SystemExit as said:
            code = said.code
    _Ended.now = True
    _hold_ctrl_c(signal)  # nor later: no traceback, no death by the signal
    if interrupted:  # one line, exit 130 (no second JSON object where one was printed)
        try:
            exit_interrupted()
        except SystemExit as said:
            code = said.code
    production = sys.modules.get("warmcli.production")  # (where the command imported it)
    if production is not None:  # a command serves nothing: no `WARM_REPORT` report at exit
        production.in_warms_command()
    end_process(code, answer_ctrl_c=signal.SIGINT in heeded)
    _exit(code)


def _answer_early_stops() -> None:
    """SIGINT, SIGTERM and SIGHUP (each unless ignored) end the process in one line, exit
    130, until `main` answers them as the command does: warm has done nothing yet, and its
    first imports (`warmcli.interrupted`'s `typing`) printed Python's traceback. The
    interpreter's own `_signal`: `warm --version` imports nothing more."""
    import _signal

    for stop in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        if _signal.getsignal(stop) != _signal.SIG_IGN:
            _signal.signal(stop, _stopped_early)


def _stopped_early(signum: int, frame: object) -> None:
    """`_answer_early_stops`'s handler: nothing to keep, so nothing but the line is done."""
    os.write(2, b"warm: interrupted\n")
    if "--json" in sys.argv[1:]:
        os.write(1, b'{\n  "error": "interrupted",\n  "exit": 130\n}\n')
    os._exit(130)


def _open_standard_streams() -> None:
    """Descriptors 0, 1 and 2 that the caller closed are opened on /dev/null (and Python's
    `sys.stdin`/`stdout`/`stderr`, None then, made over them): a command works as with
    /dev/null there, and no file warm opens (a bundle) is given descriptor 0, 1 or 2, where
    a print or a compiler would write. A stdout that is no UTF (an ASCII locale) writes a
    character it cannot encode as its escape (`\\u2192`)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            devnull = os.open(os.devnull, os.O_RDWR)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
        if getattr(sys, name) is None:
            stream = open(fd, "r" if fd == 0 else "w", errors="backslashreplace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    if not encoding.startswith("utf") and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # an ASCII locale's: escapes, not errors


def _unraisable(unraisable: Any) -> None:
    """`sys.unraisablehook` of the CLI: an object's finalizer that ran out of memory (under
    `ulimit -v`, as the command unwinds) says nothing, the command's own line saying it
    (Python's hook printed `Exception ignored in: ...` and, itself out of memory, more); a
    stop answered as a finalizer ran (a generator closed as it is collected: Rich's table
    cells') is sent again, answered where the command goes on (it printed Python's
    traceback, and the command went on to exit 0); anything else as Python says it."""
    if isinstance(unraisable.exc_value, MemoryError):
        return
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and not _Ended.now:
        from warmcli.interrupted import send_again

        if send_again(_Ended.stop):
            return
    try:  # noqa: SIM105  (no contextlib: `warm --version` imports nothing it need not)
        sys.__unraisablehook__(unraisable)
    except MemoryError:
        pass


def _out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is running out of memory: a MemoryError, or what CPython's C code raises
    instead where an allocation failed under an address-space limit (`ulimit -v`): a
    RecursionError ("while calling a Python object") or a SystemError ("error return without
    exception set"), seen at the limit's edge, which else escaped as a fatal dump; or an
    ImportError where the loader could not map a library (numpy's, SQLite's: "failed to map
    segment", or ENOMEM's words), which else ended in numpy's 40-line traceback, exit 1."""
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, ImportError) and (
        not any(w in str(exc) for w in _CANNOT_MAP) or _STATIC_TLS in str(exc)
    ):
        return False
    import resource

    try:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError, MemoryError):
        return False
    return limit != resource.RLIM_INFINITY


_CANNOT_MAP = ("failed to map segment", "annot allocate memory")  # (the loader's, glibc's)
# The loader's `cannot allocate memory in static TLS block`: a library loaded too late for the
# TLS room left (libgomp's, aarch64's), whatever memory the process may have: no memory limit
_STATIC_TLS = "static TLS block"


class _Ended:
    """Whether the command has ended (its exit code stands): set by plain stores only, which
    no signal handler can come between; and the stop signal `_on_ctrl_c` answered last."""

    now = False
    stop = 2  # (SIGINT's number, until one is answered)


def _on_ctrl_c(signum: int, frame: object) -> None:
    """SIGINT's (and SIGTERM's, SIGHUP's) handler: `KeyboardInterrupt`, as Python's own, until the
    command has ended; nothing after (Python runs a handler only at a call or a loop's jump,
    never between `except` and the store of `_Ended.now`, so no Ctrl-C escapes as the
    command ends)."""
    if _Ended.now:
        return
    from warmcli.interrupted import in_quiet_callback, send_again  # (imported by `main`)

    if in_quiet_callback(frame) and send_again(signum):  # only printed there: handled later
        return
    _Ended.stop = signum
    raise KeyboardInterrupt


def _hold_ctrl_c(signal: Any) -> None:
    """SIGINT is ignored from here on, by the system too: the interpreter's teardown puts
    back the default action of a signal with a Python handler, never of an ignored one, so
    a late Ctrl-C cannot kill `warm` by the signal. (`signal.signal` runs a handler for a
    Ctrl-C that came before it first: `_on_ctrl_c`, which no longer raises.) SIGTERM and
    SIGHUP, where answered, get their default action back: what stops a process once it is
    done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(stop) is _on_ctrl_c:
            signal.signal(stop, signal.SIG_DFL)


def _interrupted() -> NoReturn:
    """`warm: interrupted` (under `--json` also its JSON), exit 130, as the CLI says it."""
    sys.stderr.write("warm: interrupted\n")
    if "--json" in sys.argv[1:]:
        sys.stdout.write('{\n  "error": "interrupted",\n  "exit": 130\n}\n')
    _exit(130)


def _stdouts(exc: OSError) -> OSError:
    """`exc`, named as stdout's where Click's `echo` met it (`warm --help > /dev/full`: the
    usage and help Click writes itself, not through `warmcli.cli.output`), as a command's
    refused output is named; else as it is."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "echo" and frame.f_globals.get("__name__", "").endswith(
            "click.utils"
        ):
            from warmcli.cli.output import as_output

            return as_output(exc)
        tb = tb.tb_next
    return exc


def _cannot_start(exc: ImportError) -> NoReturn:
    """One line, exit 2, where the CLI's own imports failed, naming the module and what warm's
    metadata asks of its distribution: a library another install changed under warm (`pip
    install typer==0.20` for another tool: no `typer._click`, which typer 0.26 made), or an
    install of warm that lacks a file of its own. It was the import's traceback. Out of memory
    (`_out_of_memory`: a library that could not be mapped) says that; a library installed as
    warm needs whose own import failed (a library of its missing) is given no install advice."""
    import re
    from importlib import metadata

    from warmcli.errors import OUT_OF_MEMORY
    from warmcli.printable import printable

    if _out_of_memory(exc):
        _failed(OUT_OF_MEMORY)
    name = (exc.name or "").partition(".")[0]
    said = f"the CLI cannot start: {exc}"
    try:
        ours = metadata.version("warmcli")
        asked = [r for r in metadata.requires("warmcli") or () if ";" not in r]
        wanted = [r for r in asked if re.split(r"[<>=!~ \[(]", r)[0] == name]
        if name == "warmcli":
            said += f" (warm {ours}'s install lacks it: pip install --force-reinstall warmcli)"
        elif wanted:
            there = getattr(sys.modules.get(name), "__version__", None)
            try:
                there = f"{name} {there or metadata.version(name)} is installed"
            except metadata.PackageNotFoundError:
                there = f"{name} is not installed"
            if isinstance(exc, ModuleNotFoundError) or there.endswith("not installed"):
                said += f" ({there}; warm {ours} needs {wanted[0]}: pip install '{wanted[0]}')"
            else:  # (a broken numpy, a library of its missing: no install of it mends that)
                said += f" ({there}, as warm needs: its own import failed)"
    except (metadata.PackageNotFoundError, OSError, ValueError):
        pass  # (warm has no metadata here, a checkout on PYTHONPATH: the import's words alone)
    _failed(printable(said))  # (a path, a version: never a control character unescaped)


def _failed(said: str) -> NoReturn:
    """`said` as the CLI's one line, exit 2 (`--json`: its document too), where it has no CLI."""
    import json

    sys.stderr.write(f"warm: error: {said}\n")
    if "--json" in sys.argv[1:]:
        sys.stdout.write(json.dumps({"error": said, "exit": 2}, indent=2) + "\n")
    _exit(2)


def _exit(code: object) -> NoReturn:
    """`SystemExit(code)`, once Python's note of an interrupt left unhandled is forgotten
    (`warmcli.interrupted.forget_interrupt`: else `python -m` ends the process by SIGINT,
    not with `code`, though warm answered that interrupt)."""
    from warmcli.interrupted import forget_interrupt

    forget_interrupt()
    raise SystemExit(code)


if __name__ == "__main__":
    main()
