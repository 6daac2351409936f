"""A process that only serves imports only what serving needs (issue 16, the import diet).

A fresh process imports warm, loads a bundle `warm run` made with `use_bundle`, and runs
the host example from it; what only a writer, a compiler, a miss, a URL, signed bundles,
the machine inventory or the CLI needs must not be imported by then (each is imported
on first use)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from fresh_python import printed_json

# Never imported by a process that serves everything from a local, unsigned bundle.
NOT_WHILE_SERVING = (
    "subprocess",  # running a compiler
    "signal",  # stopping a compiler
    "filelock",  # writing a bundle, fetching a URL
    "tempfile",  # writing
    "shutil",  # a wrapper named on PATH, folders removed (it imports bz2, lzma: ~3 ms)
    "concurrent.futures",  # compiling in parallel
    "platformdirs",  # the default home (WARM_HOME is set)
    "logging",  # explaining a miss
    "dataclasses",  # warm's records are `warmcli.records.Record`s: no code generated at import
    "copy",  # (imported by dataclasses)
    "heapq",  # the tunes `warm stats` samples of a large bundle
    "sqlite3",  # the package (its dbapi2): warm reads a bundle with the C module, `_sqlite3`
    "http.client",  # fetching a URL
    "numpy.ctypeslib",  # the host device names its ctypes types itself
    "pathlib",  # a bundle, warm's home and its files are named by strings (`Bundle.path` on use)
    "uuid",  # a big int's stand-in nonce in a key's text is `os.urandom`'s
    "urllib",  # a read-only bundle's URI is percent-encoded by `warmcli.bundle.file` itself
    "cryptography",  # signatures
    "rich",
    "typer",
    "warmcli.bundle.remote",
    "warmcli.bundle.store",  # `Bundle`: a writer's and a command's (a served one is a `BundleCore`)
    "warmcli.bundle.admin",  # maintenance and aggregates
    "warmcli.bundle.signing",
    "warmcli.backends.machine",
    "warmcli.backends.cuda",  # the CUDA backend (a host process serves by `backends.serving`)
    "warmcli.backends.native",  # this CPU's identity: a kernel tuned for it (-march=native)
    "warmcli.backends.signature",  # a compile's signature probes
    "warmcli.bundle.migrate",  # an old bundle's first writer
    "warmcli.bundle.lock",  # a writer's lock
    "warmcli.bundle.reopening",  # a bundle another process kept locked at its open
    "warmcli.bundle.manifest",  # reading or checking the manifest and fingerprints
    "warmcli.bundle.unused",  # what a delete leaves unused
    "warmcli.bundle.oversize",  # naming a listing's oversized entry
    "warmcli.bundle.disk_full",  # the words of a SQLite failure (a full disk, a file not opened)
    "warmcli.runtime.store",  # the runtime's storage seam: named in annotations only
    "warmcli.execution.stream_mode",  # a tune's measurement
    "warmcli.execution.snapshots",  # statistics read (records made): a hot process only counts
    "warmcli.bundle.checking",  # verify's row checks
    "warmcli.runtime.explain",  # explaining a miss
    "warmcli.runtime.buildable",  # `rt.can_build`: asked before a launch, never by a hit
    "warmcli.runtime.shard",  # a sharded warming pass
    "warmcli.backends.batch",
    "warmcli.backends.host.building",  # a host group's translation unit, command and build
    "warmcli.backends.compiler",  # what compiles: records, running a compiler
    "warmcli.backends.processes",  # starting and stopping a compiler (or its --version)
    "warmcli.runtime.tune_guard",
    "warmcli.runtime.tune_check",  # a sharded pass's or a pending tune's check
    "warmcli.runtime.lookup_ptx",  # PTX served and kept: a CUDA device's lookup only
    "warmcli.late_runtime",  # `warm run`'s late runtimes: a workload's import, a pass bound
    "warmcli.production_report",  # what a process missed: a hot one missed nothing
    "warmcli.linked",  # the files a host kernel links: keyed when a key is computed
    "warmcli.handed_on",  # what cc hands its linker, preprocessor, assembler: read to key, compile
    "warmcli.scratch",  # a compile's scratch folder, a program seen from one (found anew)
    "warmcli.wrapper_script",  # a compiler that is a script: read by a probe, nvcc's options
    "warmcli.warming",
    "warmcli.ops",
    "warmcli.cli",
)

NUMPY_ONLY = "import json, sys, numpy.random; print(json.dumps(sorted(sys.modules)))"
SERVE = """
import json, sys
sys.path.insert(0, {examples!r})
import warmcli, matmul_host
warmcli.use_bundle({bundle!r})
rt = warmcli.runtime("host")
matmul_host.workload(rt)
rt.synchronize()
print(json.dumps([sorted(sys.modules), len(warmcli.report().misses)]))
"""


def test_a_serving_process_imports_nothing_only_a_writer_compiler_or_miss_needs(
    warm: Warm, made_here: Path
) -> None:
    bundle_path = made_here  # the host example warmed in warm's home
    code = SERVE.format(examples=str(EXAMPLES), bundle=str(bundle_path))
    modules, misses = printed_json(code, warm.env)  # type: ignore[misc]
    assert misses == 0  # served everything: nothing compiled, nothing tuned
    # what the interpreter's start (its site's .pth files) and numpy import themselves
    # are not warm's: an environment may hold such imports
    own = subprocess.run(
        [sys.executable, "-c", NUMPY_ONLY], env=warm.env, capture_output=True, text=True
    )
    theirs = set(json.loads(own.stdout))
    imported = [
        m
        for m in modules
        if m not in theirs and any(m == n or m.startswith(f"{n}.") for n in NOT_WHILE_SERVING)
    ]
    assert not imported


def test_import_warmcli_alone_imports_no_submodule() -> None:
    code = "import json, sys, warmcli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert [m for m in json.loads(out) if m.startswith("warmcli")] == ["warmcli"]


def test_the_version_is_read_on_first_use() -> None:
    code = (
        "import warmcli; from warmcli import __version__; print(warmcli.__version__ == __version__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["True"]
