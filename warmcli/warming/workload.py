"""Loading a workload: a Python file (or module) that defines `workload(runtime)`.

A workload behaves as under `python workload.py`: its folder goes first on `sys.path`, so it
imports the modules beside it. The file is imported as a fresh module under a private name, so two
workloads never share state and nothing of it is imported twice by accident; then, where its file's
own name (its stem) is free (no module imported, none elsewhere on `sys.path`), it is known by that
name too, its functions and classes named as of it, so a `spawn` or `forkserver` worker imports the
file by that name to unpickle one of them (as it imports `__main__`'s under Python); where it is
not free, the worker imports it by the private name, from a stub (`warmcli.warming.worker_names`).
`load_module` imports a module by its dotted name as `python -m` does (the current folder
first on `sys.path`; a package's `__main__` where it has one), so a workload inside a
package may use relative imports. Every way this can go wrong (a missing file, `w` for `w.py`,
or module, `-m w.py`, `-m stat` built into Python, each said so; a file that is not Python (a
notebook told how to make one: `warmcli.warming.workload_file`), a syntax error, an import that
raises (but a print of it that meets stdout's reader gone, which the worker ends on as
below), no entry point, an entry point that takes no runtime argument, an exception (any
`BaseException` but Ctrl-C's, and a `BrokenPipeError` of stdout's reader gone, `| head`,
which the worker ends on with exit 1 as Python does) or a `sys.exit` inside the entry point
(but one its own SIGINT, SIGTERM or SIGHUP handler made, called for that signal: a stop,
`KeyboardInterrupt`; `warmcli.warming.stop_signals.stopped_by_signal`) becomes
one `WorkloadError` whose message names the workload's own file and line (a file of a package
whose relative import, or import of its own package by name, fails, run as a script, is told
its `-m` name: `warmcli.warming.script_main.as_module`). An entry that returns, raises or exits
after catching warm's stop (`pytest.main` turns Ctrl-C into its code) is stopped all the same:
`KeyboardInterrupt`. With a fallback entry (`main()` of a
PyCUDA script, `--pycuda`), a file without `workload` uses it (as does `--entry main`; a
function another `--entry` names and the file lacks is refused, never replaced), and it may
take no argument (or only defaulted ones, `main(argv=None)`): it is then called without the
runtime, as is another entry `--entry` names that takes none. Either way the runtime is
bound while the entry runs (`warmcli.runtime.binding`), so PyCUDA-style launches go through it;
an `async def` or generator entry is run to its end (`asyncio.run`, or iterated: calling it ran
nothing), and the working folder and the `sys.path` it changes are put back after each run (each
pass starts where the first did; a relative bundle path holds, and warm's own imports after it);
while it is imported, `sys.argv` is `[its path]`, as Python gives a script run with no arguments
(not warm's command line), and each run starts with the `sys.argv` its import left (a script's
own defaults). A run waits, as Python does before a process ends, for the non-daemon threads the
entry left running (not an idle pool worker), and an exception a thread of it does not catch ends
that thread as under Python, said in one line (a note of the pass) where Python would print its
traceback; a process the entry forked that returns or raises out of it ends there (`os._exit`;
what it raised said in one line on its stderr), never running warm's passes beside its parent,
and so does one it forked at import as that import ends (`warmcli.warming.leftovers`).
While it is imported, `warmcli.runtime()` hands out a runtime bound late
(`warmcli.late_runtime.late_runtimes`): what the entry does on it is warmed; what the import
itself does on it runs unwarmed, and where is kept (`unbound`); in a GPU-less pre-build
(`gpu_less`: `--arch`) an import that failed for want of a GPU is said so. The module owns
nothing once loaded; it never runs the passes itself. A fallback `main(argv)` whose
argument is required is passed what the script's `if __name__ == "__main__":` block passes
it (`sys.argv`, `sys.argv[1:]`), else the runtime; a failure on it names that call (`script_main`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from warmcli.errors import DeviceError, ScratchError, ToolchainError, WorkloadError, message_of
from warmcli.late_runtime import late_runtimes
from warmcli.records import Record
from warmcli.warming.leftovers import (
    ThreadRaised,
    argparse_hint,
    first_line,
    forked_child_ends,
    import_ends_forked_child,
    import_raised,
    join_left,
    named,
    said_of,
    stdout_reader_gone,
    where,
)
from warmcli.warming.script_main import as_module, main_argv, no_entry_hint, passed_hint
from warmcli.warming.stop_signals import stop_sent, stopped_by_signal, stopped_if_sent
from warmcli.warming.worker_names import importable_by_stub, importable_name, known_by
from warmcli.warming.workload_file import check_workload_file, module_path_hint, no_such_module

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_POSITIONAL += (inspect.Parameter.VAR_POSITIONAL,)


class Workload(Record):
    """A workload as loaded (a `Record`: a dataclass made code at import, ~0.6 ms a run)."""

    path: Path
    entry: str
    module: ModuleType
    function: Callable[[Any], Any]
    unbound: str = ""  # where its import used `warmcli.runtime()` before any pass (not warmed)
    argv: tuple[str, ...] = ()  # the `sys.argv` its import left: each pass starts with it
    fallback: bool = False  # a PyCUDA script's `main()`: only a required parameter is the runtime
    # what that `main(argv)` is passed, of the script's `sys.argv` (`main_argv`, read once)
    main_args: Callable[[list[str]], list[str]] | None = None

    @property
    def device_hint(self) -> str | None:
        """The workload's own `DEVICE` ("host" or "cuda"), if it names one."""
        hint = getattr(self.module, "DEVICE", None)
        return hint if isinstance(hint, str) else None

    @property
    def takes_runtime(self) -> bool:
        """Whether the entry takes the runtime (`workload(rt)`) or nothing (`main()`; and a
        fallback `main(argv=None)`, whose defaulted parameter is the script's, not warm's)."""
        try:
            parameters = inspect.signature(self.function).parameters.values()
        except (TypeError, ValueError):
            return True
        if self.fallback:
            return any(p.kind in _POSITIONAL[:2] and p.default is p.empty for p in parameters)
        return any(p.kind in _POSITIONAL for p in parameters)

    def _argument(self, runtime: Any) -> Any:
        """The runtime, but a fallback `main(argv)`'s argv: what its script passes it
        (`sys.argv`, `sys.argv[1:]`; `main_argv`), from the script's `sys.argv` now."""
        return runtime if self.main_args is None else self.main_args(sys.argv)

    def run(self, runtime: Any, pass_name: str) -> None:
        """Call the entry with `runtime` bound (PyCUDA-style launches go through it)."""
        from warmcli.runtime.binding import bound_runtime

        try:  # each pass starts where the first did, whatever it `chdir`s
            folder: str | None = os.getcwd()
        except OSError:  # the folder was removed (by an earlier pass): nothing to go back to
            folder = None
        path = list(sys.path)  # and with the import path it had (warm imports after it)
        pid, running = os.getpid(), set(threading.enumerate())
        gpu_less = not getattr(getattr(runtime, "device", None), "can_execute", True)
        hook = ThreadRaised(pass_name, self.path, gpu_less)
        if threading.excepthook is threading.__excepthook__:  # (not one the workload set)
            threading.excepthook = hook
        try:
            with bound_runtime(runtime), script_argv(self.argv or [str(self.path)]):
                result = (
                    self.function(self._argument(runtime))
                    if self.takes_runtime
                    else self.function()
                )
                _run_to_its_end(result)
                join_left(running)
                stopped_if_sent(pid)  # Ctrl-C the workload caught (pytest's): stopped, first
                hook.ended()  # a thread ended by what only this pass refuses: its failure
                forked_child_ends(pid, 0)
        except (WorkloadError, KeyboardInterrupt) as exc:  # Ctrl-C stays an interruption
            forked_child_ends(pid, exc if isinstance(exc, KeyboardInterrupt) else 1)
            raise
        except SystemExit as exc:
            forked_child_ends(pid, exc)
            if stopped_by_signal(exc) or stop_sent():  # its SIGTERM handler's sys.exit: stopped
                raise KeyboardInterrupt from None
            raise WorkloadError(
                f"{where(exc, self.path)}workload called sys.exit({exc.code!r}) during "
                f"{pass_name}: a workload returns, it does not exit the process{argparse_hint(exc)}"
            ) from None
        except (ToolchainError, ScratchError) as exc:  # the machine's: not the workload's code
            forked_child_ends(pid, 1)
            at = where(exc, self.path).rstrip(": ")
            raise WorkloadError(
                f"{message_of(exc).strip()}; needed at {at} during {pass_name}"
            ) from exc
        except BaseException as exc:  # any other, its own `BaseException` class included
            stopped_if_sent(pid)  # raised on what a stop made (pytest's code): the stop
            if isinstance(exc, BrokenPipeError) and stdout_reader_gone():  # `| head`: exit 1
                forked_child_ends(pid, 1)
                raise
            said = where(exc, self.path) + named(type(exc).__name__, said_of(exc))
            said += hook.rose_from(exc) + passed_hint(self.path, self.entry, runtime, exc)
            forked_child_ends(pid, 1, f"warm: a process the workload forked raised: {said}")
            raise WorkloadError(f"workload raised during {pass_name}: {said}") from exc
        finally:
            if threading.excepthook is hook:
                threading.excepthook = threading.__excepthook__
            if isinstance(sys.path, list):  # the list others may hold, as it was
                sys.path[:] = path
            else:  # none left (`sys.path = None`): a list again
                sys.path = path
            if folder is not None:
                with contextlib.suppress(OSError):  # a folder the workload removed stays left
                    os.chdir(folder)


def _run_to_its_end(result: Any) -> None:
    """What calling an `async def` or generator workload returned, run to its end (calling
    it ran nothing): a coroutine by `asyncio.run`, a generator by iterating it."""
    if inspect.isgenerator(result):
        for _ in result:
            pass
    elif inspect.iscoroutine(result) or inspect.isasyncgen(result):
        import asyncio

        async def drained() -> None:
            async for _ in result:
                pass

        asyncio.run(result if inspect.iscoroutine(result) else drained())


@contextlib.contextmanager
def script_argv(argv: Sequence[str]) -> Iterator[list[str]]:
    """`sys.argv` a copy of `argv` (at import: `[path]`, as Python gives a script run with
    no arguments), not warm's own command line, while the workload is imported or run: one
    that parses its command line (`argparse`) runs as under `python workload.py`. Yields
    a list that holds, after, the `sys.argv` the workload left; warm's is put back."""
    warms, left = sys.argv, list[str]()
    sys.argv = list(argv)
    try:
        yield left
    finally:
        if isinstance(sys.argv, (list, tuple)):
            left[:] = sys.argv
        sys.argv = warms


def _first_on_path(folder: str) -> None:
    """Put `folder` first on `sys.path`, as Python does for the script or `-m` it runs."""
    if not sys.path or sys.path[0] != folder:
        sys.path.insert(0, folder)


def _ran_code(exc: BaseException) -> bool:
    """Whether `exc` was raised by running the module's code (a frame outside the import
    machinery), not by reading or compiling its source (null bytes, a bad encoding)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f.filename != __file__ and not f.filename.startswith("<frozen") for f in frames)


def _import_failure(exc: BaseException, path: Path | str, gpu_less: bool) -> WorkloadError:
    if isinstance(exc, SyntaxError) and exc.filename is None:  # null bytes, on Python 3.12+
        return WorkloadError(f"{path}: not a Python source file ({exc.msg})")
    if isinstance(exc, SyntaxError):
        return WorkloadError(f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}")
    if isinstance(exc, UnicodeDecodeError | ValueError) and not _ran_code(exc):
        return WorkloadError(f"{path}: not a Python source file ({first_line(exc)})")
    if isinstance(exc, ToolchainError | ScratchError):  # the machine's: not the workload's
        at = where(exc, Path(path)).rstrip(": ")
        return WorkloadError(f"{first_line(exc)}; needed at {at} while the workload was imported")
    if isinstance(exc, SystemExit):
        failure = f"it called sys.exit({exc.code!r}){argparse_hint(exc)}"
    elif gpu_less and isinstance(exc, DeviceError):  # its own hint is no GPU-less run's
        failure = "DeviceError: it used a GPU at import, and a GPU-less pre-build (--arch) has "
        failure += "none: warm builds what the entry function does on its runtime: do it there"
    else:
        failure = named(type(exc).__name__, first_line(exc))
    from warmcli.backends.cuda.device import pycuda_stands_in  # (a failed import's only)

    stand_in = pycuda_stands_in()  # --pycuda --arch: its missing modules are no hint's
    if (
        isinstance(exc, ModuleNotFoundError)
        and (exc.name or "").split(".")[0] == "pycuda"
        and not stand_in
    ):
        failure += " (a PyCUDA script: warm run --pycuda, and --arch sm_XX without a GPU)"
    if isinstance(exc, ImportError) and "no known parent package" in str(exc):
        failure += as_module(Path(path))
    elif isinstance(exc, ModuleNotFoundError) and exc.name:  # its own package, by its name?
        failure += as_module(Path(path), exc.name)
    return WorkloadError(f"{where(exc, Path(path))}workload failed to import: {failure}")


def _entry(
    module: ModuleType, path: Path, entry: str, fallback: str | None = None, unbound: str = ""
) -> Workload:
    """The module's entry point, which must take the runtime as its one argument; else
    `fallback` (a PyCUDA script's `main()`), called with the runtime or without. `unbound`:
    where the import used `warmcli.runtime()` (a notebook-style script's top-level work)."""
    if not entry.strip():
        raise WorkloadError("the entry function's name is empty: name it, or leave out --entry")
    function = getattr(module, entry, None)
    main = callable(getattr(module, fallback or "", None))  # (`--entry main` names it too)
    named = entry not in ("workload", fallback)  # `--entry NAME`: that, never main() instead
    if fallback and main and (entry == fallback or not (named or callable(function))):
        function = getattr(module, fallback)
        return Workload(
            path, fallback, module, function, fallback=True, main_args=main_argv(path, fallback)
        )
    if not callable(function):
        also = f" or {fallback}()" if fallback and not named else ""
        hint = no_entry_hint(path, entry, unbound)
        raise WorkloadError(f"{path}: defines no function {entry}(runtime){also}{hint}")
    try:
        inspect.signature(function).bind(None)
    except TypeError:
        with contextlib.suppress(TypeError):  # --pycuda's entry taking nothing: as its main()
            if fallback and inspect.signature(function).bind() is not None:
                args = main_argv(path, entry)
                return Workload(path, entry, module, function, fallback=True, main_args=args)
        code = getattr(function, "__code__", None)
        at = f"{code.co_filename}:{code.co_firstlineno}" if code else str(path)
        raise WorkloadError(
            f"{at}: {entry}{inspect.signature(function)} must take the runtime as its one "
            f"argument: def {entry}(runtime):"
        ) from None
    except ValueError:  # no signature to read (a builtin): called as it is
        pass
    return Workload(path, entry, module, function)


def load_workload(
    path: str | Path, entry: str = "workload", fallback: str | None = None, gpu_less: bool = False
) -> Workload:
    """Import the workload file (its folder first on `sys.path`) and find its entry point
    (else `fallback`, if it has one). `gpu_less`: for a pre-build (`--arch`), whose import
    finds no GPU (its failure to is said so)."""
    path = Path(path)
    check_workload_file(path)  # a Python file (a folder, a notebook, each said so)
    resolved = path.resolve()
    _first_on_path(str(resolved.parent))
    stem = importable_name(resolved)
    name = "warm_workload_" + hashlib.sha256(os.fsencode(resolved)).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    pid = os.getpid()
    try:
        with late_runtimes() as unbound, script_argv([str(resolved)]) as argv:
            spec.loader.exec_module(module)
        import_ends_forked_child(pid, None)  # a process it forked at import ends here
    except KeyboardInterrupt as exc:
        import_ends_forked_child(pid, exc)
        raise
    except BaseException as exc:  # SystemExit and a workload's own BaseException too
        sys.modules.pop(name, None)  # (a stop, or `| head`'s reader gone: see `import_raised`)
        raise import_raised(pid, exc, _import_failure(exc, resolved, gpu_less)) from None
    if stem is not None:
        known_by(module, stem, resolved)
    else:  # a worker imports it by its private name, through a stub
        importable_by_stub(name, resolved)
    found = _entry(module, resolved, entry, fallback, "".join(unbound))
    return Workload(**{**found.as_fields(), "unbound": "".join(unbound), "argv": tuple(argv)})


def _package_main(spec: Any) -> str | None:
    """The path of the `__main__.py` of the package `spec` finds, or None when it has none:
    looked for in its folders, never imported (its import, and the package's, raise where
    the workload's import is guarded)."""
    for folder in spec.submodule_search_locations or ():
        main = os.path.join(folder, "__main__.py") if isinstance(folder, str) else ""
        if main and os.path.isfile(main):
            return main
    return None


def load_module(
    name: str, entry: str = "workload", fallback: str | None = None, gpu_less: bool = False
) -> Workload:
    """Import the workload module `name` (dotted, e.g. `pkg.module`) as `python -m` would:
    the current folder first on `sys.path`, relative imports inside its package working,
    a package's `__main__` module where it has one (else, or where that defines no `entry`
    and the package does, as a command-line script there does not, the package itself);
    `fallback` and `gpu_less` as for `load_workload`."""
    if not name.strip():
        raise WorkloadError("the module name is empty: name a module (pkg.module)")
    if name.startswith(".") or "/" in name or os.sep in name:  # as `python -m` refuses it
        raise WorkloadError(no_such_module(name, None))
    _first_on_path(os.getcwd())
    try:
        spec = importlib.util.find_spec(name)  # imports the packages above it
    except ModuleNotFoundError as exc:  # where it is `name`'s own package: where it looked
        at = f"; looked in {os.getcwd()} first" if f"{name}.".startswith(f"{exc.name}.") else ""
        why = module_path_hint(name) or first_line(exc) + at  # (`-m w.py`: Python's hint)
        raise WorkloadError(f"{name}: no such workload module ({why})") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit and a workload's own BaseException too
        raise _import_failure(exc, name, gpu_less) from None
    found = spec.origin if spec is not None else None
    if spec is not None and spec.submodule_search_locations is not None:
        main = _package_main(spec)  # a package: `python -m` runs its `__main__`
        if main is not None:
            name, found = f"{name}.__main__", main
    if spec is None or found in (None, "built-in", "frozen"):
        raise WorkloadError(no_such_module(name, found, spec, entry))
    origin, pid = Path(found), os.getpid()
    try:
        with late_runtimes() as unbound, script_argv([str(origin)]) as argv:
            module = importlib.import_module(name)
        import_ends_forked_child(pid, None)  # a process it forked at import ends here
    except KeyboardInterrupt as exc:
        import_ends_forked_child(pid, exc)
        raise
    except BaseException as exc:  # SystemExit and a workload's own BaseException too
        raise import_raised(pid, exc, _import_failure(exc, origin, gpu_less)) from None
    package = sys.modules.get(name[: -len(".__main__")]) if name.endswith(".__main__") else None
    if not hasattr(module, entry) and callable(getattr(package, entry, None)):
        module, origin = package, Path(getattr(package, "__file__", None) or origin)  # its CLI
    found_entry = _entry(module, origin, entry, fallback, "".join(unbound))
    return Workload(**{**found_entry.as_fields(), "unbound": "".join(unbound), "argv": tuple(argv)})
