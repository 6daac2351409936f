"""What of a tunable's `check=` callable keys its tunes: its identity as text.

`check_identity` renders a `check=` spec as text stable across processes: a candidate's
name, or a callable by its qualified name and a digest of what its code does
(`warmcli.runtime.code_digest`; one with no Python code, by its module and qualified
name), with the module state and helpers it reads (`_MAX_HELPERS` calls deep: those of its
own module, and those of the user's code, any module whose file is outside the standard
library and the site-packages folders, such as a `checks.py` beside the workload; a
library's only by its name), its object's settings (its own, and its class's it reads),
and the callables it holds (a closure's, a default's, a partial's, its object's);
`judged_identity` adds the launch function the check judged.
Each function it holds or calls is keyed once per object it is a method of (two objects
of one class, apart), each partial once: the walk is as long as what the check reaches,
never a lattice. Split from `warmcli.runtime.tune_spec`, whose input rendering it shares.
Its only state is a memo of what each check's code assigns; it never runs a kernel or a
check.
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from warmcli.runtime.code_digest import code_digest
from warmcli.runtime.tune_spec import _WHOLE
from warmcli.runtime.users_code import located, same_package, users_file, users_module

_MAX_HELPERS = 16  # how deep a check's calls to its module's helpers are keyed
_ABSENT = object()


def _function(check: Callable[..., Any]) -> Any:
    """The Python function behind a check callable (a method's, an object's `__call__`)."""
    if isinstance(check, types.MethodType):
        return check.__func__
    if isinstance(check, types.FunctionType):
        return check
    if isinstance(check, staticmethod | classmethod):  # one held in a class's namespace
        return check.__func__
    return type(check).__call__


def _plain(value: Any, arrays: bool = True) -> bool:
    """Whether `value`'s `_text` is the same in every process: a number (numpy's too), text,
    an Enum member of one, a short numeric array (not if `arrays` is False: the check writes
    by index), a tuple of them. No list or dict: a cache the workload fills as it runs."""
    if isinstance(value, tuple):
        return all(_plain(v, arrays) for v in value)
    if isinstance(value, enum.Enum):  # `Level.TOL`: its value
        return _plain(value.value, arrays)
    if isinstance(value, np.ndarray):  # `np.array([0.1])`: whole in its text
        return arrays and value.dtype.kind in "biufc" and value.size <= _WHOLE
    return value is None or isinstance(value, str | int | float | bytes | np.number | np.bool_)


def _text(value: Any) -> str:
    """A plain value's `repr`; an int too long for it (past Python's 4,300 digits), in hex;
    a numpy number's type and value (not its repr: numpy 2 and 1 print it apart, `np.float64
    (0.1)` and `0.1`; `np.bool_` is `bool` in numpy 2, `bool_` in 1), in a tuple too."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}={_text(value.value)}"
    if isinstance(value, np.ndarray):  # every digit (numpy prints 8 by default)
        return f"{value.dtype}{list(value.shape)}{np.array2string(value, floatmode='unique')}"
    if isinstance(value, np.number | np.bool_):  # np.float64 too, a float of its own repr
        name = "bool" if isinstance(value, np.bool_) else type(value).__name__
        return f"{name}({value.item()!r})"
    if isinstance(value, tuple) and _holds_numpy(value):  # (a plain tuple keyed as before)
        return "(" + ",".join(_text(v) for v in value) + ")"
    try:
        return repr(value)
    except ValueError:
        if isinstance(value, tuple):
            return "(" + ",".join(_text(v) for v in value) + ")"
        return hex(value)


def _holds_numpy(value: tuple[Any, ...]) -> bool:
    """Whether a tuple holds a numpy number, in a tuple in it too."""
    return any(
        isinstance(v, np.number | np.bool_) or (isinstance(v, tuple) and _holds_numpy(v))
        for v in value
    )


def _callable_identity(
    check: Callable[..., Any], seen: set[Any] | None = None, depth: int = 0
) -> list[Any]:
    """`check`'s identity (see `check_identity`); `seen`: the helpers this walk keyed already,
    each keyed once where first reached (not once per path: helpers calling each other as a
    lattice have millions), `depth` calls below the check."""
    seen = set() if seen is None else seen
    if isinstance(check, functools.partial):
        seen.add(_walked(check))
        given = [*check.args, *sorted(check.keywords.items())]
        inner = getattr(_function(check.func), "__code__", None)
        shown = [_text(v) for v in given if _plain(v)]
        for v in (v for v in (*check.args, *check.keywords.values()) if _holder(v)):
            shown += _attributes("arg", v, getattr(inner, "co_names", ()), True)  # `cfg.tol`
        named = [*((f"arg{i}", v) for i, v in enumerate(check.args)), *given[len(check.args) :]]
        shown += _functions(named, _function(check.func), seen, depth)  # `cmp=np.allclose`
        return [_once(check.func, seen, depth), shown]
    function = _function(check)
    seen.add(_walked(check))
    code = getattr(function, "__code__", None)
    names = code.co_names if isinstance(code, types.CodeType) else ()
    cells = getattr(function, "__closure__", None) or ()
    held = [
        *(getattr(function, "__defaults__", None) or ()),
        *sorted((getattr(function, "__kwdefaults__", None) or {}).items()),
        *(c.cell_contents for c in cells if _filled(c)),
    ]
    stored = _stored(code, _owner(check))  # what it records as it runs: no setting
    arrays = _SUBSCRIPT not in stored
    keyed = tuple(n for n in names if n not in stored)
    shown: list[Any] = [_text(located(v, function)) for v in held if _plain(v, arrays)]
    for v in (v for v in held if not _plain(v, arrays) and _holder(v)):  # a closure's `cfg`
        shown += _attributes("held", v, keyed, arrays)
    shown += _state(check, stored, keyed)
    free = getattr(code, "co_freevars", ())
    names_held = [  # a function it holds: `make_check(strict)`'s, `judge=strict`'s
        *((f"default{i}", v) for i, v in enumerate(getattr(function, "__defaults__", None) or ())),
        *sorted((getattr(function, "__kwdefaults__", None) or {}).items()),
        *((n, c.cell_contents) for n, c in zip(free, cells, strict=False) if _filled(c)),
        *_attributes_held(_owner(check), stored),  # `Judge(strict)`'s `self.judge`
    ]
    shown += _functions(names_held, function, seen, depth)
    space = getattr(function, "__globals__", None) or {}  # a module-level tolerance it reads
    for name in names:
        value = _unwrapped(space.get(name))  # `@functools.cache def tol_for`: its function
        if name in stored:  # a global it counts into as it runs (`global N; N += 1`)
            continue
        if name in space and _plain(value, arrays):  # none: keyed as before globals were
            shown.append(f"{name}={_text(located(value, function))}")
        elif _holder(value):  # one read through it: `cfg.RTOL`, `Config.RTOL`, `CFG.tol`
            shown += _attributes(name, value, keyed, arrays)
            if isinstance(value, types.ModuleType) and users_module(value, function):
                shown += _module_helpers(name, value, keyed, seen, depth)  # `checks.close`
        # a helper of its module (by name, or globals: `warm run` renames not all it holds),
        # or of the user's code elsewhere (`from checks import close`)
        elif (
            isinstance(value, types.FunctionType)
            and _helper(value, function, space)
            and _walked(value) not in seen
            and depth < _MAX_HELPERS
        ):
            shown.append([name, _callable_identity(value, seen, depth + 1)])
        elif (library := _library_callable(value, function, space)) is not None:
            shown.append(f"{name}=<{library}>")  # `compare = np.greater`: which one it names
    if not isinstance(code, types.CodeType):  # a builtin, C or Cython function: by its name
        return [_native_name(check), "", shown]  # (its type's `__call__` is every one's)
    return [getattr(function, "__qualname__", type(check).__qualname__), code_digest(code), shown]


def _functions(held: list[tuple[str, Any]], function: Any, seen: set[Any], depth: int) -> list[Any]:
    """The callables among `held` (named values a check holds: a closure's, a default's, a
    partial's, its object's), each as the helpers it calls are: one of the check's own
    module or the user's code (a function, a method, an object with a `__call__`) keyed
    alike, once; a library's by its module and name; a partial by what it holds."""
    space = getattr(function, "__globals__", None) or {}
    shown: list[Any] = []
    for name, value in held:
        if not callable(value) or isinstance(value, type) or depth >= _MAX_HELPERS:
            continue
        value = _unwrapped(value)
        if isinstance(value, functools.partial):
            shown.append([name, _once(value, seen, depth + 1)])
            continue
        inner = _function(value)
        if not isinstance(inner, types.FunctionType):  # a builtin, C or Cython function
            shown.append(f"{name}=<{_native_name(value)}>")
        elif _helper(inner, function, space):  # its module's, or the user's code elsewhere
            shown.append([name, _once(value, seen, depth + 1)])
        else:  # a library's (its state, a logger's say, is none of the check's)
            shown.append(f"{name}=<{inner.__module__}.{inner.__qualname__}>")
    return shown


def _walked(check: Callable[..., Any]) -> tuple[Any, int | None]:
    """What of `check` its walk keys, as `seen` holds it: its function and the object it is
    (a method of), by identity (two objects of one class hold settings apart); a partial
    by its own identity. No code of theirs runs (no `__hash__`, no `__eq__`); each is
    reachable from the check, alive while it is walked."""
    if isinstance(check, functools.partial):
        return functools.partial, id(check)
    owner = _owner(check)
    return _function(check), None if owner is None else id(owner)


def _once(check: Callable[..., Any], seen: set[Any], depth: int) -> Any:
    """`check` keyed (`_callable_identity`) where this walk reaches it first; named only
    where it reached it already (keyed once: no lattice, `self.f = self.g` of every method,
    `self.p = partial(self.m)` of each)."""
    if _walked(check) not in seen:
        return _callable_identity(check, seen, depth)
    if isinstance(check, functools.partial):  # keyed where first reached, with its function
        return "partial"
    return getattr(_function(check), "__qualname__", type(check).__qualname__)


def _attributes_held(owner: Any, stored: set[str]) -> list[tuple[str, Any]]:
    """The attributes of the object a check is (a method of), by name, but dunders and what
    it records as it runs (as `_state` reads the plain ones); none of a class."""
    if owner is None or isinstance(owner, type):  # a class's: its methods, keyed by code
        return []
    held = getattr(owner, "__dict__", None) or {}
    return sorted(
        (f"self.{k}", v)
        for k, v in held.items()
        if isinstance(k, str) and not k.startswith("__") and k not in stored
    )


def _unwrapped(value: Any) -> Any:
    """The Python function a C-level wrapper holds (`functools.cache`'s, `lru_cache`'s:
    `__wrapped__` in its own dict, read with no code of it run), else `value`: its name is
    the function's, its code none, so it was keyed as a builtin, by name."""
    if isinstance(value, types.FunctionType | types.MethodType | functools.partial | type):
        return value
    if not callable(value) or isinstance(_function(value), types.FunctionType):
        return value  # no callable, or one of Python code: keyed by that code
    try:
        own = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        return value
    inner = own.get("__wrapped__") if isinstance(own, dict) else None
    return inner if isinstance(inner, types.FunctionType) else value


def _native_name(check: Callable[..., Any]) -> str:
    """A callable with no Python code as `module.qualname` (`_operator.eq`); an object of
    such a type with no name of its own, as its type's."""
    module, named = getattr(check, "__module__", None), getattr(check, "__qualname__", None)
    if not isinstance(named, str):
        module, named = type(check).__module__, type(check).__qualname__
    return f"{module}.{named}" if isinstance(module, str) else named


def _helper(value: types.FunctionType, function: Any, space: dict[str, Any]) -> bool:
    """Whether `value`, a function the check names, is keyed by its code: one of the check's
    own module or top-level package (wherever installed), or of the user's code
    (`users_file`), not a library's."""
    same = value.__module__ == function.__module__ or value.__globals__ is space
    kin = same_package(value.__module__, getattr(function, "__module__", None))
    return same or kin or users_file(value.__code__.co_filename)


def _module_helpers(
    name: str, module: types.ModuleType, names: tuple[str, ...], seen: set[Any], depth: int
) -> list[Any]:
    """The functions among `names` (a code's names) of a user's `module` the check reads
    through it (`checks.close(a, b)`), each keyed by its code, as deep as `_MAX_HELPERS`."""
    space = vars(module)
    shown: list[Any] = []
    for attribute in names:
        value = space.get(attribute)
        if isinstance(value, types.FunctionType) and depth < _MAX_HELPERS:
            shown.append([f"{name}.{attribute}", _once(value, seen, depth + 1)])
    return shown


def _library_callable(value: Any, function: Any, space: dict[str, Any]) -> str | None:
    """`module.qualname` of a library function a global names (`cmp = np.less`), else None."""
    if isinstance(value, types.FunctionType):
        if _helper(value, function, space):
            return None
    elif not callable(value) or (
        type(value).__module__ != "numpy" and not isinstance(value, types.BuiltinFunctionType)
    ):  # (a ufunc, numpy 2's function dispatchers: of numpy's types; no code runs)
        return None
    module, named = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{named}" if isinstance(module, str) and isinstance(named, str) else None


def _attributes(name: str, holder: Any, names: tuple[str, ...], arrays: bool) -> list[str]:
    """The plain values of the attributes among `names` (a code's names) of `holder`, a
    module, class (and bases) or object (and class), but dunders, read from their dicts:
    no code runs (a module's `__getattr__`, a property)."""
    if isinstance(holder, types.ModuleType):
        spaces = [vars(holder)]
    elif isinstance(holder, type):  # an Enum's members by name too (`Level.TOL.value`)
        members = dict(holder.__members__) if issubclass(holder, enum.Enum) else {}
        spaces = [members, *(vars(c) for c in holder.__mro__)]
    else:  # an object (`CFG.tol`, a frozen dataclass): its own, then its class's
        spaces = [vars(holder), *(vars(c) for c in type(holder).__mro__)]
    shown = []
    for attribute in names:
        found = next((s[attribute] for s in spaces if attribute in s), _ABSENT)
        if found is not _ABSENT and not attribute.startswith("__") and _plain(found, arrays):
            shown.append(f"{name}.{attribute}={_text(found)}")
    return shown


def _holder(value: Any) -> bool:
    """A module, class or object (with a `__dict__`, no callable) a check reads through."""
    ns = isinstance(value, types.ModuleType | type)
    return ns or (hasattr(value, "__dict__") and not callable(value))


def _owner(check: Callable[..., Any]) -> Any:
    """The object a check is a method of, or is; None for a function."""
    owner = getattr(check, "__self__", None) if isinstance(check, types.MethodType) else check
    if isinstance(owner, types.FunctionType | types.BuiltinFunctionType | types.ModuleType):
        return None
    return owner


def _stored(code: Any, owner: Any) -> set[str]:
    """The attribute and global names the check's code, or a method of its class it calls
    (`self._record(e)`), assigns or deletes (`self.worst = ...`, `global N; N += 1`): what
    it records as it runs, apart in each pass and production process (whose served tunes
    run no check). Not what another method sets (`__init__`, a setter): a setting, keyed."""
    methods: dict[str, Any] = {}
    for holder in reversed(getattr(type(owner), "__mro__", ())) if owner is not None else ():
        methods.update((n, f) for n, f in vars(holder).items() if isinstance(f, types.FunctionType))
    pending = [code] if isinstance(code, types.CodeType) else []
    seen: set[Any] = set()
    stored: set[str] = set()
    while pending:
        each = pending.pop()
        if each in seen:
            continue
        seen.add(each)
        stored |= _stored_by(each)
        pending += [methods[n].__code__ for n in each.co_names if n in methods]
    return stored


_STORES = ("STORE_ATTR", "DELETE_ATTR", "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_SUBSCR",
           "DELETE_SUBSCR")  # fmt: skip
_SUBSCRIPT = "[]"  # in `_stored`'s names where the code writes by index (`errors[0] = e`)


@functools.lru_cache(maxsize=1024)
def _stored_by(code: types.CodeType) -> frozenset[str]:
    """The attribute and global names `code` (and code nested in it) assigns or deletes,
    `_SUBSCRIPT` if it writes by index; read once per code object."""
    import dis  # imported on first use: a tunable with a check callable only

    stores = (i for i in dis.get_instructions(code) if i.opname in _STORES)
    names = {_SUBSCRIPT if i.opname.endswith("SUBSCR") else i.argval for i in stores}
    for nested in code.co_consts:
        if isinstance(nested, types.CodeType):
            names |= _stored_by(nested)
    return frozenset(names)


def _state(check: Callable[..., Any], stored: set[str], names: tuple[str, ...]) -> list[str]:
    """The plain attributes of the object a check is (a method of), but dunders (`__module__`
    names the workload as `warm run` imported it) and what it records as it runs; then those
    of its class (and bases) among `names`, its code's, that it has none of its own of (a
    setting in the class body, `rtol = 1e-3`, read as `self.rtol`)."""
    owner = _owner(check)
    held = (getattr(owner, "__dict__", None) or {}) if owner is not None else {}
    arrays = _SUBSCRIPT not in stored
    items = sorted((k, v) for k, v in held.items() if isinstance(k, str) and _plain(v, arrays))
    shown = [f"self.{k}={_text(v)}" for k, v in items if not k.startswith("__") and k not in stored]
    if owner is None or isinstance(owner, type):
        return shown
    spaces = [vars(c) for c in type(owner).__mro__]
    for name in sorted(set(names) - set(held)):
        found = next((s[name] for s in spaces if name in s), _ABSENT)
        if found is not _ABSENT and not name.startswith("__") and _plain(found, arrays):
            shown.append(f"self.{name}={_text(found)}")
    return shown


def check_identity(check: str | Callable[..., Any], tolerance: tuple[float, float]) -> list[Any]:
    """The output check as it keys a tune: a reference candidate's name, or a callable's
    qualified name and code digest with the plain values it holds or reads (defaults,
    closure, a partial's arguments, its object's attributes, globals, `cfg.RTOL`; not what
    it records, `_stored`), the library functions its globals name or it holds, and each
    function of its own module it calls or holds, keyed alike; and the tolerance. Not its
    module's name."""
    tol = [float(t) for t in tolerance]
    if isinstance(check, str):
        return ["check", check, tol]
    return ["check", _callable_identity(check), tol]


def judged_identity(
    check: str | Callable[..., Any], tolerance: tuple[float, float], launch: Callable[..., Any]
) -> list[Any]:
    """A checked tunable's check (`check_identity`) and its launch function, keyed as a
    callable check is: an edit of what the launch passes its candidates can make a pick the
    check passed wrong."""
    return [check_identity(check, tolerance), ["launch", _callable_identity(launch)]]


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True
