"""The host backend for real: the system C compiler, ctypes launches, numbers against numpy."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from warmcli import (
    Kernel,
    KernelCompileError,
    ProcessMode,
    ProcessModeOverride,
    Runtime,
    StatisticsCollector,
)
from warmcli.backends.batch import RUN, compile_batch, plan_groups
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.host import HostCompiler, HostDevice
from warmcli.bundle.store import Bundle
from warmcli.kernel import kernel_key

SCALE = Kernel(
    "void scale(float *x, float a, int n) { for (int i = 0; i < n; i++) x[i] *= a; }",
    "scale",
    "Pfi",
)


def variant(i: int, body: str = "x[j] += {i};") -> Kernel:
    return Kernel(
        "#define STEP " + str(i) + "\n"
        "static float helper(float v) { return v + STEP; }\n"
        f"void add(float *x, int n) {{ for (int j = 0; j < n; j++) {body.format(i=i)} }}\n",
        "add",
        "Pi",
        defines={"VARIANT": i},
    )


def units(kernels: list[Kernel]) -> list[CompileUnit]:
    device = HostDevice()
    ident = device.compiler("c").toolchain.identity
    return [CompileUnit(kernel_key(k, device.arch, ident), k, device.arch) for k in kernels]


def test_launch_gives_numpy_numbers() -> None:
    rt = Runtime(HostDevice())
    data = np.arange(100, dtype=np.float32)
    buf = rt.upload(data)
    rt.launch(SCALE, buf, 2.5, 100)
    np.testing.assert_allclose(rt.read(buf), data * 2.5)
    rt.close()


def test_example_matmul_matches_numpy() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "matmul_host", Path(__file__).parent.parent / "examples" / "matmul_host.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rt = Runtime(HostDevice())
    rng = np.random.default_rng(1)
    m, n, k = 37, 29, 41
    a, b = (
        rng.standard_normal((m, k), dtype=np.float32),
        rng.standard_normal((k, n), dtype=np.float32),
    )
    for name, kernel in mod.MATMUL.candidates.items():
        c = rt.buffer((m, n))
        rt.launch(kernel, rt.upload(a), rt.upload(b), c, m, n, k)
        np.testing.assert_allclose(rt.read(c), a @ b, rtol=1e-4, atol=1e-4, err_msg=name)
    rt.close()


def test_batch_shares_processes_and_isolates_defines() -> None:
    """Eight kernels with the same entry name, helper name and macro share two cc processes."""
    kernels = [variant(i) for i in range(8)]
    batch = compile_batch(HostCompiler(), units(kernels), jobs=2)
    assert not batch.failures
    assert len(batch.built) == 8
    assert batch.processes == 2
    # Static helpers with one name clash in C: two of them can share a TU only when renamed,
    # so here each group still holds several kernels with distinct entry symbols.
    device = HostDevice()
    for unit in units(kernels):
        group = batch.built[unit.key]
        lib = device.load_module(group.binary)
        fn = device.get_function(lib, group.symbols[unit.key], unit.kernel)
        x = np.zeros(4, dtype=np.float32)
        fn(x.ctypes.data, 4)
        assert x.tolist() == [int(unit.kernel.define("VARIANT"))] * 4
    device.close()


def test_plan_groups_respects_jobs_and_options() -> None:
    plain = units([variant(i) for i in range(6)])
    fast = units(
        [Kernel(SCALE.source, "scale", "Pfi", options=("-O3",), defines={"V": i}) for i in range(2)]
    )
    groups = plan_groups(plain + fast, jobs=2)
    assert sum(len(g) for g in groups) == 8
    for g in groups:
        assert len({u.kernel.options for u in g}) == 1, "one option set per translation unit"
    assert len(groups) == 3


def test_plan_groups_deals_the_queue_in_runs_when_each_job_has_one_group() -> None:
    """One group per job: the queue is dealt in runs of `RUN` kernels, A B B A ...: the
    kernels a workload launches first share an object, a cost growing along the queue
    falls on both groups alike, queue order is kept inside each, sizes differ by one."""
    queued = units([variant(i) for i in range(8 * RUN + 1)])
    groups = plan_groups(queued, jobs=2)
    assert sorted(len(g) for g in groups) == [4 * RUN, 4 * RUN + 1]
    assert groups[0][:RUN] == queued[:RUN], "the first run shares one object"
    runs = [queued[i : i + RUN] for i in range(0, 8 * RUN, RUN)]
    assert groups[0][: 4 * RUN] == [*runs[0], *runs[3], *runs[4], *runs[7]]
    assert groups[1][: 4 * RUN] == [*runs[1], *runs[2], *runs[5], *runs[6]]
    for group in groups:
        assert group == sorted(group, key=queued.index), "queue order inside a group"


def test_plan_groups_cuts_contiguous_groups_when_there_are_more_than_jobs() -> None:
    """More groups than jobs (pulled from a queue): contiguous parts of the queue, so a
    workload's first kernels are served from one object."""
    queued = units([variant(i) for i in range(7)])
    groups = plan_groups(queued, jobs=2, max_group=2)
    assert [len(g) for g in groups] == [2, 2, 2, 1]
    assert [u for g in groups for u in g] == queued


def test_broken_kernel_is_found_and_the_rest_survive() -> None:
    good = [variant(i) for i in range(5)]
    broken = Kernel("void broken(float *x) { x[0] = undefined_name; }", "broken", "P")
    batch = compile_batch(HostCompiler(), units([*good[:3], broken, *good[3:]]), jobs=1)
    assert len(batch.built) == 5
    [failure] = batch.failures.values()
    assert "undefined_name" in failure.log
    assert failure.units[0].kernel is broken


def test_failing_launch_raises_with_the_compiler_log() -> None:
    broken = Kernel("void broken(float *x) { x[0] = nope; }", "broken", "P")
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        with pytest.raises(KernelCompileError, match="nope"):
            rt.launch(broken, rt.buffer(4))
    assert collector.reader().compilation.failed == 1
    rt.close()


def test_compile_only_queues_then_first_load_compiles_the_whole_queue(tmp_path: Path) -> None:
    rt = Runtime(HostDevice(), jobs=2)
    kernels = [variant(i) for i in range(6)]
    buf = rt.buffer(8)
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as first:
        for k in kernels:
            rt.launch(k, buf, 8)
    c = first.reader().compilation
    assert (c.registered, c.queued, c.compiled, c.batches) == (6, 6, 0, 0)
    assert first.reader().execution.queued == 6
    assert rt.read(buf).tolist() == [0.0] * 8, "nothing ran"
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as second:
        rt.launch(kernels[0], buf, 8)
        assert second.reader().compilation.compiled == 6, "the first load compiled all six"
        for k in kernels[1:]:
            rt.launch(k, buf, 8)
    c = second.reader().compilation
    assert (c.compiled, c.batches) == (6, 1)
    assert 1 < c.compiler_processes < 6
    assert second.reader().execution.discarded == 6

    path = tmp_path / "b.warm"
    with Bundle.open(path, write=True) as bundle:
        assert rt.persist(bundle) == (6, 0)
        assert bundle.counts()["blobs"] == c.compiler_processes, "one blob per batch group"
    rt.close()

    with Bundle.open(path) as bundle:
        fresh = Runtime(HostDevice(), bundle)
        with ProcessModeOverride(ProcessMode.EXECUTE, StatisticsCollector()) as third:
            for k in kernels:
                rt_buf = fresh.buffer(2)
                fresh.launch(k, rt_buf, 2)
                assert fresh.read(rt_buf).tolist() == [float(k.define("VARIANT"))] * 2
        c = third.reader().compilation
        assert (c.compiled, c.loaded) == (0, 6)
        fresh.close()


def test_cc_override_changes_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper = tmp_path / "mycc"
    wrapper.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo "mycc 9.9"; exit 0; fi\nexec cc "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("WARM_CC", str(wrapper))
    device = HostDevice()
    assert device.compiler("c").toolchain.version.startswith("mycc 9.9 (wrapper script sha256:")
    other = HostDevice(cc="cc")
    key = kernel_key(SCALE, device.arch, device.compiler("c").toolchain.identity)
    assert key != kernel_key(SCALE, other.arch, other.compiler("c").toolchain.identity)
    rt = Runtime(device)
    buf = rt.upload(np.ones(3, dtype=np.float32))
    rt.launch(SCALE, buf, 3.0, 3)
    assert rt.read(buf).tolist() == [3.0, 3.0, 3.0]
    rt.close()


def test_bad_arguments_are_refused() -> None:
    rt = Runtime(HostDevice())
    with pytest.raises(Exception, match=r"takes 3 argument\(s\)"):
        rt.launch(SCALE, rt.buffer(3), 1.0)
    with pytest.raises(ctypes.ArgumentError.__mro__[1]):
        rt.launch(SCALE, rt.buffer(3), "x", 3)
    rt.close()


def test_a_compiler_log_that_is_not_utf8_is_still_a_compile_error(tmp_path: Path) -> None:
    """A compiler in a Latin-1 locale: its log is read with replacement, and the launch gets
    the KernelCompileError with that log (not a UnicodeDecodeError)."""
    latin = tmp_path / "latin-cc"
    latin.write_bytes(
        b"#!/bin/sh\n"
        b'if [ "$1" = "--version" ]; then echo "latin-cc 1.0"; exit 0; fi\n'
        b"printf 'erreur: identificateur \\351trange\\n' >&2; exit 1\n"
    )
    latin.chmod(0o755)
    rt = Runtime(HostDevice(str(latin)))
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        with pytest.raises(KernelCompileError, match="identificateur \ufffdtrange"):
            rt.launch(SCALE, rt.buffer(4), 2.0, 4)
    rt.close()


def test_compile_only_asks_the_bundle_once_per_kernel(tmp_path: Path) -> None:
    """A CompileOnly launch loop over a kernel the bundle holds reads the bundle once."""
    path = tmp_path / "b.warm"
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        rt.launch(SCALE, rt.buffer(2), 1.0, 2)
    with Bundle.open(path, write=True) as bundle:
        rt.persist(bundle)
    rt.close()
    bundle = Bundle.open(path)
    fresh = Runtime(HostDevice(), bundle)
    buf = fresh.buffer(2)
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
        fresh.launch(SCALE, buf, 1.0, 2)
        bundle.close()  # any further lookup would now fail
        for _ in range(100):
            fresh.launch(SCALE, buf, 1.0, 2)
    r = collector.reader()
    assert (r.compilation.queued, r.execution.queued) == (0, 101)
    fresh.close()


def test_objects_load_fast_but_a_debug_build_keeps_its_symbols(tmp_path: Path) -> None:
    """On Linux the object has no RELRO segment and no static symbol table, unless the
    kernel asks for -g; either way it is launched through its dynamic symbol."""
    if not sys.platform.startswith("linux") or shutil.which("readelf") is None:
        pytest.skip("link flags for fast loading are Linux-only (and readelf shows them)")
    compiler = HostCompiler()
    debug = Kernel(SCALE.source, "scale", "Pfi", options=("-g",))
    for kernel, stripped in ((SCALE, True), (debug, False)):
        (unit,) = units([kernel])
        group = compiler.compile_group([unit])
        lib = tmp_path / f"{kernel.content_hash}.so"
        lib.write_bytes(group.binary)
        readelf = ["readelf", "-lS", str(lib)]
        headers = subprocess.run(readelf, capture_output=True, text=True, check=True).stdout
        assert "GNU_RELRO" not in headers
        assert (".symtab" not in headers) is stripped
        device = HostDevice()
        module = device.load_module(group.binary)
        function = device.get_function(module, group.symbols[unit.key], kernel)
        data = np.ones(4, dtype=np.float32)
        function(data.ctypes.data, 2.0, 4)
        np.testing.assert_allclose(data, 2.0)
        device.close()


def test_each_letters_ctypes_type_is_the_one_numpy_names() -> None:
    """The host device maps letters to ctypes by name (no `numpy.ctypeslib` at import):
    the same types `np.ctypeslib.as_ctypes_type` gives."""
    import numpy as np

    from warmcli.backends.host.device import CTYPES
    from warmcli.kernel import CUDA_ONLY_LETTERS, PARAM_SCALARS

    for letter, scalar in PARAM_SCALARS.items():
        if letter not in CUDA_ONLY_LETTERS:
            assert CTYPES[letter] is np.ctypeslib.as_ctypes_type(scalar), letter
