"""One tune of `warm stats --json` as its line of JSON text, written without a dict.

`tune_line(t)` is exactly `json.dumps(tune_json(t), default=str)` (same keys in the same
order, same separators, the same text for every string and number: strings through
JSON's own C escaper, numbers through `float.__repr__` as JSON's encoder does), built
as one string: a stats of 100,000 tunes writes 100,000 of these, and the dict per tune
and per candidate, with every key escaped again each time, were most of its encoding
cost; `tune_lines` is the lines of several tunes as one text. A tune read by its layout
(`warmcli.bundle.tune_layout.LaidTune`) is written from its layout's template (its
candidates' text with a slot for each time, made once a layout and kept in its `memo`),
each distinct time written once (`float.__repr__`, as JSON's encoder). A tune with a time that
is not finite, or a field that is not what a `TuneRecord` holds, is encoded from
`tune_json` (JSON's own rules for it). Pure presentation: its only state is a layout's
template (in that layout's `memo`) and a bounded
memo of short texts it made (`_QUOTED`, `_HEADS`, `_MIDDLES`: a tune's operation, device and
checksum, a candidate's name and kernel, its status and reason recur in many tunes); it
reads nothing and never prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from json.encoder import encode_basestring_ascii as _string
from typing import Any

from warmcli.bundle.tune_layout import LaidTune, Layout, _getter, bounded
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


def _opening(fields: tuple[Any, ...], pick_kernel: str | None) -> str:
    """A tune's text up to its candidates, from its fields (`LaidTune.fields`' order)."""
    key, op, shape, device, checksum, status, pick, _, measured_at = fields
    q = _QUOTED.get
    if not math.isfinite(measured_at):
        raise ValueError("a time that is not finite")
    return (
        f'{{"key": {_string(key)}, "operation": {q(op) or _quoted(op)}, '
        f'"shape": {_string(shape)}, "device": {q(device) or _quoted(device)}, '
        f'"status": {q(status) or _quoted(status)}, '
        f'"pick": {"null" if pick is None else _string(pick)}, '
        f'"pick_kernel": {"null" if pick_kernel is None else _string(pick_kernel)}, '
        f'"checksum": {q(checksum) or _quoted(checksum)}, '
        f'"measured_at": {_float(measured_at)}, "candidates": ['
    )


def _line(t: TuneRecord) -> str:
    picked = next((c for c in t.candidates if c.name == t.pick), None)
    best = picked.seconds if picked is not None else None
    fields = (
        t.key,
        t.operation,
        t.shape_key,
        t.device,
        t.checksum,
        t.status,
        t.pick,
        0,
        t.measured_at,
    )
    try:
        opening = _opening(fields, None if picked is None else picked.kernel_key)
        return f"{opening}{_candidates(t.candidates, best)}]}}"
    except (ValueError, TypeError, OverflowError):
        from warmcli.cli.render.stats import tune_json  # rare: imported here, off the CLI start

        return _encode(tune_json(t))  # type: ignore[no-any-return]


Memo = tuple[str, Callable[[list[str]], tuple[str, ...]], list[int], str | None]


def _template(layout: Layout) -> Memo:
    """How a tune of `layout` is written (its memo): its candidates' text with a `%s` for
    each time (the median, each sample, the ratio to the pick, as `_candidates` writes
    them), which of the times and ratios fill them, and where each median is."""
    picked = layout.picked
    has_best = picked is not None and layout.spans[picked][0] is not None
    count = sum(end - start + (median is not None) for median, start, end in layout.spans)
    texts, order, medians = [], [], []
    for c, (median, start, end) in zip(layout.candidates, layout.spans, strict=True):
        head = _head(c.name, c.kernel_key).replace("%", "%%")
        middle = _middle(c.status, c.reason).replace("%", "%%")
        samples = ", ".join("%s" for _ in range(start, end))
        ratio = "null"
        if median is not None:
            order.append(median)
            if has_best and c is layout.candidates[picked]:  # type: ignore[index]
                ratio = "1.0"  # the pick's own: x / x
            elif has_best:
                ratio = "%s"
                medians.append(median)
        order += range(start, end)
        if ratio == "%s":
            order.append(count + len(medians) - 1)
        median_text = "null" if median is None else "%s"
        texts.append(f'{head}{median_text}{middle}{samples}], "ratio": {ratio}}}')
    kernel = None if picked is None else layout.candidates[picked].kernel_key
    return ", ".join(texts), _getter(order), medians, kernel


def _laid_line(t: LaidTune) -> str:
    """`_line` of a tune read by its layout, written from its layout's template."""
    layout = t.layout
    memo: Memo = layout.memo or _remember(layout)
    template, order, medians, kernel = memo
    times = t.times
    texts = _texts(times)
    if medians:
        best = times[layout.spans[layout.picked][0]]  # type: ignore[index]
        ratios = [times[m] / best for m in medians] if best else None
        if ratios is None or not bounded(ratios):  # no ratio, or one not small and finite
            return _line(t.record())
        texts += map(_float, ratios)
    try:
        return f"{_opening(t.fields, kernel)}{template % order(texts)}]}}"
    except (ValueError, TypeError, OverflowError):
        return _line(t.record())


def _texts(times: tuple[float, ...]) -> list[str]:
    """`float.__repr__` of each time, each value written once (samples often repeat their
    median); one zero (0.0 and -0.0 are one key, not one text) writes each on its own."""
    distinct = dict.fromkeys(times)
    if len(distinct) == len(times) or 0.0 in distinct:
        return list(map(_float, times))
    written = dict(zip(distinct, map(_float, distinct), strict=True))
    return list(map(written.__getitem__, times))


def _remember(layout: Layout) -> Memo:
    layout.memo = memo = _template(layout)
    return memo


def tune_line(t: TuneRecord) -> JsonText:
    """`json.dumps(tune_json(t))`, built directly (see the module doc)."""
    return JsonText(_line(t))


def tune_lines(tunes: Iterable[TuneRecord | LaidTune]) -> JsonText:
    """The `tune_line` of each of `tunes` as one text: items of a list `stream_json`
    writes, one a line (`LINES_APART` between them, as it writes them), so a worker
    listing a large bundle hands over one text a range (`warmcli.bundle.listing`)."""
    return JsonText(
        LINES_APART.join(_laid_line(t) if type(t) is LaidTune else _line(t) for t in tunes)  # type: ignore[arg-type]
    )


def tune_bytes(tunes: Iterable[TuneRecord | LaidTune]) -> bytes:
    """`tune_lines` encoded (UTF-8; JSON's escapes make it ASCII): what a worker listing a
    large bundle hands over, written to stdout as it is (`stream_json`)."""
    return tune_lines(tunes).encode()
