"""`warmcli.records.Record`: a frozen dataclass's behaviour without generated code.

Records keep what their users relied on when they were dataclasses: fields in order
from annotations, defaults (fresh ones from `factory`), `derived` fields `__init__`
does not take, equality/hash/repr by field, frozen instances, and `dataclasses.fields`,
`replace` and `asdict` (made on first use)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from warmcli.records import KernelRecord, Record, derived, factory


class Point(Record):
    x: int
    y: int = 0
    tags: dict[str, str] = factory(dict)
    norm: int = derived(-1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "norm", abs(self.x) + abs(self.y))


class Bag(Record, frozen=False):
    items: list[int] = factory(list)


def test_a_record_behaves_as_a_frozen_dataclass() -> None:
    p = Point(3, y=-4)
    assert (p.x, p.y, p.tags, p.norm) == (3, -4, {}, 7)
    assert p == Point(3, -4) and p != Point(3, 4) and Point(1).tags is not Point(1).tags
    assert repr(p) == "Point(x=3, y=-4, tags={}, norm=7)"
    assert list(vars(p)) == [f.name for f in dataclasses.fields(p)]
    with pytest.raises(AttributeError):
        p.x = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point(1, norm=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    assert dataclasses.replace(p, x=1) == Point(1, -4)
    assert dataclasses.asdict(p) == {"x": 3, "y": -4, "tags": {}, "norm": 7}
    assert pickle.loads(pickle.dumps(p)) == p
    assert hash(Point(1, 2, tags=None)) == hash(Point(1, 2, tags=None))  # type: ignore[arg-type]


def test_a_record_not_frozen_can_be_set_and_is_unhashable() -> None:
    b = Bag()
    b.items = [1]
    assert b == Bag([1])
    with pytest.raises(TypeError):
        hash(b)


def test_kernel_record_by_hand_matches_its_fields() -> None:
    r = KernelRecord("k", "d", "b", "a", "e", "l", "s", "h", "t")
    assert r.components == {} and r.size == 0
    assert list(vars(r)) == [f.name for f in dataclasses.fields(KernelRecord)]
    assert dataclasses.replace(r, size=3) == KernelRecord(
        "k", "d", "b", "a", "e", "l", "s", "h", "t", size=3
    )


def test_tune_key_is_the_sha256_of_json_dumps_of_its_four_parts() -> None:
    """`tune_key` quotes without making `json.dumps`' encoder: the same key for any text
    (controls, quotes, lone surrogates, non-ASCII) and for parts that are not text."""
    import hashlib
    import json

    from warmcli.records import tune_key

    class Text(str):
        pass

    parts = [
        ("op", "float32[8]", "sm_80", "c" * 64),
        ('\x00\n"\\', "\udc80é\u2028", "💥", ""),
        (Text("op"), "s", "d", "c"),
        (1, "s", None, "c"),
    ]
    for four in parts:
        expected = hashlib.sha256(json.dumps(list(four)).encode()).hexdigest()
        assert tune_key(*four) == expected  # type: ignore[arg-type]


def test_hand_written_inits_keep_fields_defaults_and_order() -> None:
    from warmcli.records import CandidateMeasurement, TuneRecord

    c = CandidateMeasurement("n", "k", "ok")
    assert (c.seconds, c.samples, c.reason) == (None, (), "")
    assert list(vars(c)) == [f.name for f in dataclasses.fields(CandidateMeasurement)]
    t = TuneRecord("k", "op", "s", "d", "c", "measured", "n", (c,))
    assert (t.seconds, t.measured_at) == (0.0, 0.0)
    assert list(vars(t)) == [f.name for f in dataclasses.fields(TuneRecord)]
    assert t == TuneRecord(
        key="k",
        operation="op",
        shape_key="s",
        device="d",
        checksum="c",
        status="measured",
        pick="n",
        candidates=(c,),
    )
