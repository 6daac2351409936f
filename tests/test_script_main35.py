"""A PyCUDA script's `main(argv)` is passed what its own `__main__` block passes it.

`warm run --pycuda` calls a script's `main()` where it has no `workload(runtime)`; a `main`
whose one parameter is required was passed the runtime, so `main(argv)` written for
`main(sys.argv[1:])` parsed a runtime (`TypeError: 'Runtime' object is not iterable`). It
is now passed `sys.argv[1:]` or `sys.argv`, whichever its block passes (a script run with
no arguments: `[]` or `[path]`), and the runtime otherwise. Real CLI, real NVRTC.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_pycuda_trial34 import HEAD, _prebuilt_entries

from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.warming.script_main import main_argv

if find_nvrtc() is None:  # pragma: no cover - make test installs NVRTC
    pytest.skip("NVRTC not installed", allow_module_level=True)

BODY = """
def main(argv):
    assert isinstance(argv, list), type(argv)
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=64)
    args = p.parse_args(argv[{skip}:])
    x = cuda.mem_alloc(4 * args.n)
    SourceModule(SRC).get_function("fill")(x, np.int32(args.n), block=(args.n, 1, 1))


if __name__ == "__main__":
    {call}
"""


@pytest.mark.parametrize(
    ("call", "skip"),
    [("main(sys.argv[1:])", 0), ("main(sys.argv)", 1), ("sys.exit(main(sys.argv))", 1)],
)
def test_main_taking_argv_is_passed_what_its_block_passes(
    warm: Warm, workload_file, tmp_path: Path, call: str, skip: int
) -> None:
    script = workload_file(HEAD + BODY.format(call=call, skip=skip), "argv_required.py")
    assert _prebuilt_entries(warm, script, tmp_path / "a.warm") == {"fill"}


def test_only_the_blocks_own_argv_is_read(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    for block, argv in [
        ("main(sys.argv[1:])", ["s.py", "--n", "3"][1:]),
        ("main(sys.argv)", ["s.py", "--n", "3"]),
        ("main(rt)", None),
        ("main(sys.argv[2:])", None),
        ("other(sys.argv)", None),
    ]:
        script.write_text(
            f"import sys\ndef main(a): pass\nif __name__ == '__main__':\n    {block}\n"
        )
        found = main_argv(script)
        assert (found(["s.py", "--n", "3"]) if found else None) == argv, block
    script.write_text("def main(a): pass\nmain(sys.argv)\n")  # no block: the runtime
    assert main_argv(script) is None
    script.write_bytes(b"if __name__ == '__main__':\n    main(sys.argv\n")  # unparsable
    assert main_argv(script) is None
