"""A host compiler found through a compiler launcher (`/usr/lib/ccache/cc`, a link to
`ccache`, first on PATH, which runs the next `cc` on PATH): its identity is the compiler the
launcher runs. It was the launcher's: its version line read through it, named as the
launcher's binary and remembered by the launcher's stamp, so a compiler replaced behind it
(upgraded, or a wrapper script adding flags) kept the old identity and its kernels were
served the old builds, and a machine without the launcher keyed the same compiler apart.
A real launcher (a small C program that runs the next of its name on PATH, as ccache does)
and the real C compiler; identities read in fresh processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

LAUNCHER = r"""
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {  /* the next of its name on PATH that is not itself */
    char *name = basename(argv[0]), *path = strdup(getenv("PATH")), self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n < 0 ? 0 : n] = 0;
    for (char *dir = strtok(path, ":"); dir; dir = strtok(NULL, ":")) {
        char at[PATH_MAX], real[PATH_MAX];
        snprintf(at, sizeof at, "%s/%s", dir, name);
        if (access(at, X_OK) == 0 && realpath(at, real) && strcmp(real, self) != 0)
            execv(at, argv);
    }
    return 127;
}
"""
PROBE = "from warmcli.backends.toolchain import probe; t = probe('cc', 'cc'); print(t.identity)"


def _identity(tmp_path: Path, search: str) -> str:
    env = dict(os.environ, PATH=search, WARM_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_compiler_behind_a_launcher_is_keyed_as_itself(tmp_path: Path) -> None:
    for folder in ("bin", "launch", "real"):
        (tmp_path / folder).mkdir()
    source = tmp_path / "launcher.c"
    source.write_text(LAUNCHER)
    subprocess.run(["cc", "-O2", "-o", str(tmp_path / "bin" / "ccache"), str(source)], check=True)
    (tmp_path / "launch" / "cc").symlink_to(tmp_path / "bin" / "ccache")
    real = tmp_path / "real" / "cc"
    shutil.copy(os.path.realpath(shutil.which("cc") or "/usr/bin/cc"), real)
    system = os.environ["PATH"]
    launched = f"{tmp_path / 'launch'}{os.pathsep}{tmp_path / 'real'}{os.pathsep}{system}"
    direct = f"{tmp_path / 'real'}{os.pathsep}{system}"
    first = _identity(tmp_path, launched)
    assert first == _identity(tmp_path, direct), "the same compiler, keyed apart"
    assert "ccache" not in first, first
    real.unlink()  # replaced behind the launcher: a wrapper that adds a flag
    real.write_text(f'#!/bin/sh\nexec {shutil.which("gcc") or "gcc"} -DSCALE=5 "$@"\n')
    real.chmod(0o755)
    again = _identity(tmp_path, launched)
    assert again != first and "wrapper script" in again, again
    assert again == _identity(tmp_path, direct)
