"""A new user's trial (stop 51), from the README alone: a numerical library author shipping a
pre-warmed package (`mylib/`: kernels made from format-string templates for float32, float64
and int32 with defines, a `Tunable` blocked integer sum of four candidates checked bit for
bit, `check_tolerance=(0, 0)`, and a float one checked within a tolerance; `ops.py` calling
them on numpy arrays of odd sizes, 0, 1, primes, a million, non-contiguous and misaligned),
warmed with `warm run -m mylib._warmup --allow-discarded-reads` as "Shipping a bundle in a
library" says, in a fresh `HOME` and `WARM_HOME`; then `stats`, `check`, `verify -m`,
`diff`, `clean --tune`, `--entry`, a read-only installed bundle, `WARM_EXPLAIN`,
`WARM_STRICT`. Real cc, real SQLite bundles, the real CLI (forked). Cold, miss and hit gave
the same results bit for bit (the float sum's picks may round apart, as the README says),
and numpy's; wrong launch arguments (a Python int past a C int, a float for an int, a numpy
array for a pointer, a wrong count) were one clear `LaunchError`. What it found:
- a warm-up over many sizes under `--allow-discarded-reads -q` printed one note per buffer
  shape and dtype read back, per pass: 44 lines of the same sentence for the library's 7
  sizes (`note: read of Buffer(host, shape=(13,), dtype=float64) under CompileOnly: ...`),
  burying the run's other notes. A buffer's read is noted by its device now, one line a pass
  with its count; the error (reads not allowed) still names the buffer.
- a warm-up on a machine with no C compiler (a CI image without cc, `WARM_CC` not found),
  whose workload asks `rt.can_build` and takes its numpy fallback as the README's "Kernels a
  workload can do without" says, stored nothing, exit 0, "the bundle is complete", with one
  note only: `the workload did nothing: its if __name__ == "__main__": block does not run
  under warm` (the module had one), a wrong cause; the library would ship an empty bundle
  unawares. Each `can_build` answered False is noted now, naming the kernel and why (the
  compiler not found), and the `__main__` hint is not given for it.
- a numpy array handed to `rt.tune` where a kernel takes a buffer (the host runtime's
  launches take only its own buffers) was told `... cannot read ...: pass key=`, which
  leads to a `TuneFailure` of every candidate; it is told to upload it now, or pass `key=`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

KERNELS = '''
from warmcli import Kernel, Tunable

SCALE_T = """
void scale_{name}({ctype} *x, long n, {ctype} a) {{ for (long i = 0; i < n; i++) x[i] *= a; }}"""
TYPES = {"float32": ("float", "f"), "float64": ("double", "d"), "int32": ("int", "i")}
SCALE = {n: Kernel(SCALE_T.format(name=n, ctype=c), f"scale_{n}", "Pl" + l)
         for n, (c, l) in TYPES.items()}
ISUM = """
void isum(const int *x, long long *out, long n) {
    long long acc[BLOCK] = {0};
    long i = 0;
    for (; i + BLOCK <= n; i += BLOCK) for (int j = 0; j < BLOCK; j++) acc[j] += x[i + j];
    for (; i < n; i++) acc[0] += x[i];
    long long s = 0; for (int j = 0; j < BLOCK; j++) s += acc[j];
    out[0] = s;
}"""

def launch_sum(rt, kernel, x, out, n, *, stream=None):
    rt.launch(kernel, x, out, n, stream=stream)

ISUM_T = Tunable("isum", {f"b{b}": Kernel(ISUM, "isum", "PPl", defines={"BLOCK": b})
                          for b in (1, 2, 4, 8)}, launch_sum, check="b1", check_tolerance=(0, 0))
'''
OPS = """
import numpy as np
import warmcli
from mylib import kernels as K

def total(x):
    rt = warmcli.runtime("host"); x = np.asarray(x)
    b = rt.upload(x); out = rt.buffer(1, "int64")
    rt.tune(K.ISUM_T, b, out, x.size)
    return rt.read(out)[0]

def scale(x, a):
    rt = warmcli.runtime("host"); x = np.asarray(x)
    b = rt.upload(x)
    rt.launch(K.SCALE[x.dtype.name], b, x.size, a)
    return rt.read(b)
"""
WARMUP = """
import numpy as np
from mylib.ops import scale, total

def workload(rt):
    rng = np.random.default_rng(1)
    for n in (0, 1, 7, 13):
        total(rng.integers(-1000, 1000, n, dtype=np.int32))
        for dt in ("float32", "float64", "int32"):
            scale((rng.standard_normal(n) * 10).astype(dt), 3)
"""
# What a production process computes, as hashes of the bytes, checked against numpy there.
CALLS = """
import hashlib, json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from mylib.ops import scale, total
rng = np.random.default_rng(1)
said = []
for n in (0, 1, 7, 13):
    i = rng.integers(-1000, 1000, n, dtype=np.int32)
    assert total(i) == i.astype(np.int64).sum()
    said.append(int(total(i)))
    for dt in ("float32", "float64", "int32"):
        x = (rng.standard_normal(n) * 10).astype(dt)
        y = scale(x, 3)
        assert np.array_equal(y, x * np.asarray(3, dt))
        said.append(hashlib.sha256(y.tobytes()).hexdigest())
odd = np.zeros(4 * 13 + 1, np.uint8)[1:].view(np.float32)  # misaligned, then strided
odd[:] = np.arange(13)
assert np.array_equal(scale(odd[::2], 3), odd[::2] * np.float32(3))
print(json.dumps(said))
"""


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The project: `mylib/` beside nothing else, in a folder of its own."""
    package = tmp_path / "proj" / "mylib"
    package.mkdir(parents=True)
    for name, text in (("__init__", ""), ("kernels", KERNELS), ("ops", OPS), ("_warmup", WARMUP)):
        (package / f"{name}.py").write_text(text)
    return package.parent


def test_a_library_warmed_over_many_sizes_says_each_passs_reads_in_one_line(
    warm: Warm, library: Path
) -> None:
    bundle = library / "mylib" / "mylib.warm"
    done = warm(
        "run", "-m", "mylib._warmup", "-b", bundle, "-q", "--allow-discarded-reads", cwd=library
    )
    assert done.returncode == 0, done.stdout + done.stderr
    reads = [line for line in done.stdout.splitlines() if "note: read of" in line]
    assert [line.split(" under ")[0] for line in reads] == ["  note: read of Buffer(host)"] * 2
    assert all(line.endswith("(16 times)") for line in reads), done.stdout  # 4 sizes x 4 reads
    assert done.stdout.splitlines()[-1].endswith("the bundle is complete"), done.stdout
    cold = warm.production(CALLS, library)  # cold, then a hit strict: the same bits
    assert warm.production(CALLS, library, bundle=bundle) == cold
    plain, warm.env = warm.env, dict(warm.env, WARM_STRICT="1")
    assert warm.production(CALLS, library, bundle=bundle) == cold
    warm.env = plain
    missing = library / "missing.warm"  # and every tune a miss, measured again: the same
    missing.write_bytes(bundle.read_bytes())
    assert warm("clean", "--tune", "isum", missing).returncode == 0
    assert warm.production(CALLS, library, bundle=missing) == cold


def test_a_numpy_array_given_a_tune_is_told_to_upload_it() -> None:
    import warmcli

    kernels: dict[str, object] = {}
    exec(KERNELS, kernels)  # (no compile: the tune's key is refused first)
    rt = warmcli.runtime("host")
    with pytest.raises(TypeError) as raised:
        rt.tune(kernels["ISUM_T"], np.arange(4, dtype=np.int32), rt.buffer(1, "int64"), 4)
    assert str(raised.value) == (
        "tunable isum: input 1 is a ndarray, which the default tune key cannot read (it "
        "reads buffers, numbers, str, None and tuples or lists of them): upload it with "
        "rt.upload for a kernel to read, or pass key="
    )


FALLBACK = """
import numpy as np
from mylib import kernels as K

def workload(rt):
    x = np.arange(5, dtype=np.float64)
    if not rt.can_build(K.SCALE["float64"]):
        return x * 3  # the fallback, numpy's
    b = rt.upload(x)
    rt.launch(K.SCALE["float64"], b, x.size, 3.0)
    return rt.read(b)

if __name__ == "__main__":
    import warmcli
    print(workload(warmcli.runtime("host")))
"""


def test_a_warm_up_that_took_its_fallback_for_want_of_a_compiler_says_so(
    warm: Warm, library: Path
) -> None:
    (library / "mylib" / "fallback.py").write_text(FALLBACK)
    warm.env = dict(warm.env, WARM_CC=str(library / "no-cc"))
    done = warm("run", "-m", "mylib.fallback", "-b", library / "f.warm", "-q", cwd=library)
    assert done.returncode == 0, done.stdout + done.stderr  # as the README says: exit 0
    notes = [line for line in done.stdout.splitlines() if line.startswith("  note: ")]
    assert "__main__" not in done.stdout, done.stdout
    assert notes[0].startswith(
        "  note: rt.can_build(scale_float64) answered False under CompileOnly: cc: compiler '"
    ), done.stdout
    assert "no-cc' not found" in notes[0] and len(notes) == 3, done.stdout  # a note a pass
