"""warm's command-line values converted without Pydantic: `plain(descriptor)`.

Typer (0.2x) converts each parameter's value through a Pydantic `TypeAdapter`, which
costs every `warm` command Pydantic's import and a schema build per parameter: most
of the CLI's start. warm's parameters are all plain (`str`, `Path`, `int` and `float`
with a minimum, `bool`, `list[str]`), so `WarmCommand` gives each such parameter this
converter instead (same values, same messages as Typer's, but an empty path refused,
never taken as `.`, and an option's value that is one of the command's own options,
`-b -q`, refused as a value forgotten); any other annotation, or a Typer without this seam,
keeps Typer's own. It owns no state and never prints.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args, get_origin

_INT = re.compile(r"[+-]?[0-9]+(_[0-9]+)*(\.0+)?")
_NOT_INT = "Input should be a valid integer, unable to parse string as an integer"
_NOT_NUMBER = "Input should be a valid number, unable to parse string as a number"
_BOOLS = {
    **dict.fromkeys(("1", "on", "t", "true", "y", "yes"), True),
    **dict.fromkeys(("0", "off", "f", "false", "n", "no"), False),
}


def _to_int(text: str) -> int:
    text = text.strip()
    if not _INT.fullmatch(text):
        raise ValueError(_NOT_INT)
    return int(text.split(".")[0])


def _to_float(text: str) -> float:
    try:
        return float(text.strip()) if text.isascii() else float("x")
    except ValueError:
        raise ValueError(_NOT_NUMBER) from None


def _to_bool(value: Any, param: Any, ctx: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip()  # (as Typer: blank is False)
    if text and text.lower() not in _BOOLS:
        raise ValueError("Input should be a valid boolean, unable to interpret input")
    return bool(text) and _BOOLS[text.lower()]


def _leaf(annotation: Any, info: Any) -> Any:
    """A converter of one value for `annotation`, or None where Typer's own must do."""
    if info.parser is not None or getattr(info, "clamp", False):
        return None
    if annotation is bool:
        return _to_bool
    if annotation is str:
        return lambda value, param, ctx: str(value)
    if annotation is Path and info.path_type is None:
        from typer._param_types import coerce_cli_path

        def path(value: Any, param: Any, ctx: Any) -> Path:
            # Typer's own checks on disk (readable...), given no type to build (no Pydantic)
            if value == "":  # (else `Path("")`: `.`, the working folder, blamed for it)
                raise ValueError("the path is empty: name a file")
            try:
                checked = coerce_cli_path(value, info, path_type=None, param=param, ctx=ctx)
            except ValueError as exc:  # (a NUL in the path): said as Typer's Pydantic says it
                raise ValueError(f"Value error, {exc}") from None
            return checked if isinstance(checked, Path) else Path(checked)

        return path
    if annotation in (int, float):
        low, high = info.min, info.max
        parse = _to_int if annotation is int else _to_float

        def number(value: Any, param: Any, ctx: Any) -> Any:
            number = parse(value) if isinstance(value, str) else annotation(value)
            if number != number:  # nan: no bound holds, nor says why
                raise ValueError("Input should be a valid number, not NaN (not a number)")
            if high is not None and not number <= high:  # first, as Pydantic
                raise ValueError(f"Input should be less than or equal to {high}")
            if low is not None and not number >= low:
                raise ValueError(f"Input should be greater than or equal to {low}")
            return number

        return number
    return None


def _not_an_option(values: Any, param: Any, ctx: Any) -> None:
    """ValueError where an option's value is one of its command's own options (`warm run
    w.py -b -q`: the parser took `-q` for `-b`'s value, which was forgotten)."""
    command = getattr(ctx, "command", None)
    if command is None or getattr(param, "param_type_name", "") != "option":
        return
    named = [(*each.opts, *each.secondary_opts) for each in command.params]
    options = {name for names in named for name in names if name.startswith("-")}
    for value in values if isinstance(values, list | tuple) else [values]:
        if isinstance(value, str) and value.split("=")[0] in options:
            raise ValueError(f"{value} is an option of warm {command.name}: the value is missing")


def plain(descriptor: Any) -> Any:
    """A Typer `RuntimeParam` for `descriptor` that needs no Pydantic, or None."""
    try:
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
        from typer._param_types import coerce_cli_path  # noqa: F401 (the seam _leaf uses)
    except ImportError:  # a Typer without the seam: its own conversion stands
        return None
    annotation, info = descriptor.annotation, descriptor.parameter_info
    if descriptor.file_annotation is not None:
        return None
    many = get_origin(annotation) is list
    leaf = _leaf(get_args(annotation)[0] if many else annotation, info)
    if leaf is None:
        return None

    class Plain(RuntimeParam):  # type: ignore[misc]
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                _not_an_option(value if many else [value], param, ctx)
                if not many:
                    return leaf(value, param, ctx)
                values = value if isinstance(value, list | tuple) else [value]
                return [leaf(v, param, ctx) for v in values]
            except ValueError as exc:
                raise BadParameter(str(exc), ctx=ctx, param=param) from exc

    return Plain(parameter_info=info, annotation=annotation)


def install(params: list[Any]) -> None:
    """Give each of `params` (Typer parameters) that is plain the converter above."""
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", None) is not None:
            continue
        param._runtime_param = plain(descriptor)
