"""Toolchain identity: which compiler, at which version, built a binary.

A `Toolchain` is a compiler's resolved path and the first line of its
`--version`; its `identity` is part of every kernel key, so upgrading the
compiler makes every kernel a different kernel. Probing runs the compiler once
per path per process (memoised). Nothing here compiles.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass


class ToolchainError(RuntimeError):
    """A compiler could not be found or did not answer `--version`."""


@dataclass(frozen=True)
class Toolchain:
    """A compiler binary and its version line."""

    name: str
    path: str
    version: str

    @property
    def identity(self) -> str:
        """What keys a kernel: the compiler and its version, not where it is installed.

        The path differs between a CI checkout's venv and a GPU machine's toolkit while
        the output is the same; keying on it would make every bundle miss everywhere
        but where it was built. The path is kept beside the bundle's fingerprints.
        """
        return f"{self.name}:{self.version}"

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "path": self.path, "version": self.version}


@functools.cache
def probe(name: str, path: str) -> Toolchain:
    """Resolve `path` (a name on PATH or a file) and read its version line."""
    found = (path if os.access(path, os.X_OK) else None) if os.sep in path else shutil.which(path)
    if not found:
        raise ToolchainError(f"{name}: compiler {path!r} not found")
    real = os.path.realpath(found)
    try:
        out = subprocess.run(
            [real, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise ToolchainError(f"{name}: cannot run {real}: {exc}") from exc
    lines = [ln.strip() for ln in (out.stdout or out.stderr).splitlines() if ln.strip()]
    if out.returncode != 0 or not lines:
        raise ToolchainError(f"{name}: {real} --version failed: {out.stderr.strip()[:200]}")
    version = _nvcc_version(lines) if name == "nvcc" else lines[0]
    return Toolchain(name=name, path=real, version=version)


def _nvcc_version(lines: list[str]) -> str:
    """nvcc's banner reduced to its release line and its build line, joined by "; ".

    ("Cuda compilation tools, release 13.5, V13.5.37; Build cuda_13.5.r13.5/...").
    The release alone misses rebuilds, the build alone hides the version a user reads.
    """
    keep = [ln for ln in lines if "release" in ln or ln.startswith("Build")]
    return "; ".join(keep) or lines[-1]
