"""Cold, miss and hit compute the same, on host workloads unlike the examples.

Each workload here returns the buffers it computed; a driver process runs it on the host
runtime and writes them to a `.npz`, cold (`WARM_BUNDLE=` empty), served by the bundle
`warm run` made (`WARM_REPORT=1` says it served everything) and, where a variant is given,
changed against that bundle (a partial miss, which must compile what changed and serve the
rest). Every array must match the cold one bit for bit. Real `warm run` and real cc.

Found here: a C kernel with `__attribute__((constructor))` shared a translation unit (one
binary) with other kernels, so a hit ran its constructor when any of them loaded, before the
kernels launched ahead of it (`srand(12345)` reseeded `rand()` for kernels that a cold start
ran unseeded): it is built alone now (build recipe 4).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

DRIVE = """
import runpy, sys
import numpy as np
import warmcli
rt = warmcli.runtime("host")
got = runpy.run_path(sys.argv[1])["workload"](rt)
rt.synchronize()
np.savez(sys.argv[2], **{name: rt.read(buffer) for name, buffer in got.items()})
"""


class Trial:
    """One workload in a folder of its own: run cold, warmed, served and changed."""

    def __init__(self, folder: Path, source: str, name: str = "w.py") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.workload, self.bundle = folder, folder / name, folder / "b.warm"
        self.workload.write_text(source, encoding="utf-8")
        (folder / "drive.py").write_text(DRIVE)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        self.env.update(WARM_HOME=str(folder / "home"), COLUMNS="200")
        self.runs = 0

    def _python(self, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *map(str, args)],
            capture_output=True,
            text=True,
            env={**self.env, **env},
            cwd=self.folder,
            timeout=300,
        )

    def warm(self, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        return self._python("-m", "warmcli", *args, **env)

    def outputs(self, bundle: str, **env: str) -> tuple[dict[str, np.ndarray], str]:
        """What the workload computed, over `bundle` ('' for none), and the report."""
        self.runs += 1
        out = self.folder / f"out{self.runs}.npz"
        env = dict(env, WARM_BUNDLE=bundle, WARM_REPORT="1")
        done = self._python(self.folder / "drive.py", self.workload, out, **env)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        with np.load(out) as arrays:
            return {name: arrays[name] for name in arrays.files}, done.stderr

    def cold(self, **env: str) -> dict[str, np.ndarray]:
        return self.outputs("", **env)[0]

    def warmed(self, *options: str) -> str:
        done = self.warm("run", self.workload, "-b", self.bundle, "-q", *options)
        assert done.returncode == 0, done.stderr + done.stdout
        assert "Traceback" not in done.stderr, done.stderr
        return done.stderr

    def served(self, **env: str) -> tuple[dict[str, np.ndarray], str]:
        return self.outputs(str(self.bundle), **env)


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """`a` and `b` hold the same arrays, bit for bit."""
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), (name, a[name], b[name])


def served_everything(report: str) -> None:
    assert "served everything: compiled 0 kernels, tuned 0 operations" in report, report


CONSTRUCTOR = r"""
from warmcli import Kernel
DEVICE = "host"
PLAIN = [Kernel("void a(int *o) { o[0] = rand() % 1000 + ID; }", "a", "P", defines={"ID": i})
         for i in range(6)]
SEEDS = Kernel(
    "__attribute__((constructor)) static void seed(void) { srand(12345); }\n"
    "void b(int *o) { o[0] = rand() % 1000; }", "b", "P")
def workload(rt):
    out = {}
    for i, k in enumerate(PLAIN):
        out[f"a{i}"] = rt.buffer(1, "int32")
        rt.launch(k, out[f"a{i}"])
    out["b"] = rt.buffer(1, "int32")
    rt.launch(SEEDS, out["b"])
    return out
"""


def test_a_kernel_with_a_constructor_runs_it_when_it_loads_served_as_cold(tmp_path: Path) -> None:
    """`rand()` is the process's: a cold start runs the six plain kernels unseeded, then
    loads `b`, whose constructor seeds it. Batched with them into one binary (`-j 1`: one
    group), a hit ran that constructor when `a0` loaded: every output differed."""
    trial = Trial(tmp_path, CONSTRUCTOR)
    cold = trial.cold()
    trial.warmed("-j", "1")
    hot, report = trial.served()
    served_everything(report)
    same(cold, hot)


CPATH_WORKLOAD = r"""
from warmcli import Kernel
DEVICE = "host"
K = Kernel("#include <cpv.h>\nvoid c(int *o) { o[0] = CPV; }", "c", "P")
def workload(rt):
    o = rt.buffer(1, "int32")
    rt.launch(K, o)
    return {"o": o}
"""


def test_relative_and_empty_cpath_entries_are_the_working_folders_as_cc_reads_them(
    tmp_path: Path,
) -> None:
    """`CPATH=sub` names `./sub` and `CPATH=:` the working folder, as cc reads them (an
    empty entry is the working folder). warm keyed `sub` from the working folder but ran cc
    in its scratch folder, where `sub` is not: a cold start failed to compile (`cpv.h: No
    such file or directory`) what a bundle warmed with the same folder named absolutely
    served; and it keyed an empty entry as no folder, so `CPATH=:` was a miss whose compile
    failed."""
    trial = Trial(tmp_path, CPATH_WORKLOAD)
    (tmp_path / "cpv.h").write_text("#define CPV 7\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cpv.h").write_text("#define CPV 2\n")
    trial.env["CPATH"] = str(tmp_path)
    trial.warmed()
    assert trial.cold(CPATH="sub")["o"].tolist() == [2]
    assert trial.cold(CPATH=":")["o"].tolist() == [7]
    hot, report = trial.served(CPATH=":")
    served_everything(report)
    assert hot["o"].tolist() == [7]
    missed, report = trial.served(CPATH="sub")
    assert "lacked 1 kernel(s)" in report and missed["o"].tolist() == [2], report
