"""Where the test suite's CPU goes, per test: a pytest plugin and its report.

Run the suite (or some files) with it, `-n 3` as `make test` does or on one process:
`CPUC_DIR=/tmp/cpuc PYTHONPATH=tools .venv/bin/python -m pytest -q -n 3 -p cpu_census
FILES`, then `python tools/cpu_census.py /tmp/cpuc` writes `files.txt` and `tests.txt` there
(CPU seconds, heaviest first). Each test's figure is the CPU of the test process's whole
tree between its start and its end: every live descendant's own and waited-for children's
time (`/proc/PID/stat`), so what a forked server's child, a compiler or a Dask worker spent
for the test counts; a module fixture's setup lands on its first test, a process that
leaves the tree (double-forked) is lost. Under xdist only the workers count (the
controller's tree holds every worker's). Owns its output file; never changes what a test
does.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path
from typing import IO, Any, ClassVar

_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` and its live descendants, each with its waited-for children's."""
    children: dict[int, list[int]] = {}
    fields: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path("/proc", name, "stat").read_text()
        except OSError:
            continue
        rest = text[text.rfind(")") + 2 :].split()
        fields[int(name)] = rest
        children.setdefault(int(rest[1]), []).append(int(name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in fields:  # utime, stime, cutime, cstime
            total += sum(int(value) for value in fields[pid][11:15])
        todo.extend(children.get(pid, []))
    return total / _TICKS


class _Census:
    out: IO[str] | None = None
    started: ClassVar[dict[str, float]] = {}
    controller = False  # (xdist's: its tree holds every worker's)


def pytest_configure(config: Any) -> None:
    workers = getattr(config.option, "numprocesses", None)
    _Census.controller = bool(workers) and "PYTEST_XDIST_WORKER" not in os.environ


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if not _Census.controller:
        _Census.started[nodeid] = tree_cpu(os.getpid())


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if _Census.controller:
        return
    if _Census.out is None:
        folder = Path(os.environ.get("CPUC_DIR", "/tmp/cpuc"))
        folder.mkdir(parents=True, exist_ok=True)
        _Census.out = (folder / f"out-{os.getpid()}.jsonl").open("a")
    spent = tree_cpu(os.getpid()) - _Census.started.pop(nodeid, 0.0)
    _Census.out.write(json.dumps([nodeid, round(spent, 3)]) + "\n")
    _Census.out.flush()


def report(folder: Path) -> None:
    """`files.txt` and `tests.txt` in `folder`, from its `out-*.jsonl`."""
    tests: dict[str, float] = {}
    for path in folder.glob("out-*.jsonl"):
        for line in path.read_text().splitlines():
            nodeid, spent = json.loads(line)
            tests[nodeid] = spent
    files: collections.Counter[str] = collections.Counter()
    for nodeid, spent in tests.items():
        files[nodeid.split("::")[0]] += spent
    lines = [f"{spent:7.1f} {name}" for name, spent in files.most_common()]
    (folder / "files.txt").write_text("\n".join(lines) + "\n")
    ranked = sorted(tests.items(), key=lambda item: -item[1])
    (folder / "tests.txt").write_text("".join(f"{s:7.2f} {n}\n" for n, s in ranked))
    sys.stdout.write(f"{len(tests)} tests, {sum(tests.values()):.1f} CPU-s\n")


if __name__ == "__main__":
    report(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cpuc"))
