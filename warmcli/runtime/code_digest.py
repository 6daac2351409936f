"""A digest of what a Python function's code does, the same in every process that runs it.

A checked tunable keys its check and launch function by their code (`check_keys`), so a
bundle warmed by one process serves another only where both hash the code alike. The
digest is of the instructions as `dis` reads them, each with what it uses (a constant's
value, a name, a jump's target by its place among the instructions), not of the raw
bytecode (a constant read by its index from the code's own table: a call's keyword names
too): `python -OO` strips docstrings, which shifts every constant's index and leaves a
`NOP` in the docstring's place, so a raw hash would differ for code that does the same.
Constants no instruction loads (a function's docstring) are left out; code nested in a
constant (a lambda, an inner function) is digested alike. What the instructions alone do
not say is in it too: the code's signature (its counts of parameters, its flags, its
variable names in order: `LOAD_FAST` names a variable, not its place, so `(out, inp)` and
`(inp, out)` differ only there) and its exception table (what each `try` covers), by
instruction place. What
`python -O` removes (an `assert`) is code that differs: a different digest. It follows
the Python version (its bytecode). Its only state is a bounded memo per code object; it
runs no code it reads.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import types
from typing import Any


def constant_text(value: Any) -> str:
    """A code constant's text, the same in every process (a frozenset sorted, code digested)."""
    if isinstance(value, types.CodeType):
        return f"code:{code_digest(value)}"
    if isinstance(value, tuple):
        return "(" + ",".join(constant_text(v) for v in value) + ")"
    if isinstance(value, frozenset):
        return "frozenset(" + ",".join(sorted(constant_text(v) for v in value)) + ")"
    return f"{type(value).__name__}:{value!r}"


# The flags that say how the code runs (its `*args`, `**kwargs`, a generator, a coroutine):
# CO_OPTIMIZED to CO_ASYNC_GENERATOR but CO_NESTED (defined inside a function). Not the
# `__future__` flags (what they change is in the instructions; a `compile` call inherits
# them from its caller), nor Python 3.14's CO_HAS_DOCSTRING (`-OO` clears it).
_BEHAVIOUR = 0x3FF & ~0x10


@functools.lru_cache(maxsize=1024)
def code_digest(code: types.CodeType) -> str:
    """The sha256 of `code`'s instructions (`NOP`s left out), each as its name and what it
    uses: a constant by its value, a jump by its target's place, anything else by `dis`'s
    value (a name, a count)."""
    import dis  # imported on first use: a tunable with a check callable only

    steps = [i for i in dis.get_instructions(code) if i.opname not in ("NOP", "EXTENDED_ARG")]
    place = [i.offset for i in steps]  # ascending: an instruction's place is its index
    jumps = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
    parts = []
    for step in steps:
        if step.opcode in dis.hasconst:  # by its index: 3.11's dis gives KW_NAMES no value
            used = constant_text(_constant(code, step))
        elif step.opcode in jumps and isinstance(step.argval, int):
            used = f"->{_target(place, step.argval)}"
        else:
            used = repr(step.argval)
        parts.append(f"{step.opname} {used}")
    parts += code.co_names  # (as before: a name read only through `getattr` text counts)
    counts = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)
    parts.append(f"signature {counts} {code.co_flags & _BEHAVIOUR}")
    parts += [repr(code.co_varnames), repr(code.co_cellvars), repr(code.co_freevars)]
    for entry in dis.Bytecode(code).exception_entries:  # what each `try` covers, by place
        ends = (_target(place, o) for o in (entry.start, entry.end, entry.target))
        parts.append(f"try {tuple(ends)} {entry.depth} {entry.lasti}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _constant(code: types.CodeType, step: Any) -> Any:
    """The constant `step` uses, read from `code`'s own table where its index is in it (a
    call's keyword names too: Python 3.11's `dis` shows them as `<unknown>`)."""
    if isinstance(step.arg, int) and 0 <= step.arg < len(code.co_consts):
        return code.co_consts[step.arg]
    return step.argval


def _target(place: list[int], offset: int) -> int:
    """The place of the instruction at `offset`, or of the first one after it (a `NOP`
    target, left out)."""
    return bisect.bisect_left(place, offset)  # (one search: a check may have many jumps)
