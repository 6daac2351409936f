"""One tune of `warm stats --json` as its line of JSON text, written without a dict.

`tune_line(t)` is exactly `json.dumps(tune_json(t), default=str)` (same keys in the same
order, same separators, the same text for every string and number: strings through
JSON's own C escaper, numbers through `float.__repr__` as JSON's encoder does), built
as one string: a stats of 100,000 tunes writes 100,000 of these, and the dict per tune
and per candidate, with every key escaped again each time, were most of its encoding
cost; `tune_lines` is the lines of several tunes as one text. A tune with a time that
is not finite, or a field that is not what a `TuneRecord` holds, is encoded from
`tune_json` (JSON's own rules for it). Pure presentation: its only state is a bounded
memo of short texts it made (`_QUOTED`, `_HEADS`, `_MIDDLES`: a tune's operation, device and
checksum, a candidate's name and kernel, its status and reason recur in many tunes); it
reads nothing and never prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii as _string

from warmcli.records import CandidateMeasurement, TuneRecord

_encode = json.JSONEncoder(default=str).encode  # `json.dumps`'s defaults: the reference
_float = float.__repr__  # what JSON's encoder writes of a finite float (a TypeError if none)
LINES_APART = ",\n    "  # between two items of a list `warmcli.cli.common.stream_json` writes
_QUOTED: dict[str, str] = {}  # an operation, device, status, checksum: as JSON strings
_HEADS: dict[tuple[str, str], str] = {}  # a candidate's text up to its median (`_head`)
_MIDDLES: dict[tuple[str, str], str] = {}  # and from its median to its samples (`_middle`)
_KEPT_QUOTED, _KEPT_CHARS = 4096, 128  # how many, how long (a few recur in every tune)


class JsonText(str):
    """Text that is JSON already: `warmcli.cli.common.stream_json` writes it as it is."""

    __slots__ = ()


def _quoted(text: str) -> str:
    """`text` as a JSON string, kept (`_QUOTED`) for the next tune that names it."""
    quoted = _string(text)
    if len(_QUOTED) < _KEPT_QUOTED and len(text) <= _KEPT_CHARS:
        _QUOTED[text] = quoted
    return quoted


def _head(name: str, kernel: str) -> str:
    """A candidate's text up to its median (`_HEADS`: kept for the next that has them)."""
    head = f'{{"name": {_string(name)}, "kernel": {_string(kernel)}, "seconds": '
    if len(_HEADS) < _KEPT_QUOTED and len(name) + len(kernel) <= _KEPT_CHARS:
        _HEADS[name, kernel] = head
    return head


def _middle(status: str, reason: str) -> str:
    """A candidate's text from its median to its samples (`_MIDDLES`, as `_head`)."""
    middle = f', "status": {_string(status)}, "reason": {_string(reason)}, "samples": ['
    if len(_MIDDLES) < _KEPT_QUOTED and len(status) + len(reason) <= _KEPT_CHARS:
        _MIDDLES[status, reason] = middle
    return middle


def _candidates(candidates: tuple[CandidateMeasurement, ...], best: float | None) -> str:
    """Each candidate's JSON object (as `tune_json` has it), ", " between them."""
    texts = []
    head, middle = _HEADS.get, _MIDDLES.get
    for c in candidates:
        seconds = c.seconds
        if seconds is None:
            median = ratio_text = "null"
            ratio = None
        else:
            median = _float(seconds)
            if best and seconds == best:  # x / x of a finite x: 1.0 (else not finite, below)
                ratio, ratio_text = 1.0, "1.0"
            elif best:
                ratio = seconds / best
                ratio_text = _float(ratio)
            else:
                ratio, ratio_text = None, "null"
        samples = c.samples
        if not math.isfinite(sum(samples, (seconds or 0.0) + (ratio or 0.0))):
            raise ValueError("a time that is not finite")  # JSON's own encoder says how
        if seconds:  # a float not 0 (else `_float` refused it): the samples equal to it
            times = [median if x == seconds and type(x) is float else _float(x) for x in samples]
        else:
            times = list(map(_float, samples))
        name, kernel, status, reason = c.name, c.kernel_key, c.status, c.reason
        texts.append(
            f"{head((name, kernel)) or _head(name, kernel)}{median}"
            f"{middle((status, reason)) or _middle(status, reason)}"
            f'{", ".join(times)}], "ratio": {ratio_text}}}'
        )
    return ", ".join(texts)


def _line(t: TuneRecord) -> str:
    picked = next((c for c in t.candidates if c.name == t.pick), None)
    best = picked.seconds if picked is not None else None
    q = _QUOTED.get
    try:
        if not math.isfinite(t.measured_at):
            raise ValueError("a time that is not finite")
        op, device, status, checksum = t.operation, t.device, t.status, t.checksum
        return (
            f'{{"key": {_string(t.key)}, "operation": {q(op) or _quoted(op)}, '
            f'"shape": {_string(t.shape_key)}, "device": {q(device) or _quoted(device)}, '
            f'"status": {q(status) or _quoted(status)}, '
            f'"pick": {"null" if t.pick is None else _string(t.pick)}, '
            f'"pick_kernel": {"null" if picked is None else _string(picked.kernel_key)}, '
            f'"checksum": {q(checksum) or _quoted(checksum)}, '
            f'"measured_at": {_float(t.measured_at)}, '
            f'"candidates": [{_candidates(t.candidates, best)}]}}'
        )
    except (ValueError, TypeError, OverflowError):
        from warmcli.cli.render.stats import tune_json  # rare: imported here, off the CLI start

        return _encode(tune_json(t))  # type: ignore[no-any-return]


def tune_line(t: TuneRecord) -> JsonText:
    """`json.dumps(tune_json(t))`, built directly (see the module doc)."""
    return JsonText(_line(t))


def tune_lines(tunes: Iterable[TuneRecord]) -> JsonText:
    """The `tune_line` of each of `tunes` as one text: items of a list `stream_json`
    writes, one a line (`LINES_APART` between them, as it writes them), so a worker
    listing a large bundle hands over one text a range (`warmcli.bundle.listing`)."""
    return JsonText(LINES_APART.join(map(_line, tunes)))
