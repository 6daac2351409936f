"""What a workload file's `if __name__ == "__main__":` block says, read, never run.

`warm run` imports a workload file and calls its entry function, so the block a script
runs as `python script.py` never runs under warm. `guarded_main` tells whether a file has
one (for the hint `MAIN_GUARD_HINT` errors and empty runs give; `no_entry_hint`, a file's
with no entry function, gives it, or where its import used `warmcli.runtime()` says to move
that work into one, or, for a package's `__init__.py`, names its modules and its subpackages'
that define one),
`runtime_main` whether it
defines a `main` one argument calls (its last, undecorated: the hint `--entry main`), and
`main_argv` what a PyCUDA script's block passes its `main(argv)`: `sys.argv` or
`sys.argv[1:]`, so warm passes the same (the script's own `sys.argv`), not its runtime;
`passed_hint` what it passes instead, for a `main` that failed on the runtime warm passed it;
`block_only_calls` whether the block only calls the entry (no hint for a run that did nothing);
and `as_module`, the `-m` name a file of a package has, for the hint where it fails to
import as a script (from its folders' `__init__.py` files). Read from the files' text (its
syntax tree, for `runtime_main`, `main_argv`, `passed_hint` and a package's modules) and
folders; no state, nothing imported or run, never raises for a file it cannot read or parse.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeGuard

from warmcli.errors import message_of
from warmcli.printable import Pattern

# A script's own entry, at the top level: `if __name__ == "__main__":` (either way round).
_MAIN_GUARD = Pattern(
    r"""(?m)^if[ \t(]+(?:__name__[ \t]*==[ \t]*(['"])__main__\1"""
    r"""|(['"])__main__\2[ \t]*==[ \t]*__name__)"""
)
MAIN_GUARD_HINT = (
    'its `if __name__ == "__main__":` block does not run under warm, which imports the file '
    "and calls its entry function: call that code from there"
)
_MAX_READ = 4 << 20  # a workload file's bytes read for these questions
_MAX_MODULES = 200  # a package's modules read for the modules that define its entry


def _text(path: Path) -> str | None:
    try:
        with open(path, "rb") as source:
            return source.read(_MAX_READ).decode("utf-8", "replace")
    except OSError:
        return None


def no_entry_hint(path: Path, entry: str, unbound: str) -> str:
    """What to add where the workload file at `path` defines no `entry` function: the
    `MAIN_GUARD_HINT` for its `if __name__ == "__main__":` block, `--entry main` for a
    `main` one argument calls, else, where its import used `warmcli.runtime()` at `unbound`
    (a notebook-style script, its GPU work at the top level, never warmed), to move it."""
    hint = f": {MAIN_GUARD_HINT}" if guarded_main(path) else ""
    hint += " (or name its main(...) with --entry main)" if runtime_main(path, entry) else ""
    if unbound and not hint:
        hint = (
            f": its import used warmcli.runtime() at {unbound}, where nothing is warmed: put "
            f"the script's GPU work in def {entry}(rt), on the runtime warm passes it"
        )
    return hint or _package_modules(path, entry)


def _package_modules(path: Path, entry: str) -> str:
    """Where `path` is a package's `__init__.py` (`-m pkg`): `package_modules`' hint for it."""
    if path.name != "__init__.py":
        return ""
    folder, names = path.parent, []
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        names.insert(0, folder.name)
        folder = folder.parent
    return package_modules(path.parent, ".".join(names), entry)


def package_modules(package: Path, name: str, entry: str) -> str:
    """The hint naming, as `-m` names them (under the package's dotted `name`), the first few
    of the modules in folder `package` and in its subpackages that define `entry` at their top
    level (a pattern over their text first, then their syntax tree: read, not run)."""
    defines = Pattern(rf"(?m)^(?:async[ \t]+)?def[ \t]+{re.escape(entry)}[ \t]*\(")
    names, found = [name], []
    modules = [*package.glob("*.py"), *package.glob("*/*.py")]
    for module in sorted(modules)[:_MAX_MODULES]:
        parts = module.relative_to(package).with_suffix("").parts
        if len(parts) == 2 and not (module.parent / "__init__.py").is_file():
            continue  # a folder that is no subpackage
        parts = parts[:-1] if parts[-1] == "__init__" else parts  # a subpackage's: -m pkg.sub
        if not parts or parts[-1] == "__main__":  # the package's own, read already
            continue
        text = _text(module)
        if text is not None and defines.search(text) and _defines(text, entry):
            found.append(f"-m {'.'.join([*names, *parts])}")
    return f" (its modules that define one: {', '.join(found[:5])})" if found else ""


def _defines(text: str, entry: str) -> bool:
    """Whether the module's syntax tree defines `entry` at its top level."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):  # (a null byte)
        return False
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    return any(isinstance(node, kinds) and node.name == entry for node in body)


def guarded_main(path: Path) -> bool:
    """Whether the workload file at `path` has a top-level `if __name__ == "__main__":`
    block (False where it cannot be read)."""
    text = _text(path)
    return text is not None and _MAIN_GUARD.search(text) is not None


def block_only_calls(path: Path, entry: str) -> bool:
    """Whether each `if __name__ == "__main__":` block of the file does nothing but call
    `entry` (`main()`, `sys.exit(main())`, `raise SystemExit(main())`), which warm calls
    itself: its not running under warm is no hint for a run that did nothing."""
    text = _text(path)
    try:
        tree = ast.parse(text) if text is not None else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    blocks = [node for node in (tree.body if tree else ()) if _is_guard(node)]
    return bool(blocks) and all(
        len(node.body) == 1 and len(_guard_calls(ast.Module([node], []), entry)) == 1
        for node in blocks
    )


def _is_guard(node: ast.stmt) -> TypeGuard[ast.If]:
    """Whether `node` is an `if __name__ == ...:` at the top level (as `_guard_calls` reads)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
        return False
    names = [node.test.left, *node.test.comparators]
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)


def runtime_main(path: Path, entry: str) -> bool:
    """Whether the file defines, at its top level, a `main` other than `entry` that one
    argument can call (`main(rt)`, `main(rt=None)`): what `--entry main` would name. The
    last `def main` is the one Python binds; one behind a decorator (`@click.command()`) is
    another callable, which `--entry main` would not call as written: no such main."""
    text = _text(path)
    try:
        tree = ast.parse(text) if text is not None and entry != "main" else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    defined = [
        node
        for node in (tree.body if tree is not None else ())
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "main"
    ]
    if not defined or defined[-1].decorator_list:
        return False
    a = defined[-1].args
    positional = [*a.posonlyargs, *a.args]
    required = len(positional) - len(a.defaults)
    required_kw = sum(d is None for d in a.kw_defaults)
    return required <= 1 and (bool(positional) or a.vararg is not None) and not required_kw


def _is_argv(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "argv"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _guard_calls(tree: ast.Module, name: str) -> list[ast.Call]:
    """The calls of `name(...)` at the top of each `if __name__ == "__main__":` block (a
    statement, or the one argument of another call or a raise: `sys.exit(name(...))`,
    `exit(name(...))`, `raise SystemExit(name(...))`)."""
    calls = []
    for node in tree.body:
        if not _is_guard(node):
            continue
        for statement in node.body:
            call = statement.value if isinstance(statement, ast.Expr) else None
            call = statement.exc if isinstance(statement, ast.Raise) else call
            if (
                isinstance(call, ast.Call)
                and len(call.args) == 1
                and not (isinstance(call.func, ast.Name) and call.func.id == name)
            ):
                call = call.args[0]  # `sys.exit(main(...))`, `raise SystemExit(main(...))`
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                calls += [call] if call.func.id == name else []
    return calls


def main_argv(path: Path, name: str = "main") -> Callable[[list[str]], list[str]] | None:
    """What the file's `if __name__ == "__main__":` block passes `name(argv)`, as a function
    of the script's `sys.argv`: all of it (`main(sys.argv)`) or past its name
    (`main(sys.argv[1:])`); None where the block passes anything else, or there is none."""
    text = _text(path)
    if text is None or _MAIN_GUARD.search(text) is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for call in _guard_calls(tree, name):
        if len(call.args) != 1 or call.keywords:
            continue
        arg = call.args[0]
        if _is_argv(arg):
            return list
        if (
            isinstance(arg, ast.Subscript)
            and _is_argv(arg.value)
            and isinstance(arg.slice, ast.Slice)
            and arg.slice.upper is None
            and arg.slice.step is None
            and isinstance(arg.slice.lower, ast.Constant)
            and arg.slice.lower.value == 1
        ):
            return lambda argv: list(argv[1:])
    return None


def passed_hint(path: Path, name: str, runtime: object, exc: BaseException) -> str:
    """The hint for a fallback `name(arg)` that warm passed its runtime (its block passes it
    neither `sys.argv` form: `main_argv` is None) and that failed on it (`'Runtime' object
    has no attribute 'n'`): the call the block makes, as written (`main(parse_args())`), and
    how to warm the script all the same; else ""."""
    if f"'{type(runtime).__name__}' object" not in message_of(exc):  # (its `__str__` may raise)
        return ""  # failed on something else: the runtime is not its cause
    text = _text(path)
    try:
        tree = ast.parse(text) if text is not None else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    calls = [c for c in _guard_calls(tree, name) if len(c.args) == 1] if tree else []
    calls = [
        c
        for c in calls
        if not _is_argv(c.args[0]) and not _is_argv(getattr(c.args[0], "value", None))
    ]
    if not calls:
        return ""
    call = ast.unparse(calls[0])
    call = call if len(call) <= 80 else call[:77] + "..."
    return (
        f' (warm passed {name} its runtime: the script\'s `if __name__ == "__main__":` '
        f"block, which warm does not run, calls {call}; warm a file of your own whose "
        f"workload(rt) imports the script and calls {call} as that block does)"
    )


def as_module(path: Path, missing: str | None = None, package: bool = False) -> str:
    """The hint for a file of a package run as a script: the `-m` name it has from the folder
    above its outermost package (`__init__.py` folders), where its relative import failed, or
    its import of `missing` where that is its outermost package's name (`import app` in
    `app/warmup.py`: the package's folder is not on `sys.path`); or for a package's folder
    given as the workload (`package`); else ""."""
    folder, names = (path.resolve(), []) if package else (path.resolve().parent, [path.stem])
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        names.insert(0, folder.name)
        folder = folder.parent
    if len(names) < (1 if package else 2) or missing not in (None, names[0]):
        return ""
    what = "a package" if package else "a module of a package"
    return f" ({what}: give -m {'.'.join(names)}, from {folder})"
