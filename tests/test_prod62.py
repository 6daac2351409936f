"""Production-embedding trial 62: a service serving its bundle while `cp NEW PATH` rewrites
the very file it has open, in real subprocesses with the system cc and real SQLite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import Warm

KERNELS = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
BODY = "for (int j = 0; j < n; j++) x[j] = x[j] * {} + {};"
K = [Kernel(f"void k{i}(float *x, int n) {{ {BODY.format(i + 2, i)} }}", f"k{i}", "Pi")
     for i in range(6)]

def one(rt, i):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(K[i], x, 8)
    return x
"""

SERVE = """
import json, os, shutil, sys
import numpy as np
import warmcli
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import one

rt = warmcli.runtime("host")
bundle, new = sys.argv[1], sys.argv[2]
rt.read(one(rt, 0))
shutil.copyfile(new, bundle)  # `cp NEW PATH`: the file this process has open, rewritten
for i in range(6):
    got = rt.read(one(rt, i)).tolist()
    assert got == (np.arange(8, dtype=np.float32) * (i + 2) + i).tolist(), (i, got)
print(json.dumps(sorted(m.name for m in warmcli.report().misses)))
"""


def test_a_bundle_rewritten_in_place_is_served_once_the_copy_is_whole(
    warm: Warm, tmp_path: Path
) -> None:
    # Found by trial 62: after `cp full.warm app.warm` over the bundle a service had open,
    # every kernel it had not read yet was a miss, `corrupt bundle (database disk image is
    # malformed)`, for the rest of the process: both files had the same SQLite change counter
    # and page count, so SQLite went on using the pages it had cached of the old content.
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "half.py").write_text(
        "from kernels import *\ndef workload(rt):\n    return [one(rt, i) for i in range(3)]\n"
    )
    (tmp_path / "full.py").write_text(
        "from kernels import *\ndef workload(rt):\n    return [one(rt, i) for i in range(6)]\n"
    )
    old, new = tmp_path / "app.warm", tmp_path / "new.warm"
    for workload, bundle in (("half.py", old), ("full.py", new)):
        done = warm("run", tmp_path / workload, "--bundle", bundle, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    # the case that went wrong: SQLite's header fields it compares are alike in both files
    assert old.read_bytes()[24:40] == new.read_bytes()[24:40]
    (tmp_path / "serve.py").write_text(SERVE)
    env = {**warm.env, "WARM_BUNDLE": str(old), "WARM_EXPLAIN": "1"}
    served = subprocess.run(
        [sys.executable, str(tmp_path / "serve.py"), str(old), str(new)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert "malformed" not in served.stderr, served.stderr
    # k3..k5, read only after the copy, are served by the new file (k2's row was read with k0's
    # before it: its build, stored in the old file alone, may be a miss, compiled: `binary`)
    assert set(json.loads(served.stdout)) <= {"k2"}, served.stderr
    assert new.read_bytes() == old.read_bytes()  # nothing written into it


def test_a_bundle_named_by_a_url_of_a_scheme_warm_does_not_read_says_so(
    warm: Warm, tmp_path: Path
) -> None:
    # Found by trial 62: WARM_BUNDLE=file:///srv/app.warm, naming a bundle that is there, was
    # `BundleError: file:///srv/app.warm: no such bundle` (and `warm stats` said the same of
    # `file:/srv/app.warm`): read as a relative path, nothing said of the scheme.
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "half.py").write_text(
        "from kernels import *\ndef workload(rt):\n    return [one(rt, i) for i in range(3)]\n"
    )
    bundle = tmp_path / "app.warm"
    done = warm("run", tmp_path / "half.py", "--bundle", bundle, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    url = f"file://{bundle}"
    code = "import warmcli\ntry:\n    warmcli.runtime('host')\n"
    code += "except warmcli.errors.BundleError as exc:\n    print(exc)\n"
    served = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={**warm.env, "WARM_BUNDLE": url}, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert served.returncode == 0 and not served.stderr, served.stderr
    line = served.stdout.strip()
    assert "\n" not in line and line.startswith(f"{url}: no such bundle"), line
    assert "file:// is no URL warm reads" in line, line
    stats = warm("stats", url, cwd=tmp_path)
    assert stats.returncode == 2 and "Traceback" not in stats.stderr, stats.stderr
    assert stats.stderr.count("\n") == 1 and "file:// is no URL warm reads" in stats.stderr
    assert bundle.read_bytes()[:16] == b"SQLite format 3\0"  # nothing done to it
