"""An include spelled as the preprocessor allows, not as a plain scan expects, is keyed.

The preprocessor joins a line ending in a backslash to the next and makes each comment one
space before it reads a directive, and takes `%:` (and the trigraph `??=`) for `#`: `#inc\\
lude "k.h"`, `#/**/include "k.h"`, `%:include "k.h"` all read `k.h`. The scans that key a
kernel's headers read the text as written: a kernel reaching its header so was keyed
without it, and after the header changed a production process was served the stale build
(a different result from a cold start). They read the directives as the preprocessor does
now (`warmcli.directives`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.kernel import Kernel, kernel_key

DIRECTIVES = {
    "splice in the word": '#inc\\\nlude "k.h"',
    "splice after the hash": '#\\\ninclude "k.h"',
    "splice before the name, blanks after the backslash": '#include \\  \n"k.h"',
    "comment after the hash": '#/* why */include "k.h"',
    "comment across lines": '#/* one\ntwo */include "k.h"',
    "comment before the name": '#include/**/"k.h"',
    "digraph": '%:include "k.h"',
    "digraph with a comment": '%:/**/include "k.h"',
    "has_include spliced": '#if __has_inc\\\nlude("k.h")\n#include "k.h"\n#endif',
}
BODY = "\nvoid k(int *p, int n) { if (n > 0) p[0] = V; }\n"


def _key(source: str, options: tuple[str, ...] = ()) -> str:
    return kernel_key(Kernel(source, "k", "Pi", options=options), "host", "cc-test")


@pytest.mark.parametrize("spelling", list(DIRECTIVES))
def test_a_header_reached_however_spelled_is_keyed(tmp_path: Path, spelling: str) -> None:
    header = tmp_path / "k.h"
    header.write_text("#define V 1\n")
    source = DIRECTIVES[spelling] + BODY
    before = _key(source, (f"-I{tmp_path}",))
    header.write_text("#define V 2\n")
    assert _key(source, (f"-I{tmp_path}",)) != before, spelling


@pytest.mark.parametrize("spelling", list(DIRECTIVES))
def test_a_header_by_its_absolute_path_however_spelled_is_keyed(
    tmp_path: Path, spelling: str
) -> None:
    """No include folder named: only a header included by its absolute path is keyed."""
    header = tmp_path / "k.h"
    header.write_text("#define V 1\n")
    source = DIRECTIVES[spelling].replace('"k.h"', f'"{header}"') + BODY
    before = _key(source)
    header.write_text("#define V 2\n")
    assert _key(source) != before, spelling


def test_literals_and_plain_includes_keep_their_keys(tmp_path: Path) -> None:
    """A comment marker inside a string is text, not a comment: the include after it is
    read; and a source whose includes a plain scan finds is keyed as before (the same
    names, in the same order, nothing added)."""
    header = tmp_path / "k.h"
    header.write_text("#define V 1\n")
    tricky = 'static const char *s = "/*";\n#include "k.h"\nstatic const char *t = "*/";' + BODY
    before = _key(tricky, (f"-I{tmp_path}",))
    header.write_text("#define V 2\n")
    assert _key(tricky, (f"-I{tmp_path}",)) != before
    plain = '#include "k.h"\n/* a comment */' + BODY
    commented = plain.replace("/* a comment */", "")
    from warmcli.headers import _includes

    assert _includes(plain.encode()) == _includes(commented.encode()) == (("k.h", True),)


def test_a_stale_build_is_not_served_after_the_header_changes(warm: Warm, tmp_path: Path) -> None:
    """The whole way: warmed with the header saying 1, the header changed to 2, a strict
    production process gets a miss (never the stale build), and a lax one computes 2."""
    folder = tmp_path / "inc"
    folder.mkdir()
    (folder / "k.h").write_text("#define V 1\n")
    workload = tmp_path / "w.py"
    workload.write_text(
        "import numpy as np\n"
        "from warmcli import Kernel\n"
        f"K = Kernel({DIRECTIVES['splice in the word'] + BODY!r}, 'k', 'Pi',"
        f" options=['-I{folder}'])\n"
        "def workload(rt):\n"
        "    p = rt.upload(np.zeros(1, np.int32))\n"
        "    rt.launch(K, p, 1)\n"
        "    return p\n"
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    (folder / "k.h").write_text("#define V 2\n")
    code = (
        "import json, sys, runpy, warmcli\n"
        "rt = warmcli.runtime('host')\n"
        "p = runpy.run_path(sys.argv[1])['workload'](rt)\n"
        "s = warmcli.report()\n"
        "print(json.dumps({'v': int(rt.read(p)[0]), 'compiled': len(s.kernels)}))\n"
    )
    got = warm.production(code, workload, bundle=bundle)
    assert got["v"] == 2, got
    assert got["compiled"] == 1, got
    json.dumps(got)


def test_a_header_no_literal_ends_in_is_scanned_in_one_pass(tmp_path: Path) -> None:
    """A header line of 2 MB of escaped quotes in a literal never closed (`"\\"\\"\\"...`),
    or of comment openers, or of `__has_include(<` never closed: the scans went back over
    the line from each quote or `<` (8,000 of them took 1 s and 9 s, quadratic: a 4 MB
    header, hours). Keyed in a fresh process that must end well within its deadline."""
    import subprocess
    import sys

    for name, data in (
        ("quotes.h", b'"' + b'\\"' * 1_000_000 + b"\n"),
        ("ticks.h", b"'" + b"\\'" * 1_000_000 + b"\n"),
        ("comments.h", b"/*" * 1_000_000),
        ("asks.h", b"__has_include(<" * 300_000),  # (older: 8,000 of them took 9 s)
    ):
        (tmp_path / name).write_bytes(data)
        code = (
            "import sys\nfrom warmcli.kernel import Kernel, kernel_key\n"
            f"k = Kernel('#include \"{name}\"\\n' + {BODY!r}, 'k', 'Pi',"
            " options=['-I' + sys.argv[1]])\n"
            "print(kernel_key(k, 'host', 'cc-test'))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0 and len(done.stdout.strip()) == 64, done.stderr
