"""A serving process's bundle is a `BundleCore`: no writer, no admin imported (import59).

Issue 16's import diet: a production process that only serves reads its bundle through
`warmcli.bundle.core.BundleCore`; `Bundle` (`warmcli.bundle.store`: create, transaction,
put, touch) and its maintenance mixin (`warmcli.bundle.admin`) are a writer's and a
command's, imported where a process writes (a write-back into a bundle it makes) or lists.
A first miss still notes what the bundle holds from another toolchain (`foreign`, read on
use), and warm's commands still open a `Bundle` with every name they used."""

from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from fresh_python import printed_json

SERVE = """
import json, sys
sys.path.insert(0, {examples!r})
import warmcli, matmul_host
from warmcli import production
warmcli.use_bundle({bundle!r}, write={write!r})
rt = warmcli.runtime("host")
matmul_host.workload(rt)
rt.synchronize()
loaded = [m in sys.modules for m in ("warmcli.bundle.store", "warmcli.bundle.admin")]
print(json.dumps([type(production.bundle()).__name__, loaded, len(warmcli.report().misses)]))
"""


def _serve(warm: Warm, bundle: Path, write: bool = False) -> list[object]:
    code = SERVE.format(examples=str(EXAMPLES), bundle=str(bundle), write=write)
    return printed_json(code, warm.env)  # type: ignore[return-value]


def test_a_process_that_only_serves_reads_a_bundle_core_and_imports_no_writer_nor_admin(
    warm: Warm, made_here: Path
) -> None:
    assert _serve(warm, made_here) == ["BundleCore", [False, False], 0]


def test_a_write_back_into_a_bundle_it_makes_opens_a_bundle_and_stores_what_it_built(
    warm: Warm, tmp_path: Path
) -> None:
    new = tmp_path / "new.warm"
    kind, loaded, misses = _serve(warm, new, write=True)
    assert kind == "Bundle" and loaded == [True, True] and misses
    from warmcli.bundle import Bundle

    with Bundle.open(new) as written:  # the command's class: admin's names as before
        counts = written.counts()  # every kernel it compiled and tune it measured, stored
        assert counts["kernels"] + counts["tunes"] == misses
        assert written.format_version() >= 3


def test_a_bundle_core_notes_another_toolchains_builds_as_a_bundle_does(
    made_here: Path,
) -> None:
    from warmcli.bundle.core import BundleCore
    from warmcli.bundle.store import Bundle

    with Bundle.open(made_here) as bundle:
        kernel = next(bundle.each_kernel())
        tuned = next(bundle.each_tune()).device
    with BundleCore.open(made_here) as core, Bundle.open(made_here) as full:
        for bundle in (core, full):
            held = bundle.foreign(kernel.backend, kernel.arch, ["another cc"], "host|elsewhere")
            assert [(h.kind, h.by, h.count) for h in held] == [
                ("kernel", kernel.toolchain, 6),
                ("tune", tuned, 3),
            ]
            assert not bundle.foreign(kernel.backend, kernel.arch, [kernel.toolchain], tuned)
