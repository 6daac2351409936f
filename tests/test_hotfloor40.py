"""hotfloor40: what a hot serving process imports that it need not (issue 16, the floor).

`warmcli.backends.native` (reading this CPU's identity) is imported only where a kernel
tuned for this CPU (`-march=native`) is keyed or a build of one is judged: a process serving
plain kernels imports it no more (test_serving_imports names it), while a served native
kernel is still keyed with this CPU, served, and its result the cold one's. The production
processes are started (`Warm(warm.env).production`), never forked: what each finds in
`sys.modules` is the point, and a fork finds its server's imports."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

NATIVE_WORKLOAD = """
import numpy as np
from warmcli import Kernel
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] = y[i] * 2 + 1; }",
           "k", "Pl", options=("-march=native",))
P = Kernel("void p(float *y, long n) { for (long i = 0; i < n; i++) y[i] = y[i] + 3; }",
           "p", "Pl")
def workload(rt):
    y = rt.upload(np.ones(4, np.float32))
    rt.launch(P, y, 4)
    rt.launch(K, y, 4)
    return y
"""

SERVE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import warmcli, w
rt = warmcli.runtime("host")
y = rt.read(w.workload(rt))
before = "warmcli.backends.native" in sys.modules
print(json.dumps({"y": y.tolist(), "native": before, "misses": len(warmcli.report().misses)}))
"""

PLAIN = SERVE.replace("w.workload(rt)", "w.workload_plain(rt)")


def test_a_native_kernel_is_keyed_with_this_cpu_and_served_a_plain_one_imports_no_native(
    warm: Warm, tmp_path: Path
) -> None:
    plain = "\ndef workload_plain(rt):\n    y = rt.upload(np.ones(4, np.float32))\n"
    plain += "    rt.launch(P, y, 4)\n    return y\n"
    (tmp_path / "w.py").write_text(NATIVE_WORKLOAD + plain)
    bundle = tmp_path / "b.warm"
    done = warm("run", tmp_path / "w.py", "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    # cold (no bundle): the result a hot start must give, bit for bit
    cold = Warm(warm.env).production(
        SERVE.replace(
            'rt = warmcli.runtime("host")', 'warmcli.use_bundle(None); rt = warmcli.runtime("host")'
        ),
        tmp_path,
    )
    hot = Warm(warm.env).production(SERVE, tmp_path, bundle=bundle)
    assert hot == {"y": cold["y"], "native": True, "misses": 0}, (hot, cold)
    assert hot["y"] == [9.0] * 4
    served = Warm(warm.env).production(PLAIN, tmp_path, bundle=bundle)
    assert served == {"y": [4.0] * 4, "native": False, "misses": 0}
