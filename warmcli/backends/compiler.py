"""The compiler protocol every backend's compiler implements.

A compiler turns a *group* of `CompileUnit`s (kernels that may share one
translation unit: same language, architecture and options) into one binary in
one compiler process, and says under which symbol each kernel can be found in it
(the batch has its digests computed once, in the compiling thread: `CompiledGroup.digested`).
It raises `CompileFailure` with the compiler's log when the group fails; finding
which kernel broke it is the batch scheduler's job (`warmcli.backends.batch`), not the
compiler's. `run_compiler` runs one compiler process for any backend through
`warmcli.backends.processes` (its own process group, stopped whole on a timeout, an
interrupt or `stop_compilers`, tied to the thread that started it), and refuses to
start one while warm is stopping; where a compiler's log says a file was not found, each
`-I` folder of its kernels that is none here is named beneath it (`no_include_folders`,
NVRTC's log too), and where ld says it cannot find a library, each relative `-L` folder that is
none from the scratch folder it runs in but one from the working folder (`no_library_folders`);
a unit is built in the environment it was queued in (`CompileUnit.queued`).
Its only state is a bounded memo of the type names each C source declares (`type_names`), and
the environment the last unit was queued in; compilers own no cache, never load what they build.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from warmcli import config
from warmcli.backends import processes
from warmcli.backends.toolchain import Toolchain
from warmcli.errors import CompileFailure
from warmcli.kernel import Kernel
from warmcli.once import once
from warmcli.printable import Pattern
from warmcli.records import Record, symbol_prefix

_QUEUED_IN: list[Any] = [{}, ()]  # the last unit's environment: as held (a copy), as kept


def _queued_environment() -> config.Pairs:
    """The environment now, as a unit queued now keeps it: the last unit's (one object for a
    queue's units, `plan_groups` groups by it) where it is the same (compared as held: ~1 us,
    where reading it whole takes ~20), else read from one copy, the pairs unchanged shared."""
    held, (last, kept) = config.held_environment(), _QUEUED_IN
    if held != last:
        copy = dict(held)  # (at once: the copy compared is the one read)
        kept = config.environment(copy, last, kept)
        _QUEUED_IN[:] = [copy, kept]
    return kept


class CompileUnit(Record):
    """One kernel to compile, with its key for the target it is compiled for."""

    key: str
    kernel: Kernel
    arch: str
    folder: str = ""  # the working folder it was queued in, where it reads headers (`queued`)
    environ: tuple[tuple[str, str], ...] = ()  # the environment it was queued in (`queued`)

    @classmethod
    def queued(cls, key: str, kernel: Kernel, arch: str) -> CompileUnit:
        """A unit queued now, with the working folder its key read headers in, which its
        relative include folders (`-I.`, `CPATH=.`) name, and the environment its key read
        (`CPATH`, a wrapper script's `$CFLAGS`...), which its compiler is given, as a cold start
        builds it at its launch, though a batch compiles it later, maybe after the workload
        changed folder (a folder removed: none) or set a variable (`_queued_environment`)."""
        try:
            folder = os.getcwd()
        except OSError:  # (removed under the workload: none)
            folder = ""
        return cls(key, kernel, arch, folder, _queued_environment())

    @property
    def environment(self) -> dict[str, str] | None:
        """The environment it was queued in (None: this process's, a unit made otherwise)."""
        return dict(self.environ) if self.environ else None

    def __repr__(self) -> str:  # (a `CompileFailure`'s too): its environment's values never
        kept = f"{len(self.environ)} variables"  # (a credential may be one)
        return f"CompileUnit(key={self.key!r}, kernel={self.kernel!r}, environ=<{kept}>)"

    @property
    def folder_gone(self) -> bool:
        """Whether the folder it was queued in was removed (or renamed) since, and its kernel
        may read a header there (`-I.`, `CPATH=.`): built now, it would read none its key read
        (a `tempfile.mkdtemp()` the workload cleaned up). A launch queues it again where it is."""
        kernel = self.kernel  # (a `\` or `??/` may splice an include's line, `#inc\`; GCC's
        # `#pragma GCC dependency "h"` reads a file by the include search too)
        may_read = kernel.reads_headers or any(w in kernel.source for w in _MAY_READ)
        return bool(self.folder) and may_read and not os.path.isdir(self.folder)

    @property
    def name(self) -> str:
        """The kernel told apart from any other: its label, options and key (as `warm stats`
        shows them), so two kernels with the same defines read differently."""
        return " ".join([self.kernel.label, *self.kernel.options, f"(key {self.key[:8]})"])

    @property
    def prefix(self) -> str:
        """What a shared translation unit puts before the kernel's entry and helper names."""
        return symbol_prefix(self.key)

    @property
    def symbol(self) -> str:
        """The unique name the kernel's entry gets inside a shared translation unit."""
        return self.prefix + self.kernel.entry


class CompiledGroup(Record):
    """One compiler run's output: a binary holding every unit of the group (and, for CUDA,
    the group's PTX for a virtual architecture when the compiler keeps it)."""

    binary: bytes
    symbols: dict[str, str]
    log: str
    seconds: float
    command: tuple[str, ...] = ()
    ptx: bytes = b""  # PTX of the same group for `ptx_arch` (`compute_90`), when kept
    ptx_arch: str = ""

    @classmethod
    def of(
        cls, units: Sequence[CompileUnit], binary: bytes, log: str, seconds: float, **more: object
    ) -> CompiledGroup:
        """The group `units` were built into (`binary`): each unit's key names its symbol;
        `more`: the command, and a CUDA compiler's PTX kept beside."""
        symbols = {u.key: u.symbol for u in units}
        return cls(binary=binary, symbols=symbols, log=log, seconds=seconds, **more)

    @once
    def sha256(self) -> str:
        """The binary's digest, computed once per group (every kernel's record carries it)."""
        return hashlib.sha256(self.binary).hexdigest()

    @once
    def ptx_sha256(self) -> str:
        """The PTX's digest, computed once per group."""
        return hashlib.sha256(self.ptx).hexdigest()

    def digested(self) -> CompiledGroup:
        """This group with its digests computed now: in the thread that compiled it, beside
        the other groups' compiles, not after the whole batch in the thread that stores it."""
        _ = self.sha256, self.ptx_sha256
        return self


NO_FOLDER = "warm: -I{given} names no folder: {absolute} (a relative -I is the working folder's)"
_NOT_FOUND = ("cannot open source file", "No such file or directory")  # (NVRTC's; cc's, nvcc's)
_MAY_READ = ("include", "\\", "??/", "dependency")  # a source's words that may read a file
NO_LIBRARY_FOLDER = (
    "warm: -L{given} names no folder from cc's scratch folder, where cc runs and takes a relative "
    "-L from; the working folder's is {absolute}: name it by its absolute path (-L{absolute})"
)
_NO_LIBRARY = "cannot find -l"  # ld's (`cannot find -lhelper: No such file or directory`)


def no_include_folders(options: Sequence[str], folder: str = "") -> list[str]:
    """The hint lines for the include folders `options` name (`-I F`, `-IF`,
    `--include-path[=]F`) that are no folder here (a relative one is `folder`'s, the one its
    kernel was keyed in, else this process's working folder's, as the compiler reads it), said
    as the kernel names them where a header was not found."""
    given, words = [], iter(options)
    for option in words:
        if option in ("-I", "--include-path"):
            given.append(next(words, ""))
        elif option.startswith(("-I", "--include-path=")):
            given.append(option.removeprefix("--include-path=").removeprefix("-I"))
    placed = {f: _placed(folder, f) for f in dict.fromkeys(given) if f}
    missing = [(f, at) for f, at in placed.items() if not os.path.isdir(at)]
    return [NO_FOLDER.format(given=f, absolute=at) for f, at in missing]


def no_library_folders(options: Sequence[str], folder: str, scratch: str) -> list[str]:
    """The hint lines for the relative library folders `options` name (`-Llib`, `-L lib`, as
    the linker reads them: `-Wl,-Llib` too) that are no folder from `scratch`, where cc ran,
    but one from `folder` (its kernel's working folder, else this process's): a key keeps
    the folder as written, so warm never moves it (by its absolute path, `warmcli.linked`
    keys what it links)."""
    from warmcli.linked import flag_values, linker_words  # (a failed link: on first use)

    named = dict.fromkeys(flag_values(linker_words(tuple(options)), "-L"))
    relative = [f for f in named if f and not os.path.isabs(f)]
    placed = [(f, _placed(folder, f)) for f in relative if not os.path.isdir(f"{scratch}/{f}")]
    return [NO_LIBRARY_FOLDER.format(given=f, absolute=at) for f, at in placed if os.path.isdir(at)]


def _placed(folder: str, given: str) -> str:
    """`given` taken from `folder` (else the working folder) as an absolute path; said so
    where it is relative to a working folder that was removed (no folder is there)."""
    try:
        return os.path.abspath(os.path.join(folder, given))
    except OSError:  # (os.getcwd's FileNotFoundError)
        return f"{given} in the working folder, which was removed"


def _not_found(log: str, units: Sequence[CompileUnit], cwd: str) -> str:
    """`log` (a failed compiler process's, run in `cwd`), with the `-I` folders of its kernels
    that are none here named beneath it where it says a file was not found, and the relative
    `-L` folders that are none from `cwd` but one from the working folder where ld says it
    cannot find a library."""
    if not any(text in log for text in (*_NOT_FOUND, _NO_LIBRARY)):
        return log
    options = [option for unit in units for option in unit.kernel.options]
    hints = no_include_folders(options, units[0].folder)
    hints += no_library_folders(options, units[0].folder, cwd) if _NO_LIBRARY in log else []
    return "\n".join([log, *hints])


# A compiler process that runs longer than this is stopped (`--compile-timeout`).
DEFAULT_COMPILE_TIMEOUT = 600.0


def run_compiler(
    command: Sequence[str], units: Sequence[CompileUnit], timeout: float | None, cwd: str
) -> tuple[str, float]:
    """Run one compiler process; raise `CompileFailure` with its log on error or timeout.

    The compiler runs in its own process group, and a timeout, an exception in the
    caller (Ctrl-C) or `stop_compilers` kills the whole group: a compiler driver's
    children (cc1, as, ld, or a wrapper's) never outlive it (`warmcli.backends.processes`).
    Its `TMPDIR` is `cwd`, the caller's scratch folder: what a killed compiler left there
    goes when that folder is removed. Its environment is the first unit's, relative entries of
    `CPATH` the folder it was queued in (`CompileUnit.queued`: as and where its key read them).
    """
    if processes.refusing():
        raise CompileFailure(f"{command[0]} not started: warm is stopping", tuple(units))
    started = time.perf_counter()
    try:
        folder, environ = (units[0].folder, units[0].environment) if units else ("", None)
        done = processes.run(command, timeout, cwd, tmp=cwd, folder=folder, environ=environ)
    except OSError as exc:
        raise CompileFailure(f"cannot run {command[0]}: {exc}", tuple(units)) from None
    if done.timed_out:
        raise CompileFailure(
            f"{command[0]} did not finish within {timeout:g} s and was stopped\n"
            f"{done.err}{done.out}",
            tuple(units),
            True,
        )
    log = (done.err + done.out).strip()
    if done.returncode != 0:
        if processes.refusing():
            raise CompileFailure(f"{command[0]} stopped: warm is stopping", tuple(units))
        log = _not_found(log, units, cwd) or f"{command[0]} exited with {done.returncode}"
        raise CompileFailure(log, tuple(units))
    return log, time.perf_counter() - started


@runtime_checkable
class Compiler(Protocol):
    """Builds binaries for one language; one `compile_group` call is one compiler process
    (or, for an in-process compiler such as NVRTC, one program in the calling thread)."""

    language: str

    @property
    def toolchain(self) -> Toolchain: ...

    def compile_group(
        self, units: Sequence[CompileUnit], timeout: float | None = None
    ) -> CompiledGroup: ...


_DEFINE = Pattern(r"^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
# Names a kernel's source declares at file scope: functions (its helpers), static variables.
ATTRIBUTE = r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)"  # a GNU attribute
_FUNCTION = Pattern(  # (a GNU attribute among its specifiers too)
    rf'^(?:extern\s+"C"\s+)?(?:{ATTRIBUTE}\s*|[A-Za-z_]\w*[\s*]+)+([A-Za-z_]\w*)\s*\(',
    re.MULTILINE,
)
_STATIC_VARIABLE = Pattern(
    r"^static\s+[^;(={]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|;)", re.MULTILINE
)
_KEYWORDS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "do", "else"})


def file_scope_names(source: str) -> list[str]:
    """Functions and static variables a source declares at file scope (column 0)."""
    names = _FUNCTION.findall(source) + _STATIC_VARIABLE.findall(source)
    return [n for n in dict.fromkeys(names) if n not in _KEYWORDS and not n.startswith("__")]


# A line splice: a backslash, blanks, a line break (the compiler joins the lines first).
LINE_SPLICE = Pattern(r"\\[ \t\f\v]*(?:\r\n|\n|\r)")
# Comments; with string and character literals; and with directives, text no name is read from.
_COMMENTS = r"//[^\n]*|/\*[\s\S]*?\*/"
COMMENT = Pattern(_COMMENTS)
_LITERALS = _COMMENTS + r"|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'"
_COMMENT_OR_LITERAL = Pattern(_LITERALS)
UNSCANNED = Pattern(_LITERALS + r"|^[ \t]*#[^\n]*", re.MULTILINE)
_PARENTHESES = Pattern(r"\([^()]*\)")
_TAG = Pattern(r"\b(?:struct|union|enum)\s+([A-Za-z_]\w*)")
# `enum {`, `enum tag {`, `enum tag : type {` (not `f(enum tag v) {`: a function's body)
_ENUM_BODY = Pattern(r"\benum\s*(?:[A-Za-z_]\w*\s*)?(?::[^{};()]*)?\{([^{}]*)\}")
_ENUMERATOR = Pattern(r"(?:^|,)\s*([A-Za-z_]\w*)")
_INNERMOST = Pattern(r"\{[^{}]*\}")
_TYPEDEF = Pattern(r"\btypedef\b([^;]*);")
_TYPE_NAME = Pattern(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*")  # `name`, `name[4]`


@functools.lru_cache(maxsize=256)
def type_names(source: str) -> tuple[str, ...] | None:
    """The struct, union and enum tags, enumerators and file-scope typedef names a C source
    declares (its lines spliced; a tag spelt in a directive too): a shared unit renames them
    too, so a kernel after it cannot use them where alone it would not compile. None where
    a typedef's name is not read (a function or function pointer type): such a kernel is
    compiled in a unit of its own, as is one whose code (not its comments or literals) holds
    a character beyond ASCII or a universal character name (not read whole)."""
    source = LINE_SPLICE.sub("", source)  # as the compiler reads it
    code = _COMMENT_OR_LITERAL.sub(" ", source)
    if not code.isascii() or "\\" in code:  # a name beyond ASCII (`éint`, `\u00e9int`)
        return None
    names = _TAG.findall(code)  # (a macro's `struct s` too)
    text = UNSCANNED.sub(" ", source)
    for body in _ENUM_BODY.findall(text):
        while _PARENTHESES.search(body):  # its top level: `A = MAX(2, sizeof(x))` names A
            body = _PARENTHESES.sub(" ", body)
        names += _ENUMERATOR.findall(body)
    flat, dropped = text, None
    while dropped != flat:  # every brace's inside dropped: what is left is file scope
        dropped, flat = flat, _INNERMOST.sub(" ", flat)
    for declarators in _TYPEDEF.findall(flat):
        if "(" in declarators:
            return None
        first, *more = declarators.split(",")
        last = [m.group(1) for m in _TYPE_NAME.finditer(first)][-1:]
        named = [_TYPE_NAME.fullmatch(item.strip().lstrip("*").strip()) for item in more]
        if not last or None in named:
            return None
        names += last + [m.group(1) for m in named if m is not None]
    return tuple(dict.fromkeys(names))


Declared = tuple[list[str], list[str]]  # a body's file-scope names, the macros it defines


def declared(body: str) -> Declared:
    """What `isolated_section` renames and undoes of a body: its file-scope names (see
    `file_scope_names`) and the macros it defines."""
    return file_scope_names(body), _DEFINE.findall(body)


def isolated_section(
    unit: CompileUnit,
    body: str,
    *,
    entry_macro: bool = True,
    names_in: Declared | None = None,
    rename_helpers: bool = True,
) -> str:
    """A kernel's source wrapped so its defines and entry name cannot leak into the next one.

    Its defines are set before and undefined after, as are the macros its own source
    defines (in C each such name is saved first, `#pragma push_macro`, and put back after,
    so a macro the compiler itself was given, by an option or a wrapper, outlives it); its
    entry is renamed to the unit's unique symbol and, with `rename_helpers` (a C unit of
    several kernels), every other name it declares at file scope (helpers,
    static tables) and its tags, enumerators and typedef names (`type_names`) get the unit's
    prefix, so two kernels with a helper of the same name
    share a translation unit (a CUDA kernel's are closed in its namespace instead). `names_in`:
    what `declared(body)` says, read once by a caller wrapping many kernels of one source.
    The banner and `#line` name the kernel by its entry (`#line 1 "saxpy.cu"`), never by
    its `name`: a label the key does not cover reaches no compiled text (`__FILE__`, line
    information), so two kernels of one key build the same bytes.
    """
    helpers, macros = names_in if names_in is not None else declared(body)
    k = unit.kernel
    if rename_helpers:  # a C unit of several: its types too (its source's, read once)
        helpers = [*helpers, *(type_names(k.source) or ())]
    lines = [f"/* ---- warm kernel {k.entry} key {unit.key[:16]} ---- */"]  # (C identifiers)
    names = [name for name, _ in k.defines]
    for name, value in k.defines:  # a value ending in a backslash splices the empty line
        lines += [f"#define {name} {value}", *([""] if value.rstrip().endswith("\\") else [])]
    if entry_macro:
        lines.append(f"#define {k.entry} {unit.symbol}")
        names.append(k.entry)
    prefix, seen = unit.prefix, {*names, k.entry}  # (a set: many names stay linear)
    for helper in helpers if rename_helpers else ():
        if helper not in seen:
            lines.append(f"#define {helper} {prefix}{helper}")
            names.append(helper)
            seen.add(helper)
    suffix = "cu" if k.language == "cuda" else "c"
    lines.append(f'#line 1 "{k.entry}.{suffix}"')
    lines.append(body)
    names = list(dict.fromkeys([*names, *macros]))
    if k.language != "c":
        return "\n".join([*lines, *(f"#undef {name}" for name in names)]) + "\n"
    # C: each name saved before and put back after, so a macro the compiler was given
    # (a wrapper's `-DSCALE=2`) that the kernel redefines or undoes is its neighbours' still.
    saved = [f'#pragma push_macro("{name}")' for name in names]
    put_back = [f'#undef {name}\n#pragma pop_macro("{name}")' for name in names]
    return "\n".join([lines[0], *saved, *lines[1:], *put_back]) + "\n"
