"""A CI engineer wiring warm in as a pre-build step, each finding with real parts.

- A GPU-less pre-build (`warm run --arch sm_90`) of a workload that also launches and
  tunes host kernels on `warmcli.runtime("host")` (its CUDA part on the runtime it is
  given) ran that host part on the process's own production runtime, outside the passes:
  compiled cold in every pass, never stored, unseen by the verify pass, which said "the
  bundle is complete" (exit 0). Production then compiled and tuned the host part itself
  (`WARM_STRICT=1` refused it). The host runtime a workload asks for during a pass on
  another device is now the run's own, warmed, stored and verified with the others.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm

from warmcli.backends.cuda.nvrtc import find_nvrtc


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")

# A CUDA kernel on the runtime `warm run` gives it, a host kernel and a host tune on the
# host runtime it asks warm for (`host_part`, which production also calls alone).
MIXED = r'''
import numpy as np
import warmcli
from warmcli import Kernel, Tunable

DEVICE = "cuda"
CU = Kernel("""extern "C" __global__ void k(float *y, int n) {
    int i = threadIdx.x; if (i < n) y[i] *= 2.0f;
}""", "k", "Pi", language="cuda")
ADD = Kernel("void add(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1.5f; }", "add", "Pi")
UP = "void sc(float *y, int n) { for (int i = 0; i < n; i++) y[i] *= 3.0f; }"
DOWN = "void sc(float *y, int n) { for (int i = n - 1; i >= 0; i--) y[i] *= 3.0f; }"

def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)

SCALE = Tunable("scale", {"up": Kernel(UP, "sc", "Pi"), "down": Kernel(DOWN, "sc", "Pi")}, launch)

def host_part(h):
    z = h.upload(np.arange(16, dtype=np.float32))
    h.launch(ADD, z, 16)
    h.tune(SCALE, z, 16)
    return z

def workload(rt):
    y = rt.buffer(64)
    rt.launch(CU, y, 64, grid=1, block=64)
    host_part(warmcli.runtime("host"))
'''

# A production process serving the host part alone (no GPU here): its values and misses.
SERVE_HOST = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
h = warmcli.runtime("host")
z = h.read(module["host_part"](h))
r = warmcli.report()
print(json.dumps({"z": [float(v) for v in z], "kernels": len(r.kernels), "tunes": len(r.tunes)}))
"""


def _serve(
    warm: Warm, workload: Path, bundle: Path | None, strict: bool
) -> subprocess.CompletedProcess[str]:
    env = dict(warm.env, WARM_BUNDLE="" if bundle is None else str(bundle))
    if strict:
        env["WARM_STRICT"] = "1"
    return subprocess.run(
        [sys.executable, "-c", SERVE_HOST, str(workload)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )


@needs_nvrtc
def test_a_prebuild_warms_the_host_runtime_the_workload_asks_for(
    warm: Warm, tmp_path: Path
) -> None:
    workload, bundle = tmp_path / "mixed.py", tmp_path / "b.warm"
    workload.write_text(MIXED)
    run = warm("run", workload, "--arch", "sm_90", "-b", bundle, "--json")
    assert run.returncode == 0, run.stderr + run.stdout
    out = json.loads(run.stdout)
    assert out["stored"] == {"kernels": 5, "tunes": 1}, out["stored"]  # sm_90 + PTX, 3 host
    # `compilers` names the host runtime's compiler too, beside the arch's (it was left out)
    assert [c["device"] for c in out["compilers"]][-1] == "host", out["compilers"]
    assert out["compilers"][-1]["compiler"] != "none", out["compilers"]
    # A CI re-run with nothing changed stores nothing new.
    again = json.loads(warm("run", workload, "--arch", "sm_90", "-b", bundle, "--json").stdout)
    assert again["stored"] == {"kernels": 0, "tunes": 0}
    served = _serve(warm, workload, bundle, strict=True)
    assert served.returncode == 0, served.stderr
    hot = json.loads(served.stdout)
    assert (hot["kernels"], hot["tunes"]) == (0, 0)
    cold = json.loads(_serve(warm, workload, None, strict=False).stdout)
    assert cold["z"] == hot["z"] == [(i + 1.5) * 3.0 for i in range(16)]


@needs_nvrtc
def test_verify_names_a_host_part_the_bundle_lacks(warm: Warm, tmp_path: Path) -> None:
    cuda_only = tmp_path / "cuda_only.py"
    cuda_only.write_text(MIXED.replace('    host_part(warmcli.runtime("host"))\n', ""))
    workload, bundle = tmp_path / "mixed.py", tmp_path / "b.warm"
    workload.write_text(MIXED)
    assert warm("run", cuda_only, "--arch", "sm_90", "-b", bundle, "-q").returncode == 0
    verify = warm("verify", bundle, "--workload", workload, "--arch", "sm_90", "-q")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "host: 3 kernel(s) queued, not in the bundle" in verify.stdout, verify.stdout
    assert "host: 1 tune(s) reached, not recorded in the bundle" in verify.stdout
    assert warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q").returncode == 0
    verify = warm("verify", bundle, "--workload", workload, "--arch", "sm_90", "-q")
    assert verify.returncode == 0, verify.stdout + verify.stderr


HOST_ONLY = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
ADD = Kernel("void add(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1.0f; }", "add", "Pi")
def workload(rt):
    rt.launch(ADD, rt.upload(np.zeros(4, dtype=np.float32)), 4)
"""


def test_under_trusted_keys_an_unsigned_bundle_fails_each_ci_gate(
    warm: Warm, tmp_path: Path
) -> None:
    """What the README's exit codes say a CI script gets: `warm run` and `warm check`
    refuse the bundle (exit 2), `warm verify` names it a problem (exit 1), with or
    without `--workload`; signed, each passes."""
    workload, bundle, key = tmp_path / "w.py", tmp_path / "b.warm", tmp_path / "ci.key"
    workload.write_text(HOST_ONLY)
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    assert warm("keygen", key).returncode == 0
    trusting = warm.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    for args, code in (
        (("run", workload, "-b", bundle, "-q"), 2),
        (("check", bundle), 2),
        (("verify", bundle), 1),
        (("verify", bundle, "--workload", workload), 1),
    ):
        proc = trusting(*args)
        assert proc.returncode == code, (args, proc.stdout, proc.stderr)
        said = proc.stdout + proc.stderr
        assert "not signed by a trusted key" in said or "unsigned" in said, said
    assert warm("sign", bundle, "--key", key).returncode == 0
    for args in (("check", bundle), ("verify", bundle, "--workload", workload)):
        proc = trusting(*args)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def host_only_once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Path:
    """`b.warm`: `warm run --no-verify` of `HOST_ONLY` once for the module (forked), in a
    folder of its own with the warm home that made it: what each push test copies."""
    from forked_cli import ForkedWarm

    base = tmp_path_factory.mktemp("host-only")
    (base / "w.py").write_text(HOST_ONLY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    assert warm("run", base / "w.py", "-b", base / "b.warm", "-q", "--no-verify").returncode == 0
    return base / "b.warm"


@pytest.mark.parametrize("tail", ["/", "/bundles/", "", "/bundles/?X-Amz-Signature=abc"])
def test_a_push_to_a_folder_url_is_refused_naming_it(
    warm: Warm, tmp_path: Path, tail: str, host_only_once: Path
) -> None:
    """`warm push app.warm https://store/bundles/` (as `aws s3 cp` takes a prefix) stored an
    object named `bundles/`, exit 0, that no reader of `.../bundles/app.warm` finds: a URL
    naming a folder is refused before anything is sent, as a bundle path ending in `/` is.
    (The bundle pushed: `HOST_ONLY`'s, warmed once for the module and copied here.)"""
    import socket

    bundle = tmp_path / "b.warm"
    shutil.copyfile(host_only_once, bundle)
    listener = socket.socket()  # nothing may reach it: the refusal comes first
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.01)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}{tail}"
        proc = warm.with_env(WARM_REMOTE_DEADLINE="5")("push", bundle, url, timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.count("\n") == 1 and "folder" in proc.stderr, proc.stderr
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    s3 = warm("push", bundle, "s3://bucket/bundles/", timeout=60)
    assert s3.returncode == 2 and "folder" in s3.stderr, s3.stderr


def test_a_rerun_with_the_key_signs_what_a_cancelled_first_run_left_unsigned(
    warm: Warm, tmp_path: Path
) -> None:
    """Under trusted keys, a first `warm run --key` cancelled (SIGTERM) after storing and
    before signing left entries and no signature: every re-run was refused (`bundle
    refused: unsigned`, exit 2), the restored cache stuck for good, where a signed bundle
    with unsigned rows is rebuilt and signed. A run with the key now takes it as that: no
    unsigned entry served, each it reaches rebuilt and signed; without a key it is still
    refused."""
    workload, bundle, key = tmp_path / "w.py", tmp_path / "b.warm", tmp_path / "ci.key"
    workload.write_text(HOST_ONLY)
    assert warm("keygen", key).returncode == 0
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0  # as the cancelled run left it
    trusting = warm.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    refused = trusting("run", workload, "-b", bundle, "-q")
    assert refused.returncode == 2 and "unsigned" in refused.stderr, refused.stderr
    rerun = trusting("run", workload, "-b", bundle, "-q", "--key", key)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    verify = trusting("verify", bundle, "--workload", workload)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    covers = re.search(r"valid, trusted, covers (\d+) of (\d+) row", verify.stdout)
    assert covers and covers[1] == covers[2], verify.stdout
    served = subprocess.run(
        [sys.executable, "-c", SERVE_ADD, str(workload)],
        capture_output=True,
        text=True,
        env=dict(trusting.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1"),
        timeout=300,
        cwd=ROOT,
    )
    assert served.returncode == 0 and served.stdout.strip() == "0", served.stderr


SERVE_ADD = """
import runpy, sys
import warmcli
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime("host"))
print(len(warmcli.report().kernels))
"""


def test_a_run_signing_with_a_key_its_trusted_keys_lack_is_refused_before_it_warms(
    warm: Warm, tmp_path: Path
) -> None:
    """`WARM_TRUSTED_KEYS=prod.pub warm run W --key ci.key` (ci.key not among them) warmed,
    stored, signed with ci.key, then refused its own bundle in the verify pass (exit 2),
    leaving a new bundle signed only by a key its trusted keys refuse: every re-run refused
    it too. It is now refused before anything runs, naming the key, and no bundle is made."""
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(HOST_ONLY)
    ci, prod = tmp_path / "ci.key", tmp_path / "prod.key"
    assert warm("keygen", ci).returncode == 0 and warm("keygen", prod).returncode == 0
    trusting = warm.with_env(WARM_TRUSTED_KEYS=f"{prod}.pub")
    proc = trusting("run", workload, "-b", bundle, "-q", "--key", ci)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "WARM_TRUSTED_KEYS" in proc.stderr, proc.stderr
    assert str(ci) in proc.stderr and "Pass" not in proc.stdout, proc.stderr
    assert not bundle.exists()
    assert trusting("run", workload, "-b", bundle, "-q", "--key", prod).returncode == 0


APP_UTIL = """
import numpy as np
RTOL = 1e-4
def within(a, b):
    return bool(np.allclose(a, b, rtol=RTOL))
def near(a, b):
    return within(a, b)
"""
APP_WORK = """
import numpy as np
from warmcli import Kernel, Tunable
from app import util
from app.util import within
DEVICE = "host"
SRC = "void s(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 2.0f + (U - U); }"
def launch(rt, k, y, n, *, stream=None):
    rt.launch(k, y, n, stream=stream)
def close(outs, ins):
    return within(outs[0], outs[0]) and util.near(outs[0], outs[0])
KS = {f"u{u}": Kernel(SRC, "s", "Pi", defines={"U": u}) for u in (0, 1)}
T = Tunable("t", KS, launch, check=close)
def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    rt.tune(T, y, 8)
    return y
"""
SERVE_APP = """
import json
import os
import warmcli
import app.work
h = warmcli.runtime("host")
y = h.read(app.work.workload(h))
print(json.dumps({"y": [float(v) for v in y], "tunes": len(warmcli.report().tunes)}))
"""


def test_a_checked_tune_warmed_from_a_checkout_is_served_where_the_app_is_installed(
    warm: Warm, tmp_path: Path
) -> None:
    """CI warms from its checkout (`warm run -m app.work`, the app's helpers outside any
    site-packages: keyed by their code); production runs the app pip-installed (its helpers
    in site-packages: a library's, keyed by name only). The check's key differed, so every
    checked tune was a `checksum` miss in production (`WARM_STRICT=1` refused it). A helper
    of the check's own top-level package is now keyed by its code wherever it lies."""
    import shutil

    checkout = tmp_path / "ci" / "app"
    checkout.mkdir(parents=True)
    (checkout / "__init__.py").write_text("")
    (checkout / "util.py").write_text(APP_UTIL)
    (checkout / "work.py").write_text(APP_WORK)
    bundle = tmp_path / "b.warm"
    run = warm("run", "-m", "app.work", "-b", bundle, "-q", cwd=checkout.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    site = tmp_path / "prod" / "venv" / "lib" / "python3" / "site-packages"
    shutil.copytree(checkout, site / "app")
    path = os.pathsep.join([str(site), *filter(None, [warm.env.get("PYTHONPATH")])])

    def serve(**extra: str) -> subprocess.CompletedProcess[str]:
        env = dict(warm.env, PYTHONPATH=path, **extra)
        return subprocess.run(
            [sys.executable, "-c", SERVE_APP], capture_output=True, text=True, env=env,
            timeout=300, cwd=tmp_path / "prod",
        )  # fmt: skip

    hot = serve(WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    assert hot.returncode == 0, hot.stderr
    cold = serve(WARM_BUNDLE="")
    assert json.loads(hot.stdout)["tunes"] == 0
    assert json.loads(hot.stdout)["y"] == json.loads(cold.stdout)["y"]


HERE_CHECK = """
import os
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "data", "ref.txt")
SRC = "void s(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 2.0f + U; }"
def launch(rt, k, y, n, *, stream=None):
    rt.launch(k, y, n, stream=stream)
def close(outs, ins, ref=REF):
    return bool(os.path.join(HERE, "data")) and bool(ref)
KS = {f"u{u}": Kernel(SRC, "s", "Pi", defines={"U": u}) for u in (0, 1)}
T = Tunable("t", KS, launch, check=close)
def workload(rt):
    rt.tune(T, rt.upload(np.arange(8, dtype=np.float32)), 8)
"""


def test_a_check_reading_its_own_folder_keys_alike_in_another_checkout(
    warm: Warm, tmp_path: Path
) -> None:
    """A check reading `HERE = os.path.dirname(__file__)` (a global, or a default made from
    it) was keyed by the checkout's absolute path: the same workload warmed at
    `/builds/1/repo` stored its tune again at `/builds/2/repo`, and production at `/app`
    missed it. A path inside the check's own folder is keyed relative to that folder."""
    first, second = tmp_path / "builds1" / "repo", tmp_path / "elsewhere" / "app"
    for folder in (first, second):
        folder.mkdir(parents=True)
        (folder / "w.py").write_text(HERE_CHECK)
    bundle = tmp_path / "b.warm"
    ran = warm.json("run", first / "w.py", "-b", bundle, "-q")
    assert ran["stored"] == {"kernels": 2, "tunes": 1}
    again = warm.json("run", second / "w.py", "-b", bundle, "-q")
    assert again["stored"] == {"kernels": 0, "tunes": 0}, again["stored"]
    (second / "w.py").write_text(HERE_CHECK.replace('"data"', '"other"'))
    moved = warm.json("run", second / "w.py", "-b", bundle, "-q")
    assert moved["stored"] == {"kernels": 0, "tunes": 1}  # another file: another check


TUNED_AT = "y = rt.buffer(64)\n"
CUDA_TUNE = "    rt.tune(CT, y)\n"
CUDA_TUNABLE = """
def lc(rt, k, y, *, stream=None):
    rt.launch(k, y, 64, grid=1, block=64, stream=stream)
SLOW = Kernel(CU.source.replace("2.0f", "2.0f + 0.0f"), "k", "Pi", language="cuda")
CT = Tunable("ct", {"a": CU, "b": SLOW}, lc)
"""


@needs_nvrtc
def test_adding_an_arch_names_the_pending_tunes_as_pending_not_measured(
    warm: Warm, tmp_path: Path
) -> None:
    """A CI pre-build adding `--arch sm_80` to an `sm_90` bundle noted its tunes as
    "measured on 'cuda|compile-only|sm_90|none'", which no GPU ever measured."""
    workload, bundle = tmp_path / "mixed.py", tmp_path / "b.warm"
    workload.write_text(MIXED.replace(TUNED_AT, TUNED_AT + CUDA_TUNE) + CUDA_TUNABLE)
    assert warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q").returncode == 0
    proc = warm("run", workload, "--arch", "sm_90", "--arch", "sm_80", "-b", bundle)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tune(s) pending (recorded without a GPU) for 'cuda|compile-only|sm_90" in proc.stdout
    assert "measured on 'cuda|compile-only" not in proc.stdout


def test_a_merge_signing_with_a_key_its_trusted_keys_lack_is_refused(
    warm: Warm, tmp_path: Path
) -> None:
    """`WARM_TRUSTED_KEYS=prod.pub warm merge s0 s1 -o fleet.warm --key ci.key` wrote a
    fleet bundle signed only by ci.key, exit 0, that the same environment then refused
    (`warm check`, production: `bundle refused: signed only by untrusted ... key(s)`). It is
    refused before anything is written, as `warm run --key` is."""
    workload = tmp_path / "w.py"
    workload.write_text(HOST_ONLY)
    ci, prod = tmp_path / "ci.key", tmp_path / "prod.key"
    assert warm("keygen", ci).returncode == 0 and warm("keygen", prod).returncode == 0
    shard = tmp_path / "s.warm"
    assert warm("run", workload, "-b", shard, "-q", "--key", prod).returncode == 0
    trusting = warm.with_env(WARM_TRUSTED_KEYS=f"{prod}.pub")
    out = tmp_path / "fleet.warm"
    proc = trusting("merge", shard, "-o", out, "--key", ci)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "WARM_TRUSTED_KEYS" in proc.stderr, proc.stderr
    assert not out.exists() and not Path(f"{out}.lock").exists()
    assert trusting("merge", shard, "-o", out, "--key", prod).returncode == 0
    assert trusting("check", out).returncode == 0


ACCENTED = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
SRC = "// café\\nvoid addu(float *y, int n) { for (int i = 0; i < n; i++) y[i] += sizeof(L); }"
ADD = Kernel(SRC, "addu", "Pi", defines={"L": '"é"'})
def workload(rt):
    y = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(ADD, y, 4)
    return y
"""


def test_a_kernel_with_non_ascii_text_builds_alike_under_any_locale(
    warm: Warm, tmp_path: Path
) -> None:
    """A CI job in a plain POSIX locale (no UTF-8 mode: `LC_ALL=C PYTHONUTF8=0
    PYTHONCOERCECLOCALE=0`) failed a kernel whose text held a non-ASCII character
    (`UnicodeEncodeError: 'ascii' codec ...`, exit 2): its translation unit was written in
    the locale's encoding, which also made another locale's build of the same key another
    binary. It is written as UTF-8, as the key reads it, whatever the locale."""
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(ACCENTED, encoding="utf-8")
    plain = Warm(dict(warm.env, LC_ALL="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0"))
    ran = plain("run", workload, "-b", bundle, "-q")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    again = warm.json("run", workload, "-b", bundle, "-q")  # a UTF-8 locale: the same key
    assert again["stored"] == {"kernels": 0, "tunes": 0}
    code = "import runpy, sys, warmcli\nrt = warmcli.runtime('host')\n"
    code += "print(float(rt.read(runpy.run_path(sys.argv[1])['workload'](rt))[0]))"
    cold = subprocess.run(
        [sys.executable, "-c", code, str(workload)], capture_output=True, text=True,
        env=dict(plain.env, WARM_BUNDLE=""), timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert cold.returncode == 0, cold.stderr
    assert float(cold.stdout) == 3.0  # sizeof("é") in UTF-8: two bytes and the NUL
