"""What of a tunable's spec and inputs keys its tunes, as text stable across processes.

A tune key must come out the same in `warm run` and in every production process, or a
bundle never serves it. This module renders the inputs (`describe_input`; `inputs_text`
names the tunable and input it cannot read), a `key=` callable's value (`key_text`, its
ints written as an input's, `key_ints`: a value whose text is a default object repr,
holding a memory address, a set of no stable order, or a longdouble float64 cannot hold
is refused with a `TuneSpecError`;
a str that another value's text is (`"1"`, or inside a list a set's `"{'a'}"`), or that
starts with the tag, is tagged `str:` as `warmcli.runtime.key_tags` says, so two values never
share a key) and a `check=` spec (`check_identity`:
a candidate's name, or a callable by its qualified name
and a digest of what its code does: `warmcli.runtime.check_keys`, which holds those
two, `judged_identity` adding the launch function the check judged) as text, and refuses a
tunable's name or candidates (`check_names`), its samples (`check_spec`, with a `key=`
that is no callable or is given beside `bucket=`), or a tune key's text (`fits`), that a
bundle cannot hold; it fixes a tunable's candidates where it is made (`FixedCandidates`).
It owns no state and never runs a kernel or a check.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from warmcli.backends.base import Buffer
from warmcli.errors import TuneSpecError
from warmcli.printable import lone_surrogate, refuse_lone_surrogate
from warmcli.runtime.key_ints import int_text, ints_json
from warmcli.runtime.key_tags import TAG, may_spell, tag_parts, tagged

_WHOLE = 1000  # elements of an array keyed by its text (numpy's default print threshold)
# How a key's array prints in every process, whatever numpy's print options there: numpy's
# defaults, every digit each element needs (`unique`) (`formatter` None: none of the user's).
_PRINT = {"edgeitems": 3, "threshold": _WHOLE, "floatmode": "unique", "precision": 8,
          "suppress": False, "linewidth": 75, "nanstr": "nan", "infstr": "inf", "sign": "-",
          "formatter": None, "legacy": False}  # fmt: skip
# `_PRINT` as `np.array2string`'s own arguments, and the marks it reads from the options only
_NAMED = {"linewidth": "max_line_width", "suppress": "suppress_small"}  # (its argument's names)
_ARRAY2STRING = {_NAMED.get(k, k): v for k, v in _PRINT.items() if k not in ("nanstr", "infstr")}
_MARKS = (_PRINT["nanstr"], _PRINT["infstr"], None)  # (and no `override_repr`)


_ADDRESS = " at 0x"  # in an object's default repr: `<app.Cfg object at 0x7f...>`
MAX_NAME = 4096  # characters of a name a bundle holds (`warmcli.bundle.rows.MAX_NAME_CHARS`)
MAX_TUNE_ROW = 4 << 20  # bytes of a tune's candidates a bundle reads (`MAX_PACKED_BYTES`)
_ROW_PER_CANDIDATE = 128  # bytes of a candidate's row besides its name, samples and reason
MAX_KEY_TEXT = 4 << 20  # characters of a tune key's text a bundle holds (`MAX_TEXT_CHARS`)


class FixedCandidates(dict[str, Any]):
    """A tunable's candidates, fixed where it is made (its checksum keys them): a change is a
    `TypeError` naming the tunable, never a candidate measured, picked and served under the
    checksum of a set without it. A copy (`dict(c)`, `{**c}`) is the caller's own, as is
    what `dataclasses.asdict`, `astuple` or `fromkeys` make of it (a plain dict: made, as
    they make a dict subclass, with no tunable named)."""

    tunable: str

    def __new__(cls, candidates: Any = (), /, tunable: str | None = None) -> Any:
        if tunable is None:  # `type(c)(pairs)`, as `dataclasses.asdict` copies a dict
            return dict(candidates)
        return super().__new__(cls)

    def __init__(self, candidates: Any, /, tunable: str) -> None:
        super().__init__(candidates)
        self.tunable = tunable

    def _refuse(self, *_: object, **__: object) -> Any:
        raise TypeError(
            f"tunable {self.tunable}: its candidates are fixed where the Tunable is made (its "
            "tunes are keyed by them): make the Tunable from the finished mapping"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse
    pop = popitem = clear = update = setdefault = _refuse

    def __reduce__(self) -> tuple[Any, ...]:  # (pickle would set its items one by one)
        return FixedCandidates, (dict(self), self.tunable)

    def copy(self) -> dict[str, Any]:
        return dict(self)


def check_names(name: object, candidates: object, kernel: type) -> FixedCandidates:
    """The candidates, fixed (`FixedCandidates`); a `TypeError` or `ValueError` naming the
    tunable where its name, or a candidate's name or kernel, is not what a bundle holds
    (each name a str of at most `MAX_NAME` characters, each candidate a `kernel`, the
    candidates a mapping)."""
    if not isinstance(name, str):
        raise TypeError(f"tunable {name!r}: its name is no str ({type(name).__name__})")
    refuse_lone_surrogate(f"tunable {name}", "its name", name)
    if len(name) > MAX_NAME:
        raise ValueError(f"tunable {name[:40]}...: its name is {len(name)} characters, over "
                         f"the {MAX_NAME} a bundle holds")  # fmt: skip
    if not isinstance(candidates, Mapping):
        raise TypeError(f"tunable {name}: its candidates are a mapping of names to kernels, "
                        f"not a {type(candidates).__name__}")  # fmt: skip
    pairs = list(candidates.items())  # read once: what is checked is what is fixed
    for each, k in pairs:
        if not isinstance(each, str):
            raise TypeError(f"tunable {name}: candidate name {each!r} ({type(each).__name__}) "
                            "is no str")  # fmt: skip
        refuse_lone_surrogate(f"tunable {name}", f"candidate name {each!r}", each)
        if len(each) > MAX_NAME:
            raise ValueError(f"tunable {name}: a candidate name of {len(each)} characters, "
                             f"over the {MAX_NAME} a bundle holds")  # fmt: skip
        if not isinstance(k, kernel):
            raise TypeError(f"tunable {name}: candidate {each!r} is no Kernel "
                            f"({type(k).__name__})")  # fmt: skip
    if not pairs:
        raise ValueError(f"tunable {name} has no candidates")
    return FixedCandidates(pairs, name)


def check_spec(tunable: Any) -> None:
    """Of a `Tunable` being made: `TuneSpecError` where every candidate's samples (`repeats`
    each) and name take more than three quarters of a tune's row (`MAX_TUNE_ROW`, the rest
    for the reasons that candidates fail with, cut to fit when the row is written): no reader
    would read it; where `key` is neither None nor a callable (a list of names, as Triton
    takes), or a callable beside a `bucket` (which rounds the default key's sizes: it would
    round nothing); and where `restore` is neither None, a callable nor a list or other
    iterable (a str is no list of names). `TypeError` where `launch` is no callable (every
    tune would fail)."""
    name, candidates, repeats, key = tunable.name, tunable.candidates, tunable.repeats, tunable.key
    restore, launch = tunable.restore, tunable.launch
    if not callable(launch):
        raise TypeError(
            f"tunable {name}: launch is no callable ({type(launch).__name__}): give the "
            "function that runs one candidate, launch(rt, kernel, *inputs, stream=stream)"
        )
    listed = isinstance(restore, Iterable) and not isinstance(restore, str | bytes)
    if not (restore is None or callable(restore) or listed):
        raise TuneSpecError(
            f"tunable {name}: restore= is a list of input positions or names (restore=[...]),"
            f" or a callable of the inputs, not {restore!r:.80} ({type(restore).__name__})"
        )
    if key is not None and not callable(key):
        raise TuneSpecError(
            f"tunable {name}: key= is a callable of the inputs that returns the key "
            f"(key=lambda x, n: n), not a {type(key).__name__}"
        )
    if key is not None and tunable.bucket is not None:
        raise TuneSpecError(
            f"tunable {name}: bucket={tunable.bucket!r} rounds the default key's sizes, and "
            "key= gives the key itself: round the sizes in key= (or drop key=)"
        )
    need = len(candidates) * repeats * 8 + sum(
        _ROW_PER_CANDIDATE + len(n.encode("utf-8", "surrogatepass")) for n in candidates
    )
    if need > MAX_TUNE_ROW * 3 // 4:
        raise TuneSpecError(
            f"tunable {name}: {len(candidates)} candidates x {repeats} repeats keep {need} "
            f"bytes of samples and names, over the {MAX_TUNE_ROW * 3 // 4} a bundle's tune "
            "row holds for them: give fewer repeats or candidates"
        )


def fits(name: str, text: str) -> str:
    """`text`, the inputs' part of a tune key of tunable `name`; a `TuneSpecError` where it
    is longer than a bundle's row holds (every reader would call the row corrupt), the tag
    of a tagged `key=` str counted (`key_tags.tagged`: only such a text starts with it),
    named."""
    if len(text) > MAX_KEY_TEXT:
        said = (
            f" (key= gave a str of {len(text) - len(TAG)}, tagged {TAG!r} as a str that "
            "reads as JSON or starts with the tag is)"
        ) * text.startswith(TAG)
        raise TuneSpecError(
            f"tunable {name}: its tune key's text is {len(text)} characters{said}, over the "
            f"{MAX_KEY_TEXT} a bundle holds: key on a digest of the inputs (key=)"
        )
    return text


def pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def inputs_text(name: str, inputs: tuple[Any, ...], bucket: str | None = None) -> str:
    """The default tune key's text of tunable `name`'s inputs (`describe_input` each): one
    it cannot read is a `TypeError` naming the tunable and the input, from 1."""
    parts = []
    for i, value in enumerate(inputs, 1):
        try:
            parts.append(describe_input(value, bucket))
        except TypeError as exc:
            raise TypeError(f"tunable {name}: input {i} {exc}") from None
        except RecursionError:  # (read recursively: it ends, refused)
            said = "is nested too deeply for the default tune key to read: pass key="
            raise TypeError(f"tunable {name}: input {i} {said}") from None
    return " ".join(parts)


def describe_input(value: Any, bucket: str | None = None, nested: bool = False) -> str:
    """What of one input keys a tune, as text: a buffer's dtype and shape, a scalar's value.

    A numpy scalar keys like the Python number it holds (`np.int64(3)` as `3`); an int of
    more than 4,300 digits, in hex (`key_ints.int_text`). Anything else is a `TypeError` saying
    what the input is (or, `nested` in a tuple or list, holds).
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, Buffer):
        shape = tuple(pow2(s) for s in value.shape) if bucket == "pow2" else value.shape
        return f"{value.dtype}[{'x'.join(str(s) for s in shape)}]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return int_text(pow2(value) if bucket == "pow2" else value)
    if isinstance(value, float | str):
        return repr(value)
    if isinstance(value, tuple | list):
        return "(" + ",".join(describe_input(v, bucket, True) for v in value) + ")"
    host = not nested and isinstance(value, np.ndarray)  # (a launch takes a buffer, not it)
    raise TypeError(
        f"{'holds' if nested else 'is'} a {type(value).__name__}, which the default tune key "
        "cannot read (it reads buffers, numbers, str, None and tuples or lists of them): "
        + "upload it with rt.upload for a kernel to read, or pass key=" * host
        + "pass key=" * (not host)
    )


def _unstable(name: str, value: Any, text: str) -> TuneSpecError:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return TuneSpecError(
        f"tunable {name}: key= gave a {type(value).__name__} whose text ({shown}) holds a "
        "memory address, different in every process, so no bundle could serve the tune: "
        "key on its fields instead (or give its class a __str__)"
    )


def _set_text(name: str, value: set[Any] | frozenset[Any]) -> str:
    """A set's text with its elements sorted (as Python shows a set), when they are all
    strings or all integers (each as `int_text` writes it, whatever the limit on an int's
    text: `str` below 10**4300, hex from it); another set has no order stable across processes."""
    kinds = {str if isinstance(v, str) else int if isinstance(v, int) else type(v) for v in value}
    if len(kinds) > 1 or not kinds <= {str, int}:
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise TuneSpecError(
            f"tunable {name}: key= gave a {type(value).__name__} of {names}, whose order is "
            "not the same in every process: key on a sorted tuple of it instead"
        )
    inner = ", ".join(int_text(v) if isinstance(v, int) else repr(v) for v in sorted(value))
    if isinstance(value, frozenset):
        return f"frozenset({{{inner}}})" if value else "frozenset()"
    return f"{{{inner}}}" if value else "set()"


def _stable(name: str, value: Any) -> Any:
    """`value` as JSON renders it with `default=str`, every part checked to be stable."""
    if isinstance(value, str):
        if _ADDRESS in value:
            raise _unstable(name, value, value)
        return value
    if value is None or isinstance(value, int | float):  # bool is an int: as JSON has it
        return value
    if isinstance(value, tuple | list):
        return [_stable(name, v) for v in value]
    if isinstance(value, dict):
        return {
            (_stable(name, k) if isinstance(k, str) else k): _stable(name, v)
            for k, v in value.items()
        }
    if isinstance(value, set | frozenset):
        return _set_text(name, value)
    if isinstance(value, np.ndarray) and value.size > _WHOLE:
        raise TuneSpecError(  # its text is abbreviated (`...`): other arrays have the same
            f"tunable {name}: key= gave a ndarray of {value.size} elements, whose text "
            "leaves most of them out, so arrays that differ would share one tune: key on "
            "its shape or a digest of its bytes instead"
        )
    if isinstance(value, np.ndarray) and value.dtype.hasobject:  # an array inside, abbreviated
        _orderless(name, value)
        for part in value.flat:
            _stable(name, part)
    if isinstance(value, np.inexact | np.ndarray):
        _wide(name, value)  # (raises where float64 cannot hold it)
    text = str(value)  # what `default=str` gave: a numpy scalar's or dtype's own text
    if _ADDRESS in text:
        raise _unstable(name, value, text)
    return text


def _orderless(name: str, part: Any) -> None:
    """A `TuneSpecError` naming the tunable where object array `part` holds a set (in a
    list, dict or array in it too): numpy prints its repr, in an order of its strings'
    hashes, different in every process."""
    if isinstance(part, set | frozenset):
        raise TuneSpecError(
            f"tunable {name}: key= gave an object array holding a {type(part).__name__}, "
            "which numpy prints in no order the same in every process: key on a sorted "
            "tuple of it"
        )
    if isinstance(part, dict):
        part = [*part.keys(), *part.values()]
    if isinstance(part, np.ndarray) and part.dtype.hasobject:
        part = part.flat
    if isinstance(part, list | tuple | np.flatiter):
        for each in part:
            _orderless(name, each)


def _wide(name: str, value: Any) -> Any:
    """A numpy float or complex (array) as float64 (complex128) holds it: a narrower one
    widened (its own shortest digits are another float64's), a wider one (`longdouble`,
    whose digits and size differ from machine to machine) narrowed where float64 holds its
    values, else a `TuneSpecError` naming the tunable."""
    kind, size = value.dtype.kind, value.dtype.itemsize
    if kind not in "fc" or size == (8 if kind == "f" else 16):
        return value
    wide = value.astype(np.float64 if kind == "f" else np.complex128)
    if size > (8 if kind == "f" else 16) and not np.array_equal(wide, value, equal_nan=True):
        raise TuneSpecError(
            f"tunable {name}: key= gave a {value.dtype} value float64 cannot hold, whose "
            "text differs from machine to machine: key on float(x) or its text (str)"
        )
    return wide


def _default(value: Any) -> Any:
    """What JSON has no form for: a numpy number as the Python number it holds (as an input
    keys: `np.int64(3)` as `3`, not `"3"`), a set as `_set_text` writes it, an array as its
    `str` but with every digit each element needs (numpy prints 8 by default: arrays that
    differ past them would share one tune; a float16 or float32 array's, or complex64's,
    as float64 or complex128 writes its values: its own shortest digits, `[0.1]`, were
    float64's `[0.1]`, another value; printed under numpy's default options, whatever the
    process set; a 0-d one of a number as that number, an empty one of 2 or more dimensions
    as its shape: numpy prints each `[]`), anything else its `str`."""
    if isinstance(value, np.inexact | np.ndarray):
        value = _wide("", value)
    if isinstance(value, np.bool_ | np.integer | np.floating):
        return value.item()
    if isinstance(value, set | frozenset):
        return _set_text("", value)
    if isinstance(value, np.ndarray):
        kind = value.dtype.kind
        if value.dtype.hasobject:
            _orderless("", value)
        if not value.ndim and kind in "biuf" and value.dtype.itemsize <= 8:
            return value.item()  # a 0-d array of a number: the number, as a numpy number
        if not value.size and value.ndim > 1:  # numpy prints every empty array `[]`
            return f"[shape={value.shape}]"
        now = np.get_printoptions()
        if value.ndim and (now["nanstr"], now["infstr"], now.get("override_repr")) == _MARKS:
            return np.array2string(value, **_ARRAY2STRING)  # (the block below: ~6 µs more)
        with np.printoptions(**_PRINT):  # not the process's (`np.set_printoptions`)
            return np.array2string(value) if value.ndim else str(value)
    return str(value)


_KEY_JSON = json.JSONEncoder(default=_default).encode  # as `json.dumps(default=...)` writes


def _json_text(derived: Any) -> str:
    try:
        text = _KEY_JSON(derived)
    except TypeError:  # a dict keyed by a numpy number, which JSON takes as its number
        return _KEY_JSON(tag_parts(derived))
    if may_spell(text) and (tagged_parts := tag_parts(derived)) is not derived:  # a str key
        return _KEY_JSON(tagged_parts)  # JSON writes as another's, a str spelling a set...
    return text


def key_text(name: str, derived: Any) -> str:
    """The text of tunable `name`'s `key=` value `derived`: the value itself if it is a
    string (tagged `str:` where it is some other value's JSON, `"1"` beside `1`, or starts
    with the tag: `key_tags.tagged`), else its JSON (a numpy number as the number it
    holds, a dict's key too; an int as an input's, whatever the limit on an int's text:
    `key_ints`; a dict's str key tagged where JSON writes another key so, `"1"` beside
    `1`, a str in it where it spells a set's, array's or bytes' text, `"{'a'}"`, or either
    starts with the tag: `key_tags.tag_parts`; anything else JSON has no form for as its
    `str`, a set sorted). Read once (every tune call keys), a value holding a dict twice;
    `_stable` walks it again only where a part is refused, to name it."""
    try:  # (JSON's encoder, and `_stable` naming a part, walk it recursively: it ends, refused)
        if isinstance(derived, str):
            text = tagged(derived)
        else:
            try:
                text = ints_json(derived, _json_text)  # an int as `int_text` writes it
            except TuneSpecError:  # a set with no order the same in every process
                _stable(name, derived)  # raises, naming the tunable
                raise
            except (TypeError, ValueError) as exc:
                message = f"tunable {name}: key= gave a value with no JSON text: {exc}"
                raise TuneSpecError(message) from None
        if _ADDRESS in text or "..." in text:  # an address, or an array's text abbreviated
            _stable(name, derived)  # raises, naming the part (nothing else raises there)
    except RecursionError:
        deep = "key= gave a value nested too deeply to key: key on a flatter one"
        raise TuneSpecError(f"tunable {name}: {deep}") from None
    if (bad := lone_surrogate(text)) is not None:
        message = (
            f"tunable {name}: key= gave text holding {bad!r}, a lone surrogate no file can hold"
        )
        raise TuneSpecError(message)
    return text
