"""A compiler's version line, as it answers `--version`: what a probe runs where none is remembered.

`warmcli.backends.toolchain` remembers each compiler's line by its file's stamp, so a hot start
never runs a compiler nor imports this module: it runs one (`warmcli.backends.processes`)
and reduces its banner to the line that keys its builds (nvcc's: its release and build
lines), asked in the C locale (before warm 53, a translated banner, `as` under
`LANG=tr_TR.UTF-8`: `GNU çevirici`, keyed its builds apart: rebuilt where the locale differed).
A compiler that did not answer within the timeout is not asked again by this process while its
file keeps its stamp, for `SILENT_SECONDS` (`_silent`): each look at the toolchain asked it
again, each waiting the whole timeout (a `warm run` of one kernel waited 60 s twice before it
said so); a long-lived process asks again after that (a toolkit on a cold network mount answers
late once). Where this process ignores SIGCHLD (every child's exit status read as 0), an answer
on stderr alone is a failure (a failing wrapper's error line was a version line). State: those
stamps; it prints nothing.
"""

from __future__ import annotations

import os
import time

from warmcli.errors import ToolchainError
from warmcli.stamped import Stamp, stamp

SILENT_SECONDS = 300.0  # how long a compiler silent on `--version` is not asked again
_silent: dict[str, tuple[Stamp, str, float]] = {}  # path -> its stamp, the error's, until when


def _stamp(where: str) -> Stamp | None:
    try:
        return stamp(os.stat(where))
    except (OSError, ValueError):
        return None


def version_line(name: str, where: str, timeout: float) -> str:
    """The first line `where --version` prints in the C locale (nvcc's: `nvcc_version`);
    ToolchainError where it cannot run, answers nothing within `timeout` seconds, or fails."""
    from warmcli.backends import processes  # on first use: a serving process runs no compiler

    before = _stamp(where)
    silent = _silent.get(where)
    if silent is not None and silent[0] == before and time.monotonic() < silent[2]:
        raise ToolchainError(silent[1])  # (asked once: not waited for again, for a while)
    try:
        out = processes.run([where, "--version"], timeout, c_locale=True)
    except OSError as exc:
        raise ToolchainError(f"{name}: cannot run {where}: {exc}") from exc
    if out.timed_out:
        said = f"{name}: {where} did not answer --version within {timeout:g} s"
        if before is not None and (where in _silent or len(_silent) < 64):  # (a few a process)
            _silent[where] = before, said, time.monotonic() + SILENT_SECONDS
        raise ToolchainError(said)
    # Its exit status lost (this process ignores SIGCHLD: read as 0), an answer on stderr
    # alone is taken for the failure it most likely is, never a version line keying builds.
    lines = [ln.strip() for ln in (out.out or out.err).splitlines() if ln.strip()]
    guessed = out.status_lost and not out.out.strip()
    if out.returncode != 0 or not lines or guessed:
        said = out.err.strip()[:200]  # else its exit status: never a reason left blank
        status = f"exit status {out.returncode}" if out.returncode else "printed nothing"
        failed = f": {said}" if said else f" ({status})"
        lost = " (its exit status unknown: this process ignores SIGCHLD)" if guessed else ""
        raise ToolchainError(f"{name}: {where} --version failed{failed}{lost}")
    return nvcc_version(lines) if name == "nvcc" else lines[0]


def nvcc_version(lines: list[str]) -> str:
    """nvcc's banner reduced to its release line and its build line, joined by "; ".

    ("Cuda compilation tools, release 13.5, V13.5.37; Build cuda_13.5.r13.5/...").
    The release alone misses rebuilds, the build alone hides the version a user reads.
    """
    keep = [ln for ln in lines if "release" in ln or ln.startswith("Build")]
    return "; ".join(keep) or lines[-1]
