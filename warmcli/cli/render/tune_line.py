"""One tune of `warm stats --json` as its line of JSON text, written without a dict.

`tune_line(t)` is exactly `json.dumps(tune_json(t), default=str)` (same keys in the same
order, same separators, the same text for every string and number: strings through
JSON's own C escaper, numbers through `float.__repr__` as JSON's encoder does), built
as one string: a stats of 100,000 tunes writes 100,000 of these, and the dict per tune
and per candidate, with every key escaped again each time, were most of its encoding
cost; `tune_lines` is the lines of several tunes as one text. A tune with a time that
is not finite, or a field that is not what a `TuneRecord` holds, is encoded from
`tune_json` (JSON's own rules for it). Pure presentation: its only state is a bounded
memo of short strings it quoted (`_QUOTED`: a candidate's name, kernel, status and
reason recur in every tune); it reads nothing and never prints.
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
_QUOTED: dict[str, str] = {}  # a candidate's name, kernel, status, reason: as JSON strings
_KEPT_QUOTED, _KEPT_CHARS = 4096, 128  # how many, how long (a few recur in every tune)


class JsonText(str):
    """Text that is JSON already: `warmcli.cli.common.stream_json` writes it as it is."""

    __slots__ = ()


def _quoted(text: str) -> str:
    """`text` as a JSON string; kept (`_QUOTED`) for the next candidate that names it."""
    quoted = _string(text)
    if len(_QUOTED) < _KEPT_QUOTED and len(text) <= _KEPT_CHARS:
        _QUOTED[text] = quoted
    return quoted


def _candidate(c: CandidateMeasurement, best: float | None) -> str:
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
        texts = ", ".join(
            [median if x == seconds and type(x) is float else _float(x) for x in samples]
        )
    else:
        texts = ", ".join(map(_float, samples))
    q = _QUOTED.get
    return (
        f'{{"name": {q(c.name) or _quoted(c.name)}, '
        f'"kernel": {q(c.kernel_key) or _quoted(c.kernel_key)}, '
        f'"seconds": {median}, "status": {q(c.status) or _quoted(c.status)}, '
        f'"reason": {q(c.reason) or _quoted(c.reason)}, '
        f'"samples": [{texts}], "ratio": {ratio_text}}}'
    )


def tune_line(t: TuneRecord) -> JsonText:
    """`json.dumps(tune_json(t))`, built directly (see the module doc)."""
    picked = next((c for c in t.candidates if c.name == t.pick), None)
    best = picked.seconds if picked is not None else None
    try:
        if not math.isfinite(t.measured_at):
            raise ValueError("a time that is not finite")
        candidates = ", ".join([_candidate(c, best) for c in t.candidates])
        return JsonText(
            f'{{"key": {_string(t.key)}, "operation": {_string(t.operation)}, '
            f'"shape": {_string(t.shape_key)}, "device": {_string(t.device)}, '
            f'"status": {_string(t.status)}, '
            f'"pick": {"null" if t.pick is None else _string(t.pick)}, '
            f'"pick_kernel": {"null" if picked is None else _string(picked.kernel_key)}, '
            f'"checksum": {_string(t.checksum)}, "measured_at": {_float(t.measured_at)}, '
            f'"candidates": [{candidates}]}}'
        )
    except (ValueError, TypeError, OverflowError):
        from warmcli.cli.render.stats import tune_json  # rare: imported here, off the CLI start

        return JsonText(_encode(tune_json(t)))


def tune_lines(tunes: Iterable[TuneRecord]) -> JsonText:
    """The `tune_line` of each of `tunes` as one text: items of a list `stream_json`
    writes, one a line (`LINES_APART` between them, as it writes them), so a worker
    listing a large bundle hands over one text a range (`warmcli.bundle.listing`)."""
    return JsonText(LINES_APART.join(map(tune_line, tunes)))
