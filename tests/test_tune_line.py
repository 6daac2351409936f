"""`tune_line` is exactly JSON's own encoding of `tune_json`, for every kind of tune."""

from __future__ import annotations

import json
import math

import pytest

from warmcli.cli.render.stats import tune_json
from warmcli.cli.render.tune_line import JsonText, tune_line
from warmcli.records import CandidateMeasurement, TuneRecord

KEY = "ab" * 32


def _tune(candidates: tuple[CandidateMeasurement, ...], **fields: object) -> TuneRecord:
    base: dict[str, object] = {
        "key": KEY,
        "operation": "matmul",
        "shape_key": "float32[128,64]",
        "device": "cuda|H200|sm_90|570",
        "checksum": "cd" * 32,
        "status": "measured",
        "pick": "b",
        "candidates": candidates,
        "seconds": 0.25,
        "measured_at": 1764748800.123,
    }
    base.update(fields)
    return TuneRecord(**base)  # type: ignore[arg-type]


OK = CandidateMeasurement("a", "12" * 32, "ok", 3e-5, (3e-5, 2.9e-5, 1e-300), "")
PICK = CandidateMeasurement("b", "34" * 32, "ok", 1.5e-5, (1.5e-5,) * 3, "")
FAILED = CandidateMeasurement("c", "56" * 32, "failed", None, (), 'bad "launch"\nline 2 \\ é')
ZERO = CandidateMeasurement("z", "78" * 32, "ok", 0.0, (0.0,), "")
HUGE = CandidateMeasurement("h", "9a" * 32, "ok", 1e308, (1e308,), "")
TINY = CandidateMeasurement("t", "bc" * 32, "ok", 1e-300, (1e-300,), "")

CASES = [
    _tune((OK, PICK, FAILED)),
    _tune((OK, FAILED), status="pending", pick=None),
    _tune((OK, PICK), pick="gone"),  # a pick none of the candidates is
    _tune((ZERO, OK), pick="z"),  # a pick of 0 s: no ratios
    _tune((HUGE, TINY), pick="t"),  # a ratio that overflows to infinity
    _tune((), status="pending", pick=None),
    _tune((OK, PICK), operation="ops/naïve ☃", shape_key='f32["\\x00\u2028"]', measured_at=0.0),
    _tune((PICK,), measured_at=3),  # an int where a time is: JSON's rules, not ours
    _tune((CandidateMeasurement("n", "ff" * 32, "ok", math.nan, (math.nan,)),), pick="n"),
    _tune((PICK, PICK)),  # two candidates of one name: the first is the pick
    # Texts kept for the next tune: samples equal to the median (an int one is JSON's own,
    # a zero keeps its sign), a candidate's name and kernel the same as a status and reason.
    _tune((CandidateMeasurement("i", "de" * 32, "ok", 1.0, (1, 1.0, 1.0)),), pick="i"),
    _tune((CandidateMeasurement("m", "ef" * 32, "ok", 2e-5, (-0.0, 0.0, 2e-5, 2e-5)),)),
    _tune((CandidateMeasurement("ok", "", "ok", 2e-5, (2e-5,), ""), PICK)),
    _tune((CandidateMeasurement("ok", "", "ok", 2e-5, (2e-5,), ""), PICK)),
]


@pytest.mark.parametrize("tune", CASES)
def test_tune_line_is_json_of_tune_json(tune: TuneRecord) -> None:
    line = tune_line(tune)
    assert isinstance(line, JsonText)
    assert line == json.dumps(tune_json(tune), default=str)
