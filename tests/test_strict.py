"""Strict mode and WARM_EXPLAIN in production: real bundles, the real `use_bundle`/`runtime()`."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_explain import adder, fake_cc, scale, warm_into, workload

import warmcli
from warmcli import ProcessMode, ProcessModeOverride, StatisticsCollector, StrictMissError
from warmcli.backends.host import HostDevice
from warmcli.errors import WarmError
from warmcli.runtime.misses import MissPolicy, Strictness


@pytest.fixture(scope="module")
def complete(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return warm_into(tmp_path_factory.mktemp("strict") / "complete.warm", HostDevice())


@pytest.fixture(autouse=True)
def production(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("WARM_BUNDLE", "WARM_STRICT", "WARM_EXPLAIN", "WARM_BUNDLE_WRITE"):
        monkeypatch.delenv(name, raising=False)
    # closed first too: a test of another file run before in this process may have asked for
    # a runtime with no bundle named (production then looked, and found none: WARM_BUNDLE set
    # later is not read again until a close), as xdist may run one just before
    warmcli.production.close()
    yield
    warmcli.production.close()


def serve(**changes: object) -> StatisticsCollector:
    collector = StatisticsCollector()
    with ProcessModeOverride(ProcessMode.EXECUTE, collector):
        workload(warmcli.runtime("host"), **changes)  # type: ignore[arg-type]
    return collector


def test_strict_does_not_raise_on_a_complete_bundle(complete: Path) -> None:
    warmcli.use_bundle(complete, strict=True)
    reader = serve().reader()
    assert reader.compilation.loaded == 2 and reader.compilation.compiled == 0
    assert reader.autotune.hits == 1 and reader.misses() == []


def test_strict_raises_on_a_missing_kernel_before_compiling(complete: Path) -> None:
    warmcli.use_bundle(complete, strict=True)
    collector = StatisticsCollector()
    with (
        pytest.raises(StrictMissError) as caught,
        ProcessModeOverride(ProcessMode.EXECUTE, collector),
    ):
        workload(warmcli.runtime("host"), kernel=scale(factor=5))
    miss = caught.value.explanation
    assert (miss.kind, miss.label, miss.reason) == ("kernel", "scale[FACTOR=5]", "defines")
    assert miss.key[:16] in str(caught.value)
    assert ": defines: bundle has FACTOR=2, this process wants FACTOR=5" in str(caught.value)
    stats = collector.reader().compilation
    assert stats.compiled == 0 and stats.misses == {"defines": 1}


@pytest.mark.parametrize("kind", ["kernel", "tune"])
def test_strict_refuses_a_miss_on_every_attempt(complete: Path, kind: str) -> None:
    """A caller that catches the first StrictMissError and launches or tunes again is refused
    again: one miss policy for kernels and tunes, the miss explained and counted once, but
    never compiled nor measured."""
    changes: dict[str, object] = {"kernel": scale(factor=5)} if kind == "kernel" else {"n": 256}
    warmcli.use_bundle(complete, strict=True)
    collector = StatisticsCollector()
    with ProcessModeOverride(ProcessMode.EXECUTE, collector):
        rt = warmcli.runtime("host")
        for _ in range(3):
            with pytest.raises(StrictMissError, match="defines" if kind == "kernel" else "tune"):
                workload(rt, **changes)  # type: ignore[arg-type]
    stats = collector.reader().compilation
    tunes = collector.reader().autotune
    if kind == "kernel":
        assert stats.compiled == 0 and stats.batches == 0 and stats.misses == {"defines": 1}
    else:
        assert tunes.measured == 0 and tunes.misses == {"shape": 1}
        assert stats.compiled == 0 and stats.misses == {}


def test_strict_raises_on_a_missing_tune_before_measuring(complete: Path) -> None:
    warmcli.use_bundle(complete, strict=True)
    collector = StatisticsCollector()
    with pytest.raises(StrictMissError, match="would tune add float32") as caught:
        with ProcessModeOverride(ProcessMode.EXECUTE, collector):
            workload(warmcli.runtime("host"), n=256)
    assert caught.value.explanation.reason == "shape"
    assert collector.reader().autotune.measured == 0


def test_strict_warn_logs_and_still_tunes(
    complete: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("WARM_STRICT", "warn")
    warmcli.use_bundle(complete)
    with caplog.at_level(logging.WARNING, logger="warmcli"):
        reader = serve(tunable=adder((1, 2, 4))).reader()
    assert reader.autotune.measured == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "warmcli"]
    assert any(line.startswith("warm: strict: tune add") and "step4" in line for line in lines)


def test_warm_explain_logs_one_line_per_miss(
    complete: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("WARM_EXPLAIN", "1")
    monkeypatch.setenv("WARM_BUNDLE", str(complete))
    with caplog.at_level(logging.WARNING, logger="warmcli"):
        reader = serve(kernel=scale(options=("-O3",)), n=32).reader()
    lines = [r.getMessage() for r in caplog.records if r.name == "warmcli"]
    assert lines == [f"warm: miss: {m.line()}" for m in reader.misses()]
    assert {m.reason for m in reader.misses()} == {"options", "shape"}


def test_strict_setting_is_parsed_strictly() -> None:
    assert MissPolicy.from_env(environ={"WARM_STRICT": "1"}).strict is Strictness.RAISE
    assert MissPolicy.from_env(environ={"WARM_STRICT": "warn"}).strict is Strictness.WARN
    assert MissPolicy.from_env(environ={"WARM_STRICT": "0"}).strict is Strictness.OFF
    assert MissPolicy.from_env(False, environ={"WARM_STRICT": "1"}).strict is Strictness.OFF
    with pytest.raises(ValueError, match=r"WARM_STRICT must be 1 .*warn, or 0") as refused:
        MissPolicy.from_env(environ={"WARM_STRICT": "always"})
    assert isinstance(refused.value, WarmError)  # one line from the CLI, like every error


PRODUCTION = """
import runpy, warmcli
example = runpy.run_path({example!r})
example["workload"](warmcli.runtime("host"))
"""


def test_a_production_process_serves_another_compilers_build(warm: Warm, tmp_path: Path) -> None:
    """The real thing: `warm run` with `WARM_CC=cc`, then serving processes under
    WARM_STRICT=1 whose compiler is `gcc` (the same binary: the same toolchain) or a
    wrapper that reports another version (another toolchain, whose host build still runs
    on this CPU): both compile nothing."""
    bundle = tmp_path / "served.warm"
    built = warm.with_env(WARM_CC="cc")("run", EXAMPLES / "matmul_host.py", "--bundle", bundle)
    assert built.returncode == 0, built.stderr
    script = PRODUCTION.format(example=str(EXAMPLES / "matmul_host.py"))
    env = {**warm.env, "WARM_BUNDLE": str(bundle), "WARM_STRICT": "1", "WARM_REPORT": "1"}
    for cc in ("gcc", str(fake_cc(tmp_path))):
        served = subprocess.run(
            [sys.executable, "-c", script],
            env={**env, "WARM_CC": cc},
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert served.returncode == 0, (cc, served.stderr)
        assert "served everything: compiled 0 kernels, tuned 0 operations" in served.stderr
