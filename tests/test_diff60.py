"""diff60: a differential test of warm's promise, a hit computes what a cold start computes (the
real CLI, the real C compiler, real SQLite, no mocks).

Random host workloads (headers in `-I` folders of their own, `#if`/`__has_include`, macros from
the command line, tunables) were warmed, served, then perturbed as a cold start would see it
(headers edited, deleted, replaced by links, folders swapped, `CPATH`, `C_INCLUDE_PATH`,
`GCC_EXEC_PREFIX`, the locale, a wrapper cc, another working folder): every hit computed what
the cold start did, or missed. A case made by hand beside them did not: `#pragma GCC dependency
"dep.h"` makes the preprocessor find `dep.h` as it finds an `#include "dep.h"` (to compare its
date with the including file's), and a missing one is a fatal error (`cc1: fatal error: dep.h:
No such file or directory`). The key did not read that name: with `dep.h` deleted, a cold start
failed where a process over the bundle was served the build, `7` (so with `_Pragma("GCC
dependency \\"dep.h\\"")`). Such a name is keyed now as an include's is, whether it is found and
the content found (`warmcli.headers`), so the hit misses, and fails as the cold start does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
K = Kernel({source!r}, "k", "P", options=("-I" + os.path.join(HERE, "inc"),))

def workload(rt):
    x = rt.buffer(1, "int32")
    rt.launch(K, x)
    return x
"""

# Where the pragma is: the kernel's source, or a header it includes from its `-I` folder.
SOURCES = {
    "source": '#pragma GCC dependency "dep.h"\nvoid k(int *x) { x[0] = 7; }\n',
    "header": '#include "k.h"\nvoid k(int *x) { x[0] = 7; }\n',
    # the operator's form, in a macro the source expands (gcc runs it as the directive)
    "operator": (
        '#define DEP _Pragma("GCC dependency \\"dep.h\\"")\nDEP\nvoid k(int *x) { x[0] = 7; }\n'
    ),
}

# The workload run as production runs it: what it computes and compiled itself, or its error.
SERVE = """
import importlib.util, json, sys
import warmcli
spec = importlib.util.spec_from_file_location("w", sys.argv[1])
w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
rt = warmcli.runtime("host")
try:
    x = int(rt.read(w.workload(rt))[0])
except Exception as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"x": x, "compiled": len(warmcli.report().kernels)}))
"""


def served(warm: Warm, workload: Path, bundle: Path | None) -> dict[str, object]:
    """The workload in a fresh process, over `bundle` (None: cold, no bundle at all)."""
    over = warm.with_env(WARM_BUNDLE=str(bundle) if bundle is not None else "")
    return dict(over.production(SERVE, workload))


def warmed(warm: Warm, tmp_path: Path, where: str) -> tuple[Path, Path]:
    """The workload whose pragma is in `where`, warmed into a bundle: (its file, the bundle)."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "dep.h").write_text("/* the grammar this kernel was made from */\n")
    (tmp_path / "inc" / "k.h").write_text('#pragma GCC dependency "dep.h"\n')
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.format(source=SOURCES[where]))
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 1 new kernel(s)" in done.stdout, done.stdout
    return workload, bundle


@pytest.mark.parametrize("where", sorted(SOURCES))
def test_the_file_a_dependency_pragma_names_deleted_fails_the_hit_as_the_cold_start(
    warm: Warm, tmp_path: Path, where: str
) -> None:
    """`dep.h` deleted after `warm run`: the cold start's build fails naming it, and so does the
    process over the bundle, a miss now (before: served the stored build, `{"x": 7}`)."""
    workload, bundle = warmed(warm, tmp_path, where)
    (tmp_path / "inc" / "dep.h").unlink()
    cold = served(warm, workload, None)
    assert "dep.h: No such file or directory" in str(cold.get("error")), cold
    hit = served(warm, workload, bundle)
    assert hit == cold, (hit, cold)


@pytest.mark.parametrize("where", sorted(SOURCES))
def test_a_dependency_pragma_s_file_edited_is_a_miss_and_unchanged_a_hit(
    warm: Warm, tmp_path: Path, where: str
) -> None:
    """Unchanged, the kernel is served (nothing compiled); `dep.h` edited, the process builds it
    itself, as it does an edited header's (before: served, keyed by nothing it read)."""
    workload, bundle = warmed(warm, tmp_path, where)
    assert served(warm, workload, bundle) == {"x": 7, "compiled": 0}
    (tmp_path / "inc" / "dep.h").write_text("/* edited */\n")
    assert served(warm, workload, bundle) == {"x": 7, "compiled": 1}
    assert served(warm, workload, None) == {"x": 7, "compiled": 1}


def test_a_dependency_pragma_naming_a_file_by_its_path_is_keyed_without_include_folders(
    warm: Warm, tmp_path: Path
) -> None:
    """`#pragma GCC dependency "/abs/dep.h"` in a kernel naming no include folder: the file
    deleted, the hit fails as the cold start does (before: served, the key reading no header
    at all for a source with no `#include`)."""
    dep = tmp_path / "dep.h"
    dep.write_text("/* made by the grammar */\n")
    source = f'#pragma GCC dependency "{dep}"\nvoid k(int *x) {{ x[0] = 7; }}\n'
    workload = tmp_path / "w.py"
    workload.write_text(
        WORKLOAD.format(source=source).replace('options=("-I" + os.path.join(HERE, "inc"),)', "")
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert served(warm, workload, bundle) == {"x": 7, "compiled": 0}
    dep.unlink()
    cold = served(warm, workload, None)
    assert "dep.h: No such file or directory" in str(cold.get("error")), cold
    assert served(warm, workload, bundle) == cold


def test_a_dependency_pragma_climbing_out_of_cc_s_scratch_folder_is_refused(
    warm: Warm, tmp_path: Path
) -> None:
    """`#pragma GCC dependency "../dep.h"`: cc finds it from its scratch folder, in the temporary
    folder, where no key looks; refused as such an `#include` is (before: built, and stored
    wherever a `dep.h` was there, then served after it was deleted)."""
    workload = tmp_path / "w.py"
    source = '#pragma GCC dependency "../dep.h"\nvoid k(int *x) { x[0] = 7; }\n'
    workload.write_text(
        WORKLOAD.format(source=source).replace('options=("-I" + os.path.join(HERE, "inc"),)', "")
    )
    done = warm("run", workload, "--bundle", tmp_path / "b.warm")
    assert done.returncode != 0, done.stdout
    assert '"../dep.h" names by a relative path' in done.stderr, done.stderr
