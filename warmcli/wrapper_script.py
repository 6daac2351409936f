"""A compiler that is a script (a wrapper, which may add flags): the digest that keys it.

`script_digest` reads a file that starts with `#!` (its first `MAX_WRAPPER` bytes; or, asked,
one with none that is no ELF binary, which `execvp` has the shell run: cc's `as`, `ld`) and
digests its text with the values of the environment variables it names (`exec gcc $CFLAGS
"$@"`, a Python one's `os.environ["CFLAGS"]`; but `UNBUILT`), so an edit, or another value
there, keys another kernel; a binary, a folder or no file is "". A C compiler's identity
holds it (`warmcli.backends.toolchain`), and so does nvcc's host compiler where it is a
script (`-ccbin`, `--compiler-bindir`, `NVCC_CCBIN`: `keyed_host_compiler` puts it beside the
path in the key's options; `host_compilers` names them for `warmcli.backends.sharing`, which
reads their words as a `WARM_CC` script's). One that is a binary (or a folder's `gcc`, which
nvcc runs from it) is keyed by its version line after `VERSION_MARK` (since warm 47: its
predefined macros and C++ headers reach the cubin, and a link repointed at another compiler
kept its path): `kernel_parts.HOST_VERSION` reads it, told by `warmcli.backends.serving` (this
layer starts no compiler: `toolchain.probe`, remembered by the binary's stamp, so a hot start
runs none; a process keying one before it is told keys `UNREAD`, a miss). It holds no state
but that text and the names of the variables every script it digested names (`names_read`: a
compile unit's part of the environment a compile reads, `warmcli.backends.compile_environment`),
never writes and never raises for a file it cannot read. A script that reads the environment
other than by a name in its text (`printenv`, `${!NAME}`: `INDIRECT`) makes every variable one.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from warmcli import config
from warmcli.kernel_parts import HOST_VERSION
from warmcli.printable import Pattern

MAX_WRAPPER = 1 << 20  # bytes of a wrapper script its digest covers
SCRIPT_MARK = " <wrapper script sha256:"  # after a host compiler's path in keyed options
VERSION_MARK = " <host compiler "  # after a binary host compiler's path: its version line
# What a binary's version line reads where `HOST_VERSION` is unset (a process that keyed a kernel
# before it imported `warmcli.backends.serving`): a text no other process writes, so that key is
# a miss, never a key by path alone that another such process would match after an upgrade.
UNREAD = f"unread in process {os.urandom(8).hex()}"
# A variable a script names: a shell's `$NAME`, `${NAME}`; Python's `os.environ["NAME"]`,
# `environ.get("NAME")`, `getenv("NAME")`.
NAMED = Pattern(
    rb"\$\{?([A-Za-z_][A-Za-z0-9_]*)"
    rb"|(?:environ\s*\[|environ\.get\s*\(|getenv\s*\()\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']"
)
# A script reading the environment other than by a name in its text: a shell's `printenv`,
# `${!NAME}`, `eval`, a file sourced (`. f`, `source f`); Python's environ read by a value
# (`environ[name]`, `getenv(name)`) or whole (`environ.items()`); Perl's `$ENV{NAME}`, Ruby's
# `ENV["NAME"]`, Node's `process.env`: every variable may be read.
INDIRECT = Pattern(
    rb"printenv|\$\{!|\beval\b|(?:^|[;&|({]|\bthen|\bdo)\s*(?:\.|source)\s+[^\s=]"
    rb"|(?:environ\s*\[|environ\.get\s*\(|getenv\s*\()\s*[^\s\"']"
    rb"|environ\.(?:items|values|copy)\b|\$ENV\{|\bENV(?:\[|\.fetch)|process\.env\b",
    re.MULTILINE,
)
# Variables a wrapper may name that build no other kernel: where the compiler it runs is
# found (the version line it prints, read in each process, says which), the user, the locale.
UNBUILT = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "LANG", "LC_ALL",
     "LC_MESSAGES", "TERM", "HOSTNAME"}
)  # fmt: skip
# The variables the scripts digested in this process name (`names_read`), `UNBUILT` too (a
# script may read its `$HOME`), and those noted (`note_names_read`); past `MAX_NAMES_READ`, or
# once a script reads the environment other than by name (`INDIRECT`), None: every variable is
# taken as read.
_NAMES_READ: list[set[str] | None] = [set()]
MAX_NAMES_READ = 4096
# A script that only runs another nvcc with its own arguments, as toolkits and `/usr/local/bin`
# ship one (`exec /usr/local/cuda/bin/nvcc "$@"`): its lines past `#!`, blank and `#` ones aside;
# the file it runs (on `PATH` where it names no folder) is read so too, `MAX_PASSED` deep.
PASS_THROUGH = Pattern(rb'exec\s+(?:"([^"$`\\]+)"|([^\s"\'$`\\;&|<>()]+))\s+"\$@"')
MAX_PASSED = 8
# Its `#!` line: an interpreter and a word at most, none setting a variable (`env -S X=1 sh`).
PLAIN_SHEBANG = Pattern(rb"#!\s*[^\s=]+(?:\s+[^\s=-][^\s=]*)?\s*")
NVCC_SCRIPT_MARK = "; NVCC_WRAPPER="  # in nvcc's identity: what `serving.nvcc_environment` reads
# nvcc's host compiler: next option or after `=`.
HOST_COMPILER_FLAGS = ("-ccbin", "--compiler-bindir")


def script_digest(where: str, bare: bool = False) -> str:
    """The first 16 hex digits of the digest of the script `where` (its text and the values
    of the variables it names), "" where it is no script (no `#!`; with `bare`, a file with
    none that is no ELF binary is one: `execvp` has the shell run it, as cc runs its `as`)
    or cannot be read."""
    try:
        with open(where, "rb") as script:
            head = script.read(2)
            if head != b"#!" and not bare:
                return ""
            text = script.read(MAX_WRAPPER)
    except OSError:
        return ""
    if head != b"#!":  # (`bare`)
        text = head + text
        if not text or text.startswith(b"\x7fELF"):
            return ""
    digest = hashlib.sha256(text)
    named = {b"".join(n).decode() for n in NAMED.findall(text)}
    note_names_read(named)
    if INDIRECT.search(text.partition(b"\n")[2] if head == b"#!" else text):
        _NAMES_READ[0] = None  # (its shebang's `/usr/bin/env` aside)
    values = config.named_variables(sorted(named - UNBUILT))  # one unset adds nothing
    for name, value in values.items():
        digest.update(f"\0{name}={value}".encode(errors="surrogateescape"))
    return digest.hexdigest()[:16]


def names_read() -> AbstractSet[str] | None:
    """The variables the scripts `script_digest` read in this process name (a `WARM_CC`
    script's, a `-ccbin`'s, cc's `as`'s), and those another file a compiler reads takes from the
    environment (an `nvcc.profile`'s `$(NAME)`: `note_names_read`); None where they were more
    than `MAX_NAMES_READ`."""
    return _NAMES_READ[0]


def note_names_read(names: AbstractSet[str]) -> None:
    """Add `names` to `names_read` (a new set: one read meanwhile stays as it was)."""
    if (read := _NAMES_READ[0]) is not None and not names <= read:
        _NAMES_READ[0] = read | names if len(read | names) <= MAX_NAMES_READ else None


def host_compiler_script(path: str) -> str:
    """`path` (nvcc's `-ccbin`: a file, a folder whose `gcc` nvcc runs, or a name on PATH)
    with `SCRIPT_MARK` and its digest after it where it is a script, `VERSION_MARK` and its
    version line where it is a binary (`HOST_VERSION`; `UNREAD` where it is unset: a miss); as
    it is where it is nothing."""
    if os.sep in path:
        where = path
    else:
        import shutil  # (a name looked up on PATH only: serving imports no shutil, bz2, lzma)

        where = shutil.which(path) or path
    if os.path.isdir(where):  # nvcc runs the `gcc` in it (`nvcc --dryrun -ccbin FOLDER`)
        where = os.path.join(where, "gcc")
    if not os.path.isfile(where):
        return path
    if digest := script_digest(where):
        return f"{path}{SCRIPT_MARK}{digest}>"
    version = HOST_VERSION[0](where) if HOST_VERSION else UNREAD
    return f"{path}{VERSION_MARK}{version}>" if version else path


def host_compilers(options: Sequence[str]) -> list[str]:
    """The host compilers `options` give nvcc (`-ccbin PATH`, `--compiler-bindir=PATH`)."""
    return [
        option if before in HOST_COMPILER_FLAGS else option.partition("=")[2]
        for before, option in zip(("", *options), options, strict=False)
        if before in HOST_COMPILER_FLAGS or option.partition("=")[0] in HOST_COMPILER_FLAGS
    ]


def nvcc_script(path: str, passed: int = 0) -> str:
    """For an nvcc that is a script doing more than run another with its arguments (adding
    `-DX=1`, options from a variable, choosing a toolkit by what a folder holds),
    `NVCC_SCRIPT_MARK` and its digest (`script_digest`: its text, the variables it names): an
    edit there builds another cubin. "" for a binary; for a script that only runs another nvcc
    (`PASS_THROUGH`), what that one is (a binary's "": the binary it runs keys)."""
    if not (digest := script_digest(path)):
        return ""
    try:
        with open(path, "rb") as script:
            lines = script.read(MAX_WRAPPER + 2).splitlines()
    except OSError:
        return ""
    said = [line.strip() for line in lines[1:] if line.strip()[:1] not in (b"", b"#")]
    plain = len(said) == 1 and passed < MAX_PASSED and PLAIN_SHEBANG.fullmatch(lines[0])
    if not (plain and (runs := PASS_THROUGH.fullmatch(said[0]))):
        return NVCC_SCRIPT_MARK + digest
    import shutil  # (only for a script)

    name = os.fsdecode(runs[1] or runs[2])
    found = name if "/" in name else shutil.which(name, path=config.path())
    return nvcc_script(found, passed + 1) if found and os.path.isfile(found) else ""


def names_host_compiler(options: Sequence[str]) -> bool:
    """Whether `options` name nvcc's host compiler (`-ccbin`, `--compiler-bindir`)."""
    return any(o.split("=", 1)[0] in HOST_COMPILER_FLAGS for o in options)


def keyed_host_compiler(options: Sequence[str]) -> tuple[str, ...]:
    """`options` with the host compiler they give nvcc (`-ccbin PATH`, `-ccbin=PATH`,
    `--compiler-bindir PATH`, `--compiler-bindir=PATH`) followed by its script's digest
    where it is a script (`host_compiler_script`): an edit there is another kernel."""
    keyed = list(options)
    for at, (before, option) in enumerate(zip(("", *options), options, strict=False)):
        name, joined, value = option.partition("=")
        if before in HOST_COMPILER_FLAGS:
            keyed[at] = host_compiler_script(option)
        elif name in HOST_COMPILER_FLAGS and joined and value:
            keyed[at] = f"{name}={host_compiler_script(value)}"
    return tuple(keyed)
