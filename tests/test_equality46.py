"""Stop 46's differential test of "a cold start, a miss and a hit give the same results": a fixed
set of `equality_gen` workloads (cold, a strict hit, a bundle missing some entries, an edit that
must force a rebuild), and the mismatches its campaign found, each through real processes over a
real bundle made by `warm run`.

- A host kernel reading `__BASE_FILE__` computed the path of warm's temporary build file
  (`/tmp/warm-cc-x1y2/batch.c`), another in every build: a hit, a miss and a cold start each
  computed another text. It reads `<entry>.c` now, as `__FILE__` does (README: the compiler sees
  the file as `<entry>.c`), and is built in a unit of its own.
- A header a system header includes (`<stddef.h>`, which `<stdlib.h>` includes), added to a
  kernel's `-I` folder after `warm run`, was served the old build: the compiler reads the new one
  (it searches `-I` first for a system header's includes too), the key never looked. The key now
  follows a system header's includes through cc's own folders (`cc -E -v`, remembered) and keys
  those the kernel's folders hold; a kernel whose folders shadow none keys as before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from equality_gen import DRIVE, differences, driven, make_case
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from forked_python import ForkedPythons

# (seed, parts): each part of the generator at least once, in a few workloads.
FIXED = [
    (1, ["shadow", "symlink", "utime", "env", "system"]),
    (2, ["next", "predefined", "dtypes", "scalars"]),
    (3, ["views", "fma", "tune_differ", "predefined"]),
]


@pytest.mark.parametrize(("seed", "parts"), FIXED)
def test_cold_hit_partial_and_edited_compute_the_same_bits(
    warm: Warm, tmp_path: Path, seed: int, parts: list[str]
) -> None:
    case = make_case(seed, tmp_path, parts)
    assert differences(case, warm.env, seed, _forked_drive) == []


def _forked_drive(env: dict[str, str], w: Path) -> dict[str, object]:
    """`equality_gen`'s DRIVE process, forked (`_python`), in `w`'s folder."""
    return driven(_python(env).run(DRIVE, str(w), env=env, cwd=w.parent, timeout=300))


BASE_FILE = """
from warmcli import Kernel
K = Kernel('void base(char *out) { const char *s = __BASE_FILE__; int n = 0;'
           ' while (s[n] && n < 63) { out[n] = s[n]; n++; } }', 'base', 'P')
N = Kernel('void other(int *out) { out[0] = 7; }', 'other', 'P')

def workload(rt):
    b = rt.buffer(64, 'int8'); rt.launch(K, b)
    o = rt.buffer(1, 'int32'); rt.launch(N, o)
    return {'base': b, 'other': o}, []
"""


_python = ForkedPythons(ROOT)  # this module's servers, one an environment apart from WARM_*


@pytest.fixture(scope="module", autouse=True)
def _pythons() -> Iterator[None]:
    """`_served`'s forking servers, ended with the module."""
    yield
    _python.close()


def _served(warm: Warm, w: Path, bundle: str, **env: str) -> dict[str, str]:
    """What the workload `w` computes (each buffer's bytes in hex) in a production process:
    a fork of a process that imported numpy and warmcli once (`tests/forked_python.py`;
    `import warmcli` imports no backend and runs no tool)."""
    environ = dict(warm.env, PYTHONPATH=str(ROOT), WARM_BUNDLE=bundle, **env)
    proc = _python(environ).run(DRIVE, str(w), env=environ, cwd=w.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout)["out"])


def test_a_kernel_reading_base_file_computes_the_same_text_cold_and_served(
    warm: Warm, tmp_path: Path
) -> None:
    w = tmp_path / "w.py"
    w.write_text(BASE_FILE)
    cold = _served(warm, w, "")
    assert cold["base"].startswith("626173652e6300")  # "base.c", then zeros
    assert _served(warm, w, "") == cold  # (it was another temporary folder each time)
    run = warm("run", w, "-b", tmp_path / "b.warm")
    assert run.returncode == 0, run.stderr
    hit = _served(warm, w, str(tmp_path / "b.warm"), WARM_STRICT="1")
    assert hit == cold


def test_base_file_given_through_a_define_or_a_header_reads_the_entry_too(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "where.h").write_text("#define WHERE __BASE_FILE__\n")
    w = tmp_path / "w.py"
    w.write_text(
        "import os\nfrom warmcli import Kernel\nHERE = os.path.dirname(__file__)\n"
        "SRC = 'void {e}(char *out) {{ const char *s = {v}; int n = 0;"
        " while (s[n] && n < 63) {{ out[n] = s[n]; n++; }} }}'\n"
        "D = Kernel(SRC.format(e='viadef', v='WH'), 'viadef', 'P',"
        " defines={'WH': '__BASE_FILE__'})\n"
        "H = Kernel('#include \"where.h\"\\n' + SRC.format(e='viah', v='WHERE'), 'viah', 'P',"
        " options=(f'-I{HERE}/inc',))\n"
        "def workload(rt):\n"
        "    a = rt.buffer(64, 'int8'); rt.launch(D, a)\n"
        "    b = rt.buffer(64, 'int8'); rt.launch(H, b)\n"
        "    return {'d': a, 'h': b}, []\n"
    )
    cold = _served(warm, w, "")
    assert cold["d"].startswith("7669616465662e6300")  # viadef.c
    assert cold["h"].startswith("766961682e6300")  # viah.c
    assert warm("run", w, "-b", tmp_path / "b.warm").returncode == 0
    assert _served(warm, w, str(tmp_path / "b.warm"), WARM_STRICT="1") == cold


def test_the_generator_writes_a_workload_that_imports(tmp_path: Path) -> None:
    case = make_case(7, tmp_path)
    assert (tmp_path / "w.py").is_file() and case.parts
    compile((tmp_path / "w.py").read_text(), "w.py", "exec")
    assert os.listdir(tmp_path)


SHADOWED = """
import os
from warmcli import Kernel
HERE = os.path.dirname(os.path.abspath(__file__))
K = Kernel('#include <stdlib.h>\\nvoid sysk(int *out) {\\n#ifdef SHADOWED\\n out[0] = SHADOWED;\\n'
           '#else\\n out[0] = 1;\\n#endif\\n}\\n', 'sysk', 'P', options=(f"-I{HERE}/inc",))

def workload(rt):
    b = rt.buffer(1, 'int32'); rt.launch(K, b)
    return {'sys': b}, []
"""


def test_a_header_a_system_header_includes_added_to_an_include_folder_is_a_new_kernel(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "inc").mkdir()
    w = tmp_path / "w.py"
    w.write_text(SHADOWED)
    assert warm("run", w, "-b", tmp_path / "b.warm").returncode == 0
    bundle = str(tmp_path / "b.warm")
    assert _served(warm, w, bundle, WARM_STRICT="1") == _served(warm, w, "")
    (tmp_path / "inc" / "stddef.h").write_text("#define SHADOWED 42\n#include_next <stddef.h>\n")
    cold = _served(warm, w, "")
    assert cold["sys"] == "2a000000"  # the compiler read inc/stddef.h
    assert _served(warm, w, bundle) == cold  # was 01000000: the old build served
    environ = dict(warm.env, PYTHONPATH=str(ROOT), WARM_BUNDLE=bundle, WARM_STRICT="1")
    strict = _python(environ).run(DRIVE, str(w), env=environ, cwd=w.parent, timeout=120)
    assert strict.returncode == 1 and "StrictMissError" in strict.stderr
    assert "headers" in strict.stderr and "stddef.h" in strict.stderr, strict.stderr


def test_a_kernel_whose_folders_shadow_no_system_include_keys_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmcli.backends.system_folders import system_folders
    from warmcli.backends.toolchain import probe
    from warmcli.headers import headers_digest

    monkeypatch.chdir(tmp_path)
    folders = system_folders(probe("cc", "cc").path)
    assert any(os.path.isfile(os.path.join(f, "stdlib.h")) for f in folders), folders
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "own.h").write_text("#define OWN 1\n")
    source = '#include <stdlib.h>\n#include "own.h"\nvoid k(int *o) { o[0] = OWN; }\n'
    options = (f"-I{tmp_path}/inc",)
    before = headers_digest(source, options)  # as an earlier warm keyed it
    assert headers_digest(source, options, system=lambda: folders) == before
    (tmp_path / "inc" / "stddef.h").write_text("#define SHADOWED 1\n")
    assert headers_digest(source, options, system=lambda: folders) != before
    assert headers_digest(source, (*options, "-nostdinc"), system=lambda: folders) == (
        headers_digest(source, (*options, "-nostdinc"))
    )


def test_a_kernel_alone_with_an_entry_too_long_for_a_file_name_still_compiles(
    tmp_path: Path,
) -> None:
    """A kernel alone in its unit reads `__BASE_FILE__` as `"<entry>.c"`, for an entry past a
    file name's 255 bytes too (entries may have 4,074 characters): no file is named so."""
    import numpy as np

    from warmcli import Kernel, Runtime
    from warmcli.backends.host import HostDevice

    entry = "e" * 300
    source = f"void {entry}(char *out) {{ const char *s = __BASE_FILE__; out[0] = s[0]; }}"
    out = np.zeros(1, dtype=np.uint8)
    rt = Runtime(HostDevice())
    buf = rt.upload(out)
    rt.launch(Kernel(source, entry, "P"), buf)
    assert bytes(rt.read(buf)) == b"e"
