"""Serving one kernel, hot (bench row `serve_per_kernel`): what a faster path must not change.

A kernel's key is byte-identical to the one main's `kernel_key` gave (values computed by
main's code, pinned here), and a bundle that main's CLI warmed (`warm run`, main's tree as
git holds it, exported to a folder) is served by this tree with nothing compiled and every
kernel loaded from it. Real CLI processes, a real bundle, the system C compiler.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm

from bench import generated
from warmcli import Kernel
from warmcli import kernel as kernel_module
from warmcli.kernel import kernel_key

SOURCE = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
# (kernel, arch, toolchain identity) -> the key main's `kernel_key` gave (no headers reached).
PINNED = [
    (
        Kernel(SOURCE, "touch", "Pi", defines={"V": 7}),
        "x86_64",
        "cc:x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0",
        "5b7ee2fadb3ebda76c07df7fb2613b2c6a9e856a62c238e3348f5382f4999de5",
    ),
    (
        Kernel(SOURCE, "touch", "Pi", defines={"V": 1, "W": "2.5"}, options=["-O2", "-DZ=1"]),
        "aarch64",
        "cc:gcc 13",
        "963fe1bbaa84d5eef2f04570f94e9911c17db3a65f63eb168c73347541919cbf",
    ),
    (
        Kernel('extern "C" __global__ ' + SOURCE, "touch", "Pi", language="cuda", defines={"V": 3}),
        "sm_90",
        "nvrtc:13.5",
        "a390347dc95772be736de95563a8b4335abc644cdd08ae3105c451d6e2d3b5cc",
    ),
    (
        Kernel("void e(void) {}", "e", "", name="n\u00e9"),
        "x86_64",
        "cc:\u00e9 1",
        "0a1862bf6b69471580215128670687597681a011f78a94d0ac0b933ffa0ae659",
    ),
]

# A production process: the generated workload served over WARM_BUNDLE, its counts printed.
SERVE = """
import json, runpy, sys
import warmcli
from warmcli.execution import default_collector
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
module["workload"](rt)
stats = default_collector().reader().total().compilation
print(json.dumps({"compiled": stats.compiled, "loaded": stats.loaded}))
"""


@pytest.mark.parametrize("kernel, arch, toolchain, key", PINNED)
def test_keys_are_byte_identical_to_mains(
    kernel: Kernel, arch: str, toolchain: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CPATH", "C_INCLUDE_PATH"):
        monkeypatch.delenv(name, raising=False)
    assert kernel_key(kernel, arch, toolchain) == key


def test_content_hash_is_the_digest_of_its_content_past_the_memo_of_its_tails() -> None:
    """A content hash writes the text after its defines once per shape (`_TAILS`): each is
    still the digest of its content as JSON, the memo bounded, a shape past it written anew."""
    shapes = [
        Kernel(f"{SOURCE} /* {i} */", "touch", "Pi", defines={"V": v, "W": "x"}, options=("-O2",))
        for i in range(kernel_module._MAX_QUOTED + 8)
        for v in (1, 2)
    ]
    for kernel in shapes:
        assert kernel.content_hash == kernel_module._digest(kernel._content())
    assert len(kernel_module._TAILS) <= kernel_module._MAX_QUOTED


def _main_tree(tmp: Path) -> Path:
    """main's `warmcli` as git holds it, exported under `tmp` (skips where git has no main)."""
    try:
        found = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", "main^{commit}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("no git here")
    if found.returncode != 0:
        pytest.skip("this checkout has no main branch")
    tree = tmp / "main-tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", found.stdout.strip(), "warmcli"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=60)
    return tree


def test_a_bundle_mains_cli_warmed_is_served_with_nothing_compiled(
    warm: Warm, tmp_path: Path
) -> None:
    workload = generated.write(tmp_path / "gen.py", 24)
    bundle = tmp_path / "main.warm"
    mains = dict(warm.env, PYTHONPATH=str(_main_tree(tmp_path)))
    made = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", str(workload), "--bundle", str(bundle)],
        capture_output=True,
        text=True,
        env=mains,
        cwd=tmp_path,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    # This tree's production process, in a warm home of its own (nothing remembered there).
    ours = dict(warm.env, WARM_HOME=str(tmp_path / "served-home"), WARM_BUNDLE=str(bundle))
    ours["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    served = subprocess.run(
        [sys.executable, "-c", SERVE, str(workload)],
        capture_output=True,
        text=True,
        env=ours,
        cwd=ROOT,
        timeout=300,
    )
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == {"compiled": 0, "loaded": 24}
