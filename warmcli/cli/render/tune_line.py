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
from typing import TypeVar

from warmcli.bundle.tune_layout import LaidTune, Layout, _getter, bounded
from warmcli.records import CandidateMeasurement, TuneRecord

_encode = json.JSONEncoder(default=str).encode  # `json.dumps`'s defaults: the reference
_float = float.__repr__  # what JSON's encoder writes of a finite float (a TypeError if none)
LINES_APART = ",\n    "  # between two items of a list `warmcli.cli.json_stream.stream_json` writes
_QUOTED: dict[str, str] = {}  # an operation, device, status, checksum: as JSON strings
_HEADS: dict[tuple[str, str], str] = {}  # a candidate's text up to its median (`_head`)
_MIDDLES: dict[tuple[str, str], str] = {}  # and from its median to its samples (`_middle`)
_K = TypeVar("_K")
_KEPT_QUOTED, _KEPT_CHARS = 4096, 128  # how many, how long (a few recur in every tune)


class JsonText(str):
    """Text that is JSON already: `warmcli.cli.json_stream.stream_json` writes it as it is."""

    __slots__ = ()


def _kept(memo: dict[_K, str], key: _K, chars: int, text: str) -> str:
    """`text`, kept in `memo` under `key` for the next tune that has it, while the memo
    has room (`_KEPT_QUOTED`) and what it is made of is short (`chars`, `_KEPT_CHARS`)."""
    if len(memo) < _KEPT_QUOTED and chars <= _KEPT_CHARS:
        memo[key] = text
    return text


def _quoted(text: str) -> str:
    """`text` as a JSON string, kept (`_QUOTED`) for the next tune that names it."""
    return _kept(_QUOTED, text, len(text), _string(text))


def _head(name: str, kernel: str) -> str:
    """A candidate's text up to its median (`_HEADS`: kept for the next that has them)."""
    head = f'{{"name": {_string(name)}, "kernel": {_string(kernel)}, "seconds": '
    return _kept(_HEADS, (name, kernel), len(name) + len(kernel), head)


def _middle(status: str, reason: str) -> str:
    """A candidate's text from its median to its samples (`_MIDDLES`, as `_head`)."""
    middle = f', "status": {_string(status)}, "reason": {_string(reason)}, "samples": ['
    return _kept(_MIDDLES, (status, reason), len(status) + len(reason), middle)


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


def _opening(*texts: str) -> str:
    """A tune's text up to its candidates, from the JSON texts of its key, operation,
    shape, device, status, pick, pick's kernel, checksum and time, in that order."""
    key, op, shape, device, status, pick, pick_kernel, checksum, measured_at = texts
    return (
        f'{{"key": {key}, "operation": {op}, "shape": {shape}, "device": {device}, '
        f'"status": {status}, "pick": {pick}, "pick_kernel": {pick_kernel}, '
        f'"checksum": {checksum}, "measured_at": {measured_at}, "candidates": ['
    )


def _line(t: TuneRecord) -> str:
    picked = next((c for c in t.candidates if c.name == t.pick), None)
    best = picked.seconds if picked is not None else None
    q = _QUOTED.get
    op, device, status, checksum = t.operation, t.device, t.status, t.checksum
    try:
        if not math.isfinite(t.measured_at):
            raise ValueError("a time that is not finite")
        opening = _opening(
            _string(t.key),
            q(op) or _quoted(op),
            _string(t.shape_key),
            q(device) or _quoted(device),
            q(status) or _quoted(status),
            "null" if t.pick is None else _string(t.pick),
            "null" if picked is None else _string(picked.kernel_key),
            q(checksum) or _quoted(checksum),
            _float(t.measured_at),
        )
        return f"{opening}{_candidates(t.candidates, best)}]}}"
    except (ValueError, TypeError, OverflowError):
        from warmcli.cli.render.stats import tune_json  # rare: imported here, off the CLI start

        return _encode(tune_json(t))  # type: ignore[no-any-return]


Texts = Callable[[list[str]], tuple[str, ...]]
_SLOT = "\x00"  # where a text goes in a template (JSON's escapes leave none in its pieces)


class _Written:
    """How the tunes of one layout are written (that layout's `memo`): its whole line in
    pieces (`line`), a slot (`_SLOT`) between two for each text to come: the tune's key,
    operation, shape, device, checksum and time, then each median, sample and ratio to the
    pick as `_candidates` writes them, filled from `every` of its times' texts then its
    ratios', or `alike` of its medians' then its ratios' where every sample is its
    candidate's median (`same` of its times is its times). None: not written by layout."""

    __slots__ = ("alike", "best", "every", "line", "medians", "ratios", "same")

    def __init__(self, layout: Layout, status: str, pick: str | None) -> None:
        spans, picked = layout.spans, layout.picked
        self.best = None if picked is None else spans[picked][0]  # the pick's median
        count = sum(end - start + (median is not None) for median, start, end in spans)
        medians = [median for median, _, _ in spans if median is not None]
        texts, every, alike, same, self.ratios = [], [], [], [], []
        for i, (c, (median, start, end)) in enumerate(zip(layout.candidates, spans, strict=True)):
            ratio = "null"
            if median is not None:
                every.append(median)
                alike.append(medians.index(median))
                same.append(median)
                if i == picked:
                    ratio = "1.0"  # the pick's own: x / x
                elif self.best is not None:
                    ratio = _SLOT
                    self.ratios.append(median)
            every += range(start, end)
            alike += [medians.index(median) if median is not None else -1] * (end - start)
            same += [median if median is not None else -1] * (end - start)
            if ratio is _SLOT:
                every.append(count + len(self.ratios) - 1)
                alike.append(len(medians) + len(self.ratios) - 1)
            texts.append(
                f"{_head(c.name, c.kernel_key)}{'null' if median is None else _SLOT}"
                f"{_middle(c.status, c.reason)}"
                f'{", ".join(_SLOT for _ in range(start, end))}], "ratio": {ratio}}}'
            )
        self.every = _getter(every)
        self.alike: Texts | None = None if -1 in alike else _getter(alike)
        self.same, self.medians = _getter(same), _getter(medians)
        opening = _opening(
            _SLOT,
            _SLOT,
            _SLOT,
            _SLOT,
            _quoted(status),
            "null" if pick is None else _string(pick),
            "null" if picked is None else _string(layout.candidates[picked].kernel_key),
            _SLOT,
            _SLOT,
        )
        pieces = f"{opening}{', '.join(texts)}]}}".split(_SLOT)
        self.line: list[str] | None = None
        if len(pieces) == 7 + len(every):  # (always: JSON's texts hold no _SLOT)
            self.line = [_SLOT] * (2 * len(pieces) - 1)
            self.line[::2] = pieces


def _laid_line(t: LaidTune) -> str:
    """`_line` of a tune read by its layout, written from its layout's template (each
    distinct time written once: where every sample is its median, only the medians)."""
    key, op, shape, device, checksum, status, pick, _, measured_at = t.fields
    layout = t.layout
    written: _Written = layout.memo or _remember(layout, status, pick)
    times = t.times
    if written.alike is not None and written.same(times) == times:
        medians = written.medians(times)
        if 0.0 in medians:  # 0.0 equals -0.0, whose text differs
            texts, order = _texts(times), written.every
        else:
            texts, order = list(map(_float, medians)), written.alike
    else:
        texts, order = _texts(times), written.every
    best = None if written.best is None else times[written.best]
    if best == 0.0:  # the pick's own ratio too is none (0 / 0): written by `_line`
        return _line(t.record())
    if written.ratios:
        ratios = [times[m] / best for m in written.ratios]  # type: ignore[operator]
        if not bounded(ratios):  # a ratio not small and finite
            return _line(t.record())
        texts += map(_float, ratios)
    if written.line is None:
        return _line(t.record())
    q = _QUOTED.get
    pieces = written.line.copy()
    pieces[1:12:2] = (
        _string(key),
        q(op) or _quoted(op),
        _string(shape),
        q(device) or _quoted(device),
        q(checksum) or _quoted(checksum),
        _float(measured_at),
    )
    pieces[13::2] = order(texts)
    return "".join(pieces)


def _texts(times: tuple[float, ...]) -> list[str]:
    """`float.__repr__` of each time, each value written once (samples often repeat their
    median); one zero (0.0 and -0.0 are one key, not one text) writes each on its own."""
    distinct = dict.fromkeys(times)
    if len(distinct) == len(times) or 0.0 in distinct:
        return list(map(_float, times))
    written = dict(zip(distinct, map(_float, distinct), strict=True))
    return list(map(written.__getitem__, times))


def _remember(layout: Layout, status: str, pick: str | None) -> _Written:
    """The layout's `_Written` (its tunes' status and pick are the layout's own)."""
    layout.memo = written = _Written(layout, status, pick)
    return written


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
