"""A hostile bundle's JSON (a kernel's components, a format-1 tune's candidates, a fingerprint's
data): a document of lists and objects never sets warm's memory.

A kernel row's `components` may be 4 MiB of text (`MAX_TEXT_CHARS`); warm writes a flat object
of a few texts there. A bundle handed over with `[{},{},...]` in one row's components (3 bytes
an object) had every reader of that row hold ~1.3 million Python dicts while `json` parsed it:
`warm stats`, `verify`, `check` and a serving process peaked at 227-243 MB against 28-45 MB for
the same bundle without it (trial58b). Now a long components text that nests a container is
refused unparsed (`warmcli.bundle.flat_json`): the row is a corrupt entry, named so, its kernel
a miss the process compiles, each peak within 64 MiB of the sound bundle's. A format-1 tune's
candidates, JSON of lists and objects, are refused unparsed where they open more than warm
writes (two a candidate of over 70 characters), and read as before where they do not.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from test_blob_memory import SERVE_PEAK, _peak

from warmcli.bundle.rows import MAX_TEXT_CHARS

MARGIN = 64 << 20  # the most a hostile row's components may add to a peak (it added ~200 MB)
OBJECTS = "[" + ",".join(["{}"] * ((MAX_TEXT_CHARS - 4096) // 3)) + "]"  # under the limit
NESTED = {  # components texts no warm writes, each within the limit
    "a list of objects": OBJECTS,
    "an object holding them": '{"kernel": ' + OBJECTS + "}",
}


def _with_components(good: Path, out: Path, text: str) -> Path:
    shutil.copyfile(good, out)
    with sqlite3.connect(out) as conn:
        conn.execute("UPDATE kernels SET components = ? WHERE entry = 'row_sum'", (text,))
    conn.close()
    return out


@pytest.fixture(scope="module")
def bundles(made: tuple[Warm, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    warm, good = made
    where = tmp_path_factory.mktemp("nested")
    hostile = {k: _with_components(good, where / f"{i}.warm", t) for i, (k, t) in
               enumerate(NESTED.items())}  # fmt: skip
    return {"warm": warm, "good": good, **hostile}


@pytest.mark.parametrize("which", sorted(NESTED))
@pytest.mark.parametrize("command", ["stats", "verify", "check"])
def test_a_nested_components_text_is_refused_unparsed(
    bundles: dict, which: str, command: str
) -> None:
    """Before: stats 227 MB, verify 241 MB, check 243 MB (sound bundle: 28, 44, 41 MB)."""
    _, base, _ = _peak(bundles["warm"], command, bundles["good"])
    code, peak, text = _peak(bundles["warm"], command, bundles[which])
    assert peak < base + MARGIN, (command, peak >> 20, base >> 20)
    assert code == (2 if command == "stats" else 1), text
    assert "corrupt kernel entry" in text and "not a JSON object" in text, text
    assert "Traceback" not in text, text


def test_a_long_flat_components_text_is_still_read(bundles: dict, tmp_path: Path) -> None:
    """A flat object of texts longer than `FLAT_CHARS` is parsed as before: warm's own form."""
    with sqlite3.connect(bundles["good"]) as conn:
        [(text,)] = conn.execute("SELECT components FROM kernels WHERE entry = 'row_sum'")
    conn.close()
    long = json.dumps({**json.loads(text), "pad": "[{}]" * 100_000})
    bundle = _with_components(bundles["good"], tmp_path / "long.warm", long)
    code, _, text = _peak(bundles["warm"], "verify", bundle)
    assert code == 0 and "sound" in text, text


def test_production_compiles_the_row_and_stays_small(bundles: dict) -> None:
    """Before: a serving process peaked at 235 MB (38 MB on the sound bundle)."""
    base, missed = bundles["warm"].production(SERVE_PEAK, bundles["good"])
    assert missed == [], missed
    peak, missed = bundles["warm"].production(SERVE_PEAK, bundles["a list of objects"])
    assert peak < base + MARGIN and missed == ["row_sum"], (peak >> 20, base >> 20, missed)


# A format-1 tune's candidates are JSON text of lists and objects, up to `MAX_PACKED_BYTES`: the
# same `[{},{},...]` there peaked warm stats at 136 MB, verify at 155 MB (sound: 28, 44 MB).
def _format1_with(path: Path, candidates: str | None) -> Path:
    from test_compact_tunes import _format1
    from test_format3 import _tune

    _format1(path, [_tune(0), _tune(1)])
    if candidates is not None:
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE tunes SET candidates = ? WHERE rowid = 1", (candidates,))
        conn.close()
    return path


@pytest.mark.parametrize("command", ["stats", "verify"])
def test_format1_candidates_of_containers_are_refused_unparsed(
    bundles: dict, tmp_path: Path, command: str
) -> None:
    from warmcli.bundle.candidates import MAX_PACKED_BYTES

    sound = _format1_with(tmp_path / "sound.warm", None)
    objects = "[" + ",".join(["{}"] * ((MAX_PACKED_BYTES - 4096) // 3)) + "]"
    hostile = _format1_with(tmp_path / "hostile.warm", objects)
    _, base, _ = _peak(bundles["warm"], command, sound)
    code, peak, text = _peak(bundles["warm"], command, hostile)
    assert peak < base + MARGIN, (command, peak >> 20, base >> 20)
    assert code == (2 if command == "stats" else 1), text
    assert "more lists and objects than warm writes" in text and "Traceback" not in text, text


def test_format1_candidates_as_warm_wrote_them_are_still_read() -> None:
    """Long texts warm wrote: many samples (few containers), many candidates (two each)."""
    from test_format3 import _tune

    from warmcli.bundle.candidates import decode
    from warmcli.bundle.flat_json import FLAT_CHARS
    from warmcli.records import CandidateMeasurement

    one = _tune(0).candidates[0]
    samples = (one.name, "", one.status, one.seconds, (1e-05,) * 20_000, "")
    many = tuple(CandidateMeasurement(f"c{i}", "", "ok", 0.0, (), "") for i in range(2_000))
    for candidates in ((CandidateMeasurement(*samples),), many):
        text = _tune(0).__class__(*_tune(0)._values()[:7], candidates).candidates_json()
        assert len(text) > FLAT_CHARS
        assert decode(text) == candidates


# A fingerprint's data: 16 KiB at most, 1,024 rows read; `{"a":[{},...]}` in each held 435 MB in
# warm stats, 570 MB in stats --json, 453 MB in merge (sound: 28-45 MB). Now a fingerprint whose
# data is not a flat object, as warm writes it, is corrupt, never parsed.
NESTED_FINGERPRINT = '{"a":[' + ",".join(["{}"] * 5440) + "]}"


@pytest.fixture(scope="module")
def fingerprinted(bundles: dict) -> Path:
    out = bundles["good"].parent / "fingerprints.warm"
    shutil.copyfile(bundles["good"], out)
    with sqlite3.connect(out) as conn:
        conn.executemany(
            "INSERT INTO fingerprints VALUES (?, 'device', ?)",
            [(f"device:x{i}", NESTED_FINGERPRINT) for i in range(1000)],
        )
    conn.close()
    return out


@pytest.mark.parametrize("command", [("stats",), ("stats", "--json"), ("merge", "-o")])
def test_fingerprints_of_containers_are_refused_unparsed(
    bundles: dict, fingerprinted: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    def run(bundle: Path) -> tuple[int, int, str]:
        if command[0] == "merge":
            return _peak(bundles["warm"], "merge", bundle, "-o", tmp_path / f"{bundle.stem}.out")
        return _peak(bundles["warm"], *command, bundle)

    _, base, _ = run(bundles["good"])
    code, peak, text = run(fingerprinted)
    assert peak < base + MARGIN, (command, peak >> 20, base >> 20)
    assert code == 2 and "corrupt fingerprint entry 'device:x" in text, text
    assert "not a JSON object" in text and "Traceback" not in text, text


def test_fingerprints_as_warm_writes_them_are_still_read() -> None:
    from warmcli.bundle.manifest import _fingerprint

    data = '{"name": "nvrtc", "path": "/a/[b]{c}.so", "version": "V13 {x: [1]}"}'
    assert _fingerprint(("toolchain:x", "toolchain", data, None))["path"] == "/a/[b]{c}.so"


def test_an_unclosed_string_of_escapes_is_read_in_one_scan(bundles: dict, tmp_path: Path) -> None:
    """`{"\\"\\...`: `flat_json`'s string pattern, failing to close, was tried again from each
    later quote (64 KiB: 32 s; the limit's 4 MiB: days), in every reader of the row; one scan
    now (4 MiB: 0.35 s), the row a corrupt entry as any other that is no JSON object."""
    text = "{" + '"\\' * ((MAX_TEXT_CHARS - 4096) // 2)
    bundle = _with_components(bundles["good"], tmp_path / "escapes.warm", text)
    proc = bundles["warm"]("stats", bundle, timeout=120)  # (before: killed at the timeout)
    assert proc.returncode == 2 and "corrupt kernel entry" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
