"""`warm run -m pkg` where the package defines the workload and its `__main__.py` is a
command-line script (as many packages ship one): the package's own `workload` is taken, as
before `__main__` was looked for (the script, imported, defines none: it said so and
exited 2). The real CLI in a subprocess, the real cc."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_a_packages_workload_is_taken_where_its_main_script_defines_none(
    warm: Warm, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "__init__.py").write_text(
        "import numpy as np\nfrom warmcli import Kernel\n"
        'K = Kernel("void k(int *x) { x[0] += 5; }", "k", "P")\n'
        "def workload(rt):\n    rt.launch(K, rt.upload(np.zeros(1, np.int32)))\n"
    )
    (app / "__main__.py").write_text(
        "import sys\ndef main():\n    print('the app CLI', sys.argv)\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    done = warm("run", "-m", "app", "-b", tmp_path / "b.warm", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "stored 1 new kernel(s)" in done.stdout, done.stdout
