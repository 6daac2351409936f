"""The host compiler: many C kernels in one translation unit, one `cc` process, one shared object.

Each kernel's `#include`s are hoisted to the top, its defines and the macros it
defines itself are undefined after it, and its entry is renamed to a unique
symbol, so a group of kernels shares one `cc -O2 -fPIC -shared` process. The
compiler is `WARM_CC`, else `cc`. This module owns a scratch directory per call
and nothing else: it never loads what it builds and keeps no cache.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence

from warmcli.compiler import (
    CompiledGroup,
    CompileFailure,
    CompileUnit,
    isolated_section,
    split_includes,
)
from warmcli.toolchain import Toolchain, probe

BASE_FLAGS = ("-O2", "-fPIC", "-shared")


def host_cc() -> str:
    """The C compiler to use: `WARM_CC`, else `cc` on PATH."""
    return os.environ.get("WARM_CC") or "cc"


def translation_unit(units: Sequence[CompileUnit]) -> str:
    """The source of one group: hoisted includes, then each kernel isolated."""
    includes: dict[str, None] = {}
    sections = []
    for unit in units:
        found, body = split_includes(unit.kernel.source)
        includes.update(dict.fromkeys(found))
        sections.append(isolated_section(unit, body))
    return "\n".join([*includes, "", *sections])


def run_compiler(
    command: list[str], units: Sequence[CompileUnit], timeout: float | None, cwd: str
) -> tuple[str, float]:
    """Run one compiler process; raise `CompileFailure` with its log on error or timeout.

    The compiler runs in its own process group, and a timeout kills the whole group:
    a compiler driver's children (cc1, as, ld, or a wrapper's) never outlive it.
    """
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        raise CompileFailure(f"cannot run {command[0]}: {exc}", tuple(units)) from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise CompileFailure(
            f"{command[0]} did not finish within {timeout:g} s and was stopped\n{err}{out}",
            tuple(units),
            True,
        ) from None
    log = (err + out).strip()
    if proc.returncode != 0:
        raise CompileFailure(log or f"{command[0]} exited with {proc.returncode}", tuple(units))
    return log, time.perf_counter() - started


class HostCompiler:
    """Builds a shared object from a group of C kernels."""

    language = "c"

    def __init__(self, cc: str | None = None) -> None:
        self._cc = cc or host_cc()

    @property
    def toolchain(self) -> Toolchain:
        return probe("cc", self._cc)

    def command(self, units: Sequence[CompileUnit], source: str, output: str) -> list[str]:
        options = list(units[0].kernel.options) if units else []
        return [self.toolchain.path, *BASE_FLAGS, *options, "-o", output, source, "-lm"]

    def compile_group(
        self, units: Sequence[CompileUnit], timeout: float | None = None
    ) -> CompiledGroup:
        with tempfile.TemporaryDirectory(prefix="warm-cc-") as scratch:
            source = os.path.join(scratch, "batch.c")
            output = os.path.join(scratch, "batch.so")
            with open(source, "w") as fh:
                fh.write(translation_unit(units))
            command = self.command(units, source, output)
            log, seconds = run_compiler(command, units, timeout, scratch)
            with open(output, "rb") as fh:
                binary = fh.read()
        return CompiledGroup(
            binary=binary,
            symbols={u.key: u.symbol for u in units},
            log=log,
            seconds=seconds,
            command=tuple(command),
        )
