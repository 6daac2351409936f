"""One tune of `warm stats --json` as its line of JSON text, written without a dict.

`tune_line(t)` is exactly `json.dumps(tune_json(t), default=str)` (same keys in the same
order, same separators, the same text for every string and number: strings through
JSON's own C escaper, numbers through `float.__repr__` as JSON's encoder does), built
as one string: a stats of 100,000 tunes writes 100,000 of these, and the dict per tune
and per candidate, with every key escaped again each time, were most of its encoding
cost. A tune with a time that is not finite, or a field that is not what a
`TuneRecord` holds, is encoded from `tune_json` (JSON's own rules for it). Pure
presentation: it owns no state, reads nothing and never prints.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _string

from warmcli.records import CandidateMeasurement, TuneRecord

_encode = json.JSONEncoder(default=str).encode  # `json.dumps`'s defaults: the reference
_float = float.__repr__  # what JSON's encoder writes of a finite float (a TypeError if none)


class JsonText(str):
    """Text that is JSON already: `warmcli.cli.common.stream_json` writes it as it is."""

    __slots__ = ()


def _candidate(c: CandidateMeasurement, best: float | None) -> str:
    seconds = c.seconds
    ratio = (seconds / best) if (best and seconds is not None) else None
    if not math.isfinite(sum(c.samples, (seconds or 0.0) + (ratio or 0.0))):
        raise ValueError("a time that is not finite")  # JSON's own encoder says how
    return (
        f'{{"name": {_string(c.name)}, "kernel": {_string(c.kernel_key)}, '
        f'"seconds": {"null" if seconds is None else _float(seconds)}, '
        f'"status": {_string(c.status)}, "reason": {_string(c.reason)}, '
        f'"samples": [{", ".join(map(_float, c.samples))}], '
        f'"ratio": {"null" if ratio is None else _float(ratio)}}}'
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
