"""A long source is keyed once for all its variants (perf55a, issue 16's `serve_per_kernel`).

Every kernel a process serves is keyed: its content hash writes the text after its defines
(its source JSON-quoted) and its key asks whether the source may read a header. Both were
done afresh for each variant of a source over 16 kB (a tail that long was never kept, and the
header test made three passes over the source): ~160 µs a variant of a 29 kB source, now
~20 µs (its text hashed). The keys are byte for byte those warm gave before (values computed
by the code before this change, for a toolchain named here, so on any machine), and a bundle
warmed from such variants is served whole, with no compile, by a fresh process.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from warmcli import kernel as kernel_module
from warmcli import linked
from warmcli.kernel import Kernel, kernel_key

BODY = "void touch(int *p, int n) { if (n < 0) p[0] = V; }\n"
LONG = "".join(f"static int pad{i}(int x) {{ return x * {i} + V; }}\n" for i in range(600)) + BODY
TOOLCHAIN = "cc:test toolchain 1.0"
# (content hash, key for x86_64 by TOOLCHAIN), by the code before this change.
BEFORE = [
    (
        Kernel(BODY, "touch", "Pi", defines={"V": 3}),
        "8db801e6c2dd9b7b61df803ee910313a5a01518bca263877b4ddb2ba0c6e22d6",
        "19570aa24a01471d10ed1507e7d2f19794ee43090f52684383a730e26aee97f3",
    ),
    (
        Kernel(LONG, "touch", "Pi", defines={"V": 7}),
        "4b29092811f652ef86abfbf985c85327736356a3130a945362bec03f53417c51",
        "c713313085f0b84b918e9b575ba05dd48a3cadfffa6f111c7992a551ec56c762",
    ),
    (
        Kernel(LONG, "touch", "Pi", defines={"V": 8, "W": "x"}, options=["-O2"]),
        "1c1cff220e5acf904cef6ab40fdd61a0f57a52a6bf2c79c3a53cfa9c9d05c1db",
        "eebc1ceb62bc2cbcecd9c5316258fe3973528d5c1a38f24c4f328494a730a130",
    ),
    (
        Kernel(LONG, "touch", "Pi", defines={"V": 9}, name="big"),
        "c6d7a949a318887a971db2e9a10400f41b93bd684649e4e6825736dd7339e090",
        "0062bc27c601e838e295418ec8f8f1c9e1e0ad987e5c021371ff944b689e4d4b",
    ),
    (
        Kernel(BODY, "touch", "Pi", defines={"V": 5}, options=["-O3", "-Wl,--as-needed"]),
        "abf1e3325f8cb1b147a5d3ce5585cdc307822fc1f5475e1b325611eca5a6f504",
        "217ca1ce78ce5ff9c6b4b64fb19f7d46cb3d2bb1e787d15019f1be8070cfc334",
    ),
    (
        Kernel(
            BODY, "touch", "Pi", defines={"V": 5}, options=["-O2", "-Xlinker", "-O1", "-ffast-math"]
        ),
        "9f7fb9ff70eb89f0196f64f19772ba8eb94b5f450eda924934869df8e15e9623",
        "1f64d0d7e8339af63131688c86d684a20a543c30e1e2b76fd452b81060dac174",
    ),
]


def _digest(payload: object) -> str:
    """The documented key text (sorted keys, no spaces), hashed: no code of warm's."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def test_keys_are_byte_for_byte_those_before() -> None:
    assert len(LONG) > 16 << 10  # past the length a tail was kept below
    for kernel, content, key in BEFORE * 2:  # the second time from what is kept
        assert kernel.content_hash == content
        assert kernel_key(kernel, "x86_64", TOOLCHAIN) == key
        again = Kernel(kernel.source, kernel.entry, kernel.params, defines=dict(kernel.defines))
        if not kernel.options:  # a fresh kernel of the same parts: the same hash, not kept one
            assert again.content_hash == content == _digest(kernel._content())
        expected = {"arch": "x86_64", "kernel": content, "toolchain": TOOLCHAIN}
        assert key == _digest(expected)


def test_a_long_sources_tail_and_header_test_are_kept_for_its_variants(monkeypatch) -> None:
    monkeypatch.setattr(kernel_module, "_TAILS", {})  # room, whatever keyed before in this worker
    source = LONG + "/* this test's own */\n"
    variants = [Kernel(source, "touch", "Pi", defines={"V": i}) for i in range(3)]
    keys = [kernel_key(k, "x86_64", TOOLCHAIN) for k in variants]
    assert len(set(keys)) == 3
    kept = [t for shape, t in kernel_module._TAILS.items() if shape[-1] == source]
    assert len(kept) == 1 and len(kept[0]) > 16 << 10  # written once, for all three
    before = kernel_module._may_include.cache_info().hits
    assert [kernel_key(k, "x86_64", TOOLCHAIN) for k in variants] == keys
    assert kernel_module._may_include.cache_info().hits >= before + 3  # no pass over it again


def test_a_host_kernels_options_are_read_as_the_linker_reads_them_once() -> None:
    """Each variant of a host kernel with options asks which files they link: the linker's
    words of its options (`-Wl,` pieces, `-Xlinker`'s next) are read once per options, not per
    variant (~1-2 µs of ~8-10 µs a key of two to four options)."""
    options = ("-O2", "-Wl,--as-needed,-O1", "-Xlinker", "-zdefs", "-DPERF55A")
    variants = [Kernel(BODY, "touch", "Pi", defines={"V": i}, options=options) for i in range(4)]
    before = linked.linker_words.cache_info()
    keys = {kernel_key(k, "x86_64", TOOLCHAIN) for k in variants}
    after = linked.linker_words.cache_info()
    assert len(keys) == 4 and after.misses == before.misses + 1 and after.hits >= before.hits + 3
    assert linked.linker_words(options) == ("-O2", "--as-needed", "-O1", "-zdefs", "-DPERF55A")


def test_the_tails_kept_are_bounded_in_all() -> None:
    held = sum(map(len, kernel_module._TAILS.values()))
    assert held <= kernel_module._MAX_TAIL
    huge = "/* " + "x" * (kernel_module._MAX_TAIL + 1) + " */\n" + BODY
    kernel = Kernel(huge, "touch", "Pi", defines={"V": 1})
    assert kernel.content_hash == _digest(kernel._content())
    assert not any(shape[-1] == huge for shape in kernel_module._TAILS)  # over: never kept
    assert sum(map(len, kernel_module._TAILS.values())) <= kernel_module._MAX_TAIL


WORKLOAD = """
from warmcli import Kernel

SOURCE = {source!r}
KERNELS = [Kernel(SOURCE, "touch", "Pi", defines={{"V": i}}) for i in range(6)]


def workload(runtime):
    buffer = runtime.buffer(4, "int32")
    for kernel in KERNELS:
        runtime.launch(kernel, buffer, 1)
    runtime.synchronize()
"""
SERVE = """
import json, runpy, sys
import warmcli
from warmcli.execution.process_mode import default_collector
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime("host"))
stats = default_collector().reader().total().compilation
print(json.dumps({"compiled": stats.compiled, "loaded": stats.loaded}))
"""


def test_variants_of_a_long_source_warmed_are_served_with_no_compile(warm, tmp_path) -> None:
    workload = tmp_path / "long.py"
    workload.write_text(WORKLOAD.format(source=LONG))
    bundle = tmp_path / "long.warm"
    done = warm("run", workload, "--bundle", bundle)
    assert done.returncode == 0, done.stderr + done.stdout
    served = warm.production(SERVE, workload, bundle=Path(bundle))
    assert served == {"compiled": 0, "loaded": 6}
