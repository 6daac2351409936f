"""A command's help under `python -OO` (`PYTHONOPTIMIZE=2`): its docstring read back from its
source, which that mode drops from the function (Typer's help for a command is its docstring:
`warm --help` listed the commands with no line each, `warm run -h` said nothing of what it
does). Where the source is not there (an install of bytecode only) the help stays empty. It
holds no state and prints nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any


def with_docstring(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, its `__doc__` read from its source where Python dropped it (else as it is)."""
    if function.__doc__ is None:
        import ast  # imported here: only under -OO is a docstring read back
        import inspect
        import textwrap

        with contextlib.suppress(OSError, TypeError, SyntaxError, IndexError):
            node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                function.__doc__ = ast.get_docstring(node, clean=False)
    return function
