"""Review 56h: a process's held folder (`warmcli.scratch.HeldFolder`) is never removed while its
process may still write into it, and a host kernel whose assembly reads a file (`.incbin`) is
never served however its source or header spells the directive (an escape the compiler turns
into a quote, a dot or a letter; a macro argument stringized or pasted; a trigraph's splice),
while a kernel merely naming it (a member, a string) still is. Each test failed before its fix.
Real processes, a real C compiler, a real `dlopen`, the real CLI (its commands, and the
production processes serving what they stored, forks of a process that imported warm once,
`tests/forked_cli.py`; the held folder's processes are started)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_leftovers56 import private_libraries_env  # noqa: F401  (the fixture `env`)
from test_trial56 import READ, SERVE, _tree

ROOT = Path(__file__).resolve().parents[1]

# Ages every folder in the temporary folder (a dead process's, by its date) and runs another
# process's `remove_orphans`, as the next process making a held folder does.
ORPHANS_REMOVED = """
import os, subprocess, sys, time
def orphans_removed():
    tmp, past = os.environ["TMPDIR"], time.time() - 86400
    for name in os.listdir(tmp):
        os.utime(os.path.join(tmp, name), (past, past))
    other = "from warmcli.scratch import remove_orphans; remove_orphans('warm-host-')"
    subprocess.run([sys.executable, "-c", other], check=True)
"""

# Two libraries built by the real cc (`first` answers 1, `second` 2), and a cache to load them.
LIBRARIES = """
import os, subprocess
from warmcli.backends.host.libraries import LibraryCache
def binary(n):
    source, out = f"k{n}.c", f"k{n}.so"
    open(source, "w").write(f"int answer(void) {{ return {n}; }}\\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", out, source], check=True)
    return open(out, "rb").read()
first, second = binary(1), binary(2)
cache = LibraryCache()
"""

# A daemon: a library loaded from its private folder, then every descriptor closed (the
# folder's lock with them), then, once another process removed what it took for an orphan,
# another library loaded.
DAEMON = (
    ORPHANS_REMOVED
    + LIBRARIES
    + """
print(cache.load(first).answer())
os.closerange(3, 4096)
orphans_removed()
print(cache.load(second).answer())
"""
)

# An exit function registered before warm's finalizers (which run first, at exit: Python's
# order is last registered, first run) loads a library once the private folder is removed.
AT_EXIT = (
    """
import atexit
atexit.register(lambda: print(cache.load(second).answer()))
"""
    + LIBRARIES
    + """
print(cache.load(first).answer())
"""
)

# A held folder made where no descriptor is left (EMFILE: its lock cannot be taken), then one
# freed, and another process's `remove_orphans`: whether the folder is still there.
NO_DESCRIPTOR = (
    ORPHANS_REMOVED
    + """
import fcntl, resource, shutil, tempfile  # (imported before: no descriptor is left after)
from warmcli.scratch import HeldFolder
tempfile.gettempdir()  # (found once, by a file it writes)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
filled = []
try:
    while True:
        filled.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
held = HeldFolder("warm-host-")
for fd in filled:
    os.close(fd)
orphans_removed()
print(os.path.isdir(held.path), held.held())
"""
)


def _run(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
        cwd=cwd,
    )  # fmt: skip


def test_a_daemon_that_closed_every_descriptor_still_loads_its_next_library(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Its `closerange` let the folder's lock go: another process removed the folder as a dead
    # one's, and the daemon's next load raised FileNotFoundError writing into it.
    done = _run(DAEMON, env, tmp_path)
    assert (done.returncode, done.stdout) == (0, "1\n2\n"), done.stderr
    assert os.listdir(env["TMPDIR"]) == []  # its second folder removed at its end


def test_an_exit_function_run_after_the_folder_s_removal_still_loads_a_library(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Before: FileNotFoundError, writing into the folder the finalizer had removed. Now it
    # makes another (left at exit, unlocked: the next process removes it).
    done = _run(AT_EXIT, env, tmp_path)
    assert (done.returncode, done.stdout) == (0, "1\n2\n"), done.stderr


def test_a_folder_whose_lock_could_not_be_taken_is_no_one_else_s_to_remove(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Made where no descriptor was left, its folder was named as held yet held by no lock: the
    # next process removed it under its living maker.
    done = _run(NO_DESCRIPTOR, env, tmp_path)
    assert (done.returncode, done.stdout) == (0, "True True\n"), done.stderr
    assert os.listdir(env["TMPDIR"]) == []  # removed by its maker at its end


# A host kernel's own `.incbin` of `TABLE` (`table.bin`, 7), spelled as the compiler reads it
# and as a scan of the text did not: its quotes escaped by number, its dot so, a macro argument
# stringized.
ASM = '__asm__(".section .rodata\\n.globl tab\\ntab:\\n{}\\n.text\\n");\n'
SPELLED = {
    "hex quotes": ASM.format(r".incbin \x22TABLE\x22"),
    "octal dot": ASM.format(r"\056incbin \"TABLE\""),
    "stringized": "#define S(x) #x\n" + ASM.format(r'" S(.incbin) " \"TABLE\"'),
}


@pytest.mark.parametrize("spelled", list(SPELLED), ids=list(SPELLED))
def test_a_source_spelling_its_incbin_as_the_compiler_reads_it_is_refused(
    warm: Warm, tmp_path: Path, workload_file, spelled: str
) -> None:
    """Before: stored (exit 0), and served 7 after table.bin was made 9."""
    path = _tree(tmp_path, workload_file, SPELLED[spelled] + READ)
    run = warm("run", path, "-b", tmp_path / "b.warm")
    assert run.returncode == 2, run.stderr + run.stdout
    assert "its assembly reads a file (.incbin, .include)" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


# An `incbin.h` whose macro stringizes the directive's name (`STR(.incbin)`).
STRINGIZING_H = r"""
#define INCBIN_STR(x) #x
#define INCBIN(sym, file) __asm__(".section .rodata\n.globl " #sym "\n" #sym ":\n" \
    INCBIN_STR(.incbin) " \"" file "\"\n.text\n")
"""


def test_a_header_stringizing_its_incbin_is_never_served_its_old_build(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: the bundle served 7 after table.bin was made 9, where a cold start computed 9."""
    path = _tree(tmp_path, workload_file, '#include "incbin.h"\nINCBIN(tab, "TABLE");\n' + READ)
    (tmp_path / "inc" / "incbin.h").write_text(STRINGIZING_H)
    bundle = tmp_path / "b.warm"
    run = warm("run", path, "-b", bundle)
    assert run.returncode == 0, run.stderr + run.stdout
    (tmp_path / "table.bin").write_bytes((9).to_bytes(4, "little"))
    assert warm.production(SERVE, path) == [9]  # a cold start
    assert warm.production(SERVE, path, bundle=bundle) == [9]  # was [7]


def test_the_directive_is_found_as_the_compiler_reads_it_and_a_mention_is_not() -> None:
    from warmcli.directives import reads_assembler_file as reads

    # Before: each False. A trigraph's splice (`-std=c11`), a pasted name, an escaped letter.
    assert reads(b'__asm__(".inc??/\nbin \\"t.bin\\"");')
    assert reads(b'#define C(a, b) a##b\n__asm__(X(C(.inc, bin)) " \\"t.bin\\"");')
    assert reads(b'__asm__(".inc\\x62in \\"t.bin\\"");')
    assert reads(b'ASM("\\x2eincbin \\"t.bin\\"");')  # (its `__asm__` a header's macro)
    # A member, a designated initializer, a string naming it (escaped), a `\0`, a `??/` in a
    # string: no reader (guards: False before too).
    member = b"struct s { int include, inc; }; int f(struct s x) { return x.include + (x).inc; }"
    assert not reads(member + b'\nvoid g(void) { asm("nop"); }')
    assert not reads(b'struct s v = {.include = 1}; void g(void) { asm("nop"); }')
    assert not reads(b'const char *m = "use \\x2eincbin here"; void g(void) { asm("nop"); }')
    assert not reads(b'const char *s = "a\\0", *t = "what??/"; void g(void) { asm("nop"); }')
