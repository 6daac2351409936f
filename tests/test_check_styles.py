"""How a checked tunable's tune key treats each style in which a user holds a check's
tolerance, through the real CLI (`warm run`, host backend) and real production processes
(each a fork of a process that imported the CLI, or numpy and warmcli, once: one a TOL,
`tests/forked_cli.py`, `tests/forked_python.py`; what each serves is tested, not how it
starts). The style each case tries is named in its workload's text (`KIND`).

Each style, warmed with TOL=1.0 (the fast wrong candidate, 0.5 high, passes and wins):
(A) served: a production process with the same TOL hits the tune (measures nothing),
though the Tunable is made in the workload, after its check ran in `warm run`'s passes;
(B) never a stale pick: one with TOL=0.0 (whose check would exclude it) misses and
re-tunes, never serving the old pick unchecked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SQUARES, TUNED_READ, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from forked_python import ForkedPython

STYLES = (
    SQUARES
    + """
import dataclasses
import enum
import functools
import os

DEVICE = "host"
CALLS = []
COUNTS = {"n": 0}


def close(outputs, inputs, tol):
    return bool(np.abs(outputs[0] - inputs[0] ** 2).max() <= tol)


def closure(tol):
    def check(outputs, inputs):
        return close(outputs, inputs, tol)
    return check


class Close:
    def __init__(self, tolerance):
        self.tolerance = tolerance

    def __call__(self, outputs, inputs):
        return close(outputs, inputs, self.tolerance)

    def method(self, outputs, inputs):
        return close(outputs, inputs, self.tolerance)


class Static:
    TOL = float(os.environ["TOL"])

    @staticmethod
    def static(outputs, inputs):
        return close(outputs, inputs, Static.TOL)

    @classmethod
    def klass(cls, outputs, inputs):
        return close(outputs, inputs, cls.TOL)


@dataclasses.dataclass(frozen=True)
class Cfg:
    tol: float


CFG = Cfg(float(os.environ["TOL"]))


def by_dataclass(outputs, inputs):
    return close(outputs, inputs, CFG.tol)


class Level(enum.Enum):
    TOL = float(os.environ["TOL"])


def by_config(outputs, inputs, cfg):
    return close(outputs, inputs, cfg.tol)


def config_closure(cfg):
    return lambda outputs, inputs: close(outputs, inputs, cfg.tol)


def by_enum(outputs, inputs):
    return close(outputs, inputs, Level.TOL.value)


def by_environ(outputs, inputs):
    return close(outputs, inputs, float(os.environ["TOL"]))


def counting_list(outputs, inputs):
    CALLS.append(1)
    return close(outputs, inputs, Static.TOL)


def counting_dict(outputs, inputs):
    COUNTS["n"] += 1
    return close(outputs, inputs, Static.TOL)


N = 0


def counting_global(outputs, inputs):
    global N
    N += 1
    return close(outputs, inputs, Static.TOL)


ARRAY = np.array([float(os.environ["TOL"])])


def by_array(outputs, inputs):
    return close(outputs, inputs, ARRAY[0])


ERRORS = np.zeros(1)


def array_recorder(outputs, inputs):  # the largest error seen, into an array
    ERRORS[0] = max(ERRORS[0], float(np.abs(outputs[0] - inputs[0] ** 2).max()))
    return close(outputs, inputs, Static.TOL)


class Recorder(Close):
    def __init__(self, tolerance):
        super().__init__(tolerance)
        self.errors = np.zeros(1)

    def __call__(self, outputs, inputs):
        self.errors[0] += 1
        return close(outputs, inputs, self.tolerance)


def by_array_default(outputs, inputs, tol=np.array([float(os.environ["TOL"])])):
    return close(outputs, inputs, tol[0])


RECORDER = Recorder(float(os.environ["TOL"]))


DICT = {"tol": float(os.environ["TOL"])}


def by_dict(outputs, inputs):
    return close(outputs, inputs, DICT["tol"])


def check():
    tol = float(os.environ["TOL"])
    return {
        "lambda_default": lambda outputs, inputs, tol=tol: close(outputs, inputs, tol),
        "partial": functools.partial(close, tol=tol),
        "closure": closure(tol),
        "instance": Close(tol),
        "bound_method": Close(tol).method,
        "staticmethod": Static.static,
        "classmethod": Static.klass,
        "dataclass_global": by_dataclass,
        "enum_value": by_enum,
        "environ_at_call": by_environ,
        "counting_list": counting_list,
        "counting_dict": counting_dict,
        "counting_global": counting_global,
        "array_global": by_array,
        "array_default": by_array_default,
        "array_recorder": array_recorder,
        "dict_global": by_dict,
        "dataclass_closure": config_closure(Cfg(tol)),
        "dataclass_partial": functools.partial(by_config, cfg=Cfg(tol)),
        "dataclass_default": lambda outputs, inputs, cfg=Cfg(tol): close(outputs, inputs, cfg.tol),
        "array_recorder_attr": RECORDER,
    }[KIND]


def workload(rt):
    x = rt.upload(np.arange(64, dtype=np.float32))
    y = rt.buffer(64, "float32")
    rt.tune(Tunable("sq", {"good": GOOD, "fast": FAST_WRONG}, launch, restore=(1,),
                    check=check()), x, y, 64)
    return y
"""
)
KEPT = [  # A and B both hold
    "lambda_default", "partial", "closure", "instance", "bound_method", "staticmethod",
    "classmethod", "counting_list", "counting_dict", "counting_global",
    "dataclass_global", "enum_value", "array_global", "array_default",
    "array_recorder", "array_recorder_attr", "dataclass_closure", "dataclass_partial",
    "dataclass_default",
]  # fmt: skip


TOLS = ("1.0", "0.0")  # the loose TOL warmed, the strict one (its check excludes the fast pick)


@pytest.fixture(scope="module")
def producing() -> Iterator[dict[str, ForkedPython]]:
    """The production processes' servers, one a TOL (conftest's `warm` environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    servers = {tol: ForkedPython(dict(env, COLUMNS="200", TOL=tol), ROOT) for tol in TOLS}
    yield servers
    for server in servers.values():
        server.close()


class _Tol:
    """`warm` with TOL set, its `production` (as `Warm.production`) forked from `producing`."""

    def __init__(self, warm: Any, producing: dict[str, ForkedPython], tol: str) -> None:
        self.warm, self.server, self.tol = warm.with_env(TOL=tol), producing[tol], tol

    def production(self, code: str, *args: str | Path | int, bundle: Path | None = None) -> Any:
        env = dict(self.warm.env, **({"WARM_BUNDLE": str(bundle)} if bundle is not None else {}))
        done = self.server.run(code, *map(str, args), env=env, cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def _warmed(
    warm: Any, producing: dict[str, ForkedPython], workload_file, bundle: Path, kind: str
) -> tuple[Path, _Tol, _Tol]:
    path = workload_file(STYLES + f"\nKIND = {kind!r}\n")
    loose, strict = (_Tol(warm, producing, tol) for tol in TOLS)
    proc = loose.warm("run", path, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr
    return path, loose, strict


@pytest.mark.parametrize("kind", KEPT)
def test_a_check_style_is_served_and_never_stale(
    warm: Warm, producing: dict[str, ForkedPython], workload_file, bundle_path: Path, kind: str
) -> None:
    path, loose, strict = _warmed(warm, producing, workload_file, bundle_path, kind)
    assert loose.production(TUNED_READ, path, 1, bundle=bundle_path) == {"y": 1.5, "tunes": 0}
    served = strict.production(TUNED_READ, path, 1, bundle=bundle_path)
    assert served == {"y": 1.0, "tunes": 1}, "a miss, never the pick made under TOL=1.0"


@pytest.mark.parametrize("kind", ["environ_at_call", "dict_global"])
def test_a_tolerance_read_as_the_check_runs_or_from_a_dict_is_served_unkeyed(
    warm: Warm, producing: dict[str, ForkedPython], workload_file, bundle_path: Path, kind: str
) -> None:
    """What the check reads only as it runs (`os.environ`), or from a dict (which a
    workload may fill as it runs), is no part of the key: served (A); under another TOL a
    bundle serves the pick made under the old one (B is not kept, as the README says:
    hold the tolerance where the Tunable is made, in a default, global or partial)."""
    path, loose, strict = _warmed(warm, producing, workload_file, bundle_path, kind)
    assert loose.production(TUNED_READ, path, 1, bundle=bundle_path) == {"y": 1.5, "tunes": 0}
    assert strict.production(TUNED_READ, path, 1) == {"y": 1.0, "tunes": 1}, "cold"
    assert strict.production(TUNED_READ, path, 1, bundle=bundle_path)["tunes"] == 0
