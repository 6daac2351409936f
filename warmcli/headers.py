"""The headers a kernel includes from the folders its options name, as one digest for its key.

A kernel whose options name include folders (`-I`, `--include-path`, `-isystem`, nvcc's
`--system-include`, `-iquote`, `-idirafter`, gcc's `--include-directory[-after]`, joined or next;
PyCUDA's `include_dirs` become `-I`: `warmcli.include_options` reads them), or whose C compiler's
environment does (`CPATH`, `C_INCLUDE_PATH`; nvcc's `CPLUS_INCLUDE_PATH`), or NVRTC's (a system
toolkit's: `warmcli.compiler_includes` says where each is searched, `nvrtc_folders`), reads headers
that its source text does not hold: `headers_digest` covers them, those a source includes (or asks
for) by their absolute path, and those `-include`/`--pre-include` (gcc's `--include`, `-imacros`)
read before the source (found in the folder it is keyed in first, then as a quoted name is). It
reads the `#include "..."` and `#include <...>` lines (`#import`'s, `__has_include`'s names; the
file a `#pragma GCC dependency` (or `_Pragma`) names, found as a header is, its date compared and
fatal where it is missing: keyed as one, never followed, since warm 60) of the source and of every
header found, however spelled (`%:include`, a comment or line splice inside: `warmcli.directives`;
an `#include CFG` as the names the kernel's `-D` options, defines and `#define` lines give CFG:
`warmcli.computed_includes`), and resolves each name as the compiler does, in those folders (a
quoted name in a header: its own folder first, its `..` where a link leads; then gcc's order,
whatever the options': `-iquote` for quoted names only, `-I`, `-isystem`, `-idirafter`, each folder
once, one named `-I` and as a system one (or the compiler's) in its system place; `#include_next`:
every file of its name along them); a relative folder is taken from the folder the kernel is keyed
in (`keyed_in`). The digest is over each name as written and the sha256 of the file
it resolved to (or that none was found: a header added later changes it), in the order they are
reached; the folders' paths are not (`keyed_options` drops them), so a checkout at another path keys
alike, unless a file reached there may compute with them (an `#include` or `__has_include` of a
macro, `__FILE__`: then they are, with the path each header was found at; for a folder named twice,
which are one). Headers not found there, or in a toolkit's own folders (`toolkit`, by any name), are
the toolchain identity's; but a compiler's system header's own includes those folders hold are keyed
as the kernel's (`warmcli.system_shadows`: a `stddef.h` added to `-I` later changes the next build),
so are those of the `cuda_runtime.h` nvcc reads first (`IMPLIED`). Bounded: at most `MAX_HEADERS`
files (64 times as many names, found or not), each hashed whole, scanned in its first `MAX_SCANNED`
bytes: past a bound, at a computed include whose header cannot be told (but in NVRTC's system
toolkit's own headers), at a file whose assembly reads one (`.incbin`: `reads_assembler_file`) or
that spells `__TIME__`, `__DATE__` or `__TIMESTAMP__` (the build's time: `clock_reason`), or at a
FIFO or a device a name finds (`no_file`: never compiled, `warmcli.backends.batch`), the digest
holds `warmcli.unkeyed`'s marker, its reason noted. State:
three per-process memos (each file's digest and includes, by its path and stat stamp, of settled
files; the includes of the last sources; the search orders of the last options): a kernel keyed
again costs a lookup of each header; `covered`, what each digest made lately covers
(`kernel_parts.header_files`: a header read first by its path), for the first header read, each
`.gch` gcc may read instead (`warmcli.precompiled`), and which copies of a once-only header share a
time (`warmcli.once_copies`). It compiles and writes nothing, never raises for a missing file.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from warmcli.build_clock import clock_reason
from warmcli.computed_includes import Scanned, computed_headers, macro_includes
from warmcli.directives import may_hide, reads_assembler_file, spliced, spliced_text
from warmcli.include_options import (
    _AS_DIRAFTER,
    _AS_I,
    HEADER_MARK,
    include_folders,
    pre_included,
    searched_folders,
    working_folder,
)
from warmcli.include_options import absolute_include_options as absolute_include_options
from warmcli.include_options import keyed_options as keyed_options
from warmcli.once_copies import once_copies
from warmcli.precompiled import precompiled
from warmcli.stamped import Stamp, compiler_opens, no_file, opened, settled, stamp
from warmcli.system_shadows import MAX_SYSTEM, Listed, placed, shadowed
from warmcli.unkeyed import NO_FILE, marker, note, reason_in

MAX_HEADERS, MAX_SCANNED, _MAX_MEMO = 512, 4 << 20, 4096
_ABSOLUTE = re.compile(  # a header by its path: included, or asked for by `__has_include`
    r"(?:^[ \t]*(?:#|%:|\?\?=)[ \t]*(?:include(?:_next)?|import|pragma[ \t]+GCC[ \t]+dependency)"
    r'(?:[ \t]*["<]/|[ \t]+[A-Za-z_])'  # or by a macro
    r'|__has_include(?:_next)?[ \t]*\([ \t]*(?:["<]/|[A-Za-z_]))'
    r'|GCC\s+dependency\s*\\?["<]/',  # (`_PRAGMA_DATED`'s)
    re.MULTILINE,
)
# An `#include` line's name (`#import`'s; `_next` kept), one `__has_include` or `#pragma GCC
# dependency` (`DATED`) names. No `<` in an angled name: an unclosed `__has_include(<` line is
# scanned once, not quadratically.
_INCLUDE = re.compile(
    rb"(?:^[ \t]*(?:#|%:|\?\?=)[ \t]*"
    rb"(?:include(_next)?|import|pragma[ \t]+GCC[ \t]+(dependency))[ \t]*"
    rb"|__has_include(_next)?[ \t]*\([ \t]*)"
    rb'(?:"([^"\n]+)"|<([^<>\n]+)>)',  # (no `<` in a name: a scan stops at the next)
    re.MULTILINE,
)
# Before a name `#include_next` reads (`__has_include_next` asks for); before one `#pragma GCC
# dependency` names (the file gcc compares its date with, fatal where missing): keyed, unfollowed;
# that pragma's words anywhere else too (`_PRAGMA_DATED`: `_Pragma("...")`'s string, its quotes
# escaped, `L"..."`, on the next line; `DO_PRAGMA(GCC dependency "f")` stringized; a macro's, a
# comment's: at worst a miss), the directive's (`pragma` before) left to `_INCLUDE`.
NEXT, DATED = "\0next:", "\0dated:"
_PRAGMA_DATED = re.compile(
    rb'(pragma[ \t]+)?GCC\s+dependency\s*(?:\\?"([^"\\\n]+)\\?"|<([^<>"\n]+)>)'
)
# What makes a build depend on the include folders' paths, not only on the headers there
# (`#include CFG`, `__has_include(NAME)`, `__FILE__`): `_includes` lists it as `BY_FOLDER`.
_PATH_BOUND = re.compile(
    rb"^[ \t]*(?:#|%:|\?\?=)[ \t]*(?:include(?:_next)?|import)[ \t]+[A-Za-z_]"
    rb"|__has_include(?:_next)?[ \t]*\([ \t]*[A-Za-z_]|__FILE__|__builtin_FILE",
    re.MULTILINE,
)
IMPLIED, IMPLIED_MARK = ("cuda_runtime.h",), "\0implied:"  # what nvcc reads first (`-include`)
BY_FOLDER, COMPUTED, UNKEYED = ("\0by folder", False), "\0computed:", "\0unkeyed:"  # CFG; why
OVER = (f"{UNKEYED}a file over {MAX_SCANNED >> 20} MB, scanned in part", False)
ASSEMBLY = (f"{UNKEYED}a header's assembly reads a file (.incbin, .include) no key covers", False)
DEFAULT_TOOLKIT = "/usr/local/cuda"  # where a system CUDA toolkit is when nothing names one
# path -> (its stamp, sha256 of its bytes, its includes: (name, quoted))
_memo: dict[str, tuple[Stamp, str, tuple[tuple[str, bool], ...]]] = {}
covered: dict[str, list[str]] = {}  # the digests made lately -> their entries (`headers_digest`)
Own = tuple[str, ...]  # a compiler's own system folders, in its order (`search_orders`)


def search_orders(
    options: Sequence[object], cwd: str, env: tuple[str, str] = ("", ""), standard: Own = ()
) -> tuple[list[str], list[str]]:
    """The folders the compiler searches for a quoted name (after the including file's) and for
    an angled one, in gcc's order (nvcc's `-Xcompiler -Ia` first: `searched_folders`): `-iquote`
    (quoted only), `-I` and `CPATH`'s (`env[0]`), `-isystem` and `C_INCLUDE_PATH`'s (`env[1]`),
    `-idirafter`, each once, a system one not as `-I`/`-iquote` (`-I x -I y -isystem x`: y, x) nor
    one of the compiler's own (`standard`, unlisted: gcc drops `-I/usr/include` as a duplicate); a
    relative one from `cwd` (an empty variable's entry is `cwd`; an empty one names nothing)."""
    named = [(flag, os.path.join(cwd, folder)) for flag, folder in searched_folders(options)]
    cpath, system = ([os.path.join(cwd, f) for f in text.split(os.pathsep) if text] for text in env)

    def of(*flags: str) -> list[str]:
        return [folder for flag, folder in named if flag in flags]

    def kept(chain: list[str], dropped: set[object]) -> list[str]:
        return [f for f in chain if (i := _identity(f)) not in dropped and not dropped.add(i)]

    system = kept(of("-isystem", "--system-include") + system, set())
    ids = {*map(_identity, system), *map(_identity, standard)}  # gcc's own: after `system`
    system += kept(of(*_AS_DIRAFTER), ids)  # (`ids` holds those kept too)
    angled = kept(of(*_AS_I) + cpath, {*ids}) + system
    return kept(of("-iquote"), ids) + angled, angled


def _identity(folder: str) -> object:
    """What gcc tells a folder by (`merge_include_chains`): device and inode, else its path."""
    try:
        return (found := os.stat(folder)).st_dev, found.st_ino
    except (OSError, ValueError):
        return folder


@functools.lru_cache(maxsize=64)
def _orders(
    options: tuple[object, ...], cwd: str, env: tuple[str, str], standard: Own = ()
) -> tuple[list[str], list[str]]:
    """`search_orders(options, cwd, env, standard)`, once per process per (options, working
    folder, environment, compiler's folders): a kernel's variants share them (identities)."""
    return search_orders(options, cwd, env, standard)


@functools.lru_cache(maxsize=16)
def _as_toolkit(toolkit: frozenset[str], searched: tuple[str, ...]) -> frozenset[str]:
    """`toolkit` and each folder of `searched` that is one of them by another name (`_identity`:
    gcc keeps a folder named twice once, `CPLUS_INCLUDE_PATH` at nvcc's `include` in its system
    place, not as nvcc's `-I`), once per process per pair."""
    ids = {*map(_identity, toolkit)}
    return toolkit | {f for f in searched if _identity(f) in ids}


def toolkit_home(homes: Iterable[str | None], search: str) -> str | None:
    """The system CUDA toolkit NVRTC is given the headers of, found as nvcc and CuPy find
    it: the first of `homes` set (`CUDA_HOME`, `CUDA_PATH`); else the folder above the
    `bin` of the nvcc on the `search` path (its links followed), else /usr/local/cuda,
    where it holds a toolkit's headers; None where none is."""
    home = next((h for h in homes if h), None)
    if home is not None:
        return home
    nvcc = shutil.which("nvcc", path=search)
    found = os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None
    return next((h for h in (found, DEFAULT_TOOLKIT) if h and _is_toolkit(h)), None)


def _is_toolkit(home: str) -> bool:
    """Whether `home` holds a CUDA toolkit's headers (not /usr/local's, above a script nvcc)."""
    return os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h"))


def _includes(data: bytes, over: bool = False) -> tuple[tuple[str, bool], ...]:
    """The includes of `data` as written, then those only its directives as read show
    (`warmcli.directives`), each macro it includes by name (`COMPUTED` and it, whether
    `_next`), `OVER` where it is longer than scanned (`over`), `ASSEMBLY` where its assembly reads
    a file, `BY_FOLDER` last where it may compute with its path (`_PATH_BOUND`)."""
    head = data[:MAX_SCANNED]
    found = _INCLUDE.findall(head)
    bound = _PATH_BOUND.search(head) is not None
    if may_hide(head):
        plain, head = set(found), spliced(head)
        found += [f for f in dict.fromkeys(_INCLUDE.findall(head)) if f not in plain]
        bound = bound or _PATH_BOUND.search(head) is not None
    names = tuple(
        (DATED * bool(d) + NEXT * bool(n or m) + os.fsdecode(quoted or angled), bool(quoted))
        for n, d, m, quoted, angled in found
    )
    if b"dependency" in head:
        pragmas = _PRAGMA_DATED.findall(head)
        names += tuple((DATED + os.fsdecode(q or a), bool(q)) for d, q, a in pragmas if not d)
    names += tuple((COMPUTED + n, nx) for n, nx in macro_includes(data)) if bound else ()
    names += (OVER,) if over or len(data) > MAX_SCANNED else ()
    names += (ASSEMBLY,) if reads_assembler_file(head) else ()  # (`.incbin`, in `__asm__`)
    return (*names, BY_FOLDER) if bound else names


@functools.lru_cache(maxsize=64)
def _by_path(source: str) -> bool:
    """Whether `source` includes (or asks for) a header by its absolute path: once per source."""
    if _ABSOLUTE.search(source):
        return True
    text = spliced_text(source)
    return text is not None and _ABSOLUTE.search(text) is not None


@functools.lru_cache(maxsize=64)
def source_includes(source: str) -> tuple[tuple[str, bool], ...]:
    """A kernel source's includes, read once per source text (its variants share it)."""
    return _includes(source.encode(errors="surrogatepass"))


def _read(path: str) -> tuple[str, tuple[tuple[str, bool], ...]] | None:
    """The file's sha256 and includes (memoised by its stamp once settled: what was opened, a
    regular file only, `warmcli.stamped`), None if unreadable."""
    try:
        known = _memo.get(path)
        if known is not None and known[0] == stamp(os.stat(path)):
            return known[1], known[2]
    except (OSError, ValueError):
        return None
    if (found := opened(path)) is None:
        return None
    try:
        with found[0] as f:
            digest = hashlib.sha256(head := f.read(MAX_SCANNED))
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    st = found[1]
    clock = ((f"{UNKEYED}{why} in a header", False),) if (why := clock_reason(head)) else ()
    entry = (stamp(st), digest.hexdigest(), _includes(head, st.st_size > len(head)) + clock)
    if settled(st):  # else an edit may keep its whole stamp
        if len(_memo) >= _MAX_MEMO:
            _memo.clear()
        _memo[path] = entry
    return entry[1], entry[2]


_Orders = tuple[list[str], list[str]]


def _resolve(
    name: str, quoted: bool, here: str | None, orders: _Orders, toolkit: frozenset[str]
) -> str | None:
    """The file `name` names, as the compiler searches: `here` first for a quoted name; None
    where it is in a folder of `toolkit` (its headers are the toolchain identity's)."""
    if os.path.isabs(name):  # (a FIFO or device too: `no_file`, the compiler opens it)
        return name if compiler_opens(name) else None
    for folder in ([here] if quoted and here else []) + orders[0 if quoted else 1]:
        path = os.path.join(folder, name)
        if compiler_opens(path):  # as spelled: its `..` taken where a link leads, as the compiler
            return None if folder in toolkit else path
    return None


def headers_digest(
    source: str,
    options: Sequence[object],
    env: tuple[str, str] = ("", ""),
    around: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
    toolkit: frozenset[str] = frozenset(),
    defines: Sequence[tuple[str, str]] = (),
    compiler: str = "",
    system: Callable[[], tuple[str, ...]] | None = None,
) -> str:
    """The sha256 of the headers `source` reaches in the include folders `options` name, or `env`'s
    (`search_orders`; the module doc); "" where none is named, or found in `env`'s only. The
    compiler's own options come `around` the kernel's (NVRTC's folders before them, nvcc's
    after: `warmcli.compiler_includes`), and a header found in a folder of `toolkit` is the
    toolchain identity's: not keyed (it shadows those searched after it). An `#include` of a
    macro follows what `options`, `defines` and the text give it (in a header of NVRTC's
    system toolkit, `compiler` "nvrtc", by its folders, as before). `system`: the compiler's
    own folders (`kernel.CC_SYSTEM`), where a header not found in the kernel's is followed for
    the names it includes that the kernel's folders shadow (`warmcli.system_shadows`; NVRTC's,
    searched before the kernel's: those none of them holds), and for nvcc's ("nvcc") what it
    reads first itself (`IMPLIED`: keyed only where they shadow one)."""
    try:
        cwd = working_folder()  # (a unit's, where its key read them: `keyed_in`)
    except OSError:  # the working folder was removed: relative folders name nothing
        cwd = ""
    given = tuple(options)
    # cc searches no folder of its own; nvcc still gives its gcc its toolkit's, where its
    # `cuda_runtime.h` is, whose includes the kernel's folders answer (followed through all)
    system = None if "-nostdinc" in given and compiler != "nvcc" else system
    nvrtc, implied = compiler == "nvrtc", IMPLIED if compiler == "nvcc" and system else ()
    searched = (*around[0], *given, *around[1])
    ask = _orders if all(type(o) is str for o in given) else _orders.__wrapped__  # (a Kernel's)
    orders = ask(searched, cwd, env)  # then less gcc's own folders (nvcc's 1st is its `-I`)
    if system is not None and compiler in ("c", "nvcc") and orders[0] and (ours := system()):
        orders = ask(searched, cwd, env, ours[compiler == "nvcc" :])
    if toolkit:  # by another name too, kept once in its place (`_as_toolkit`)
        toolkit = _as_toolkit(toolkit, tuple(dict.fromkeys([*orders[0], *orders[1]])))
    pre = pre_included(given)
    local = {n for n in pre if not os.path.isabs(n) and os.path.isfile(os.path.join(cwd, n))}
    if not (orders[0] or _by_path(source) or local or any(map(os.path.isabs, pre))):
        return ""
    folders = [os.path.join(cwd, f) for f in include_folders(options)]  # none: `env`'s only
    here: str | None = None  # the source's own quoted names: the folders only
    pending = deque((n, True, cwd if n in local else here) for n in pre)  # read first, quoted
    marked = {name for name in pre if os.path.isabs(name)}  # by their paths: not keyed
    pending.extend((name, quoted, here) for name, quoted in source_includes(source))
    primary = [(n.removeprefix(NEXT), q, h) for n, q, h in [*pending][:1]]  # gcc's `.gch` one
    pending.extendleft((IMPLIED_MARK + name, True, None) for name in implied)  # (first)
    seen, written, at = dict[str, str](), list[str](), list[str]()  # sha256s, lines, paths
    own = (*folders, *map(os.path.dirname, marked)) + ((cwd,) if local else ())  # a file here
    # may compute with its path (`BY_FOLDER`); a folder named twice (gcc drops one): which are one
    same, bound, shown_as = [*map(_identity, folders)], False, {}  # (as `search_orders`)
    computed, done = list[tuple[str, bool, str | None, bool]](), set[object]()  # `#include CFG`
    kernel, scanned = (given, defines, source, seen), Scanned()  # (each file read once)
    shadows = set[tuple[str, bool]]()  # a system header's includes the folders hold
    listed: Listed = {}  # the folders listed for them (each once)
    theirs, chains = toolkit, tuple(dict.fromkeys([*orders[0], *orders[1]]))
    if implied and system is not None:  # nvcc's own, by another name too: `-I$CUDA_HOME/include`
        theirs = _as_toolkit(toolkit | {*system()}, chains)
    mine = ([f for f in orders[0] if f not in theirs], [f for f in orders[1] if f not in theirs])
    while pending or (computed and (pending := computed_headers(
        computed, done, kernel, written, primary, NEXT, scanned))):  # fmt: skip
        name, quoted, here = pending.popleft()
        if (name, quoted) == BY_FOLDER:
            bound = bound or here is None or here.startswith(own)
            continue
        if name.startswith(COMPUTED):  # (a toolkit's own, NVRTC's: as before, by its folders)
            strict = not (nvrtc and here is not None and not here.startswith(own))
            computed.append((name[len(COMPUTED) :], quoted, here, strict))
            continue
        if name.startswith(UNKEYED):  # `OVER`; `ASSEMBLY` for cc alone (a cubin is not assembled)
            written += [marker(name[len(UNKEYED) :])] * (name != ASSEMBLY[0] or compiler == "c")
            continue
        if name.startswith(NEXT):  # each file of its name along the chain (one is read)
            chain = [f for f in dict.fromkeys([here, *orders[0], *orders[1]]) if f not in toolkit]
            name = name[len(NEXT) :]
            found = [p for p in (os.path.join(f, name) for f in chain if f) if compiler_opens(p)]
            shown_as.update(dict.fromkeys(found, NEXT + name))  # keyed by place, not path
            pending.extendleft((p, False, here) for p in reversed(found))
            continue
        by_compiler, name = name.startswith(IMPLIED_MARK), name.removeprefix(IMPLIED_MARK)
        dated, name = name.startswith(DATED), name.removeprefix(DATED)
        path = _resolve(name, quoted, here, orders, toolkit)
        if by_compiler and path is not None and os.path.dirname(path) in theirs:
            path = None  # (the compiler's own, found where the kernel names its folder)
        if path is None and system is not None:  # a system header's: what it includes, shadowed
            edges = shadowed(name, mine, system(), listed)
            if edges and compiler in ("nvcc", "nvrtc"):  # its own folders may come first
                ours = system()  # (nvcc's: its toolkit's `-I` first, then gcc's system ones)
                edges = placed(edges, orders, ours, theirs | {*ours}, ours[1:] if implied else ())
            if edges is None:  # past its bound: what it reaches, unfollowed, is unkeyed
                reach = f"over {MAX_SYSTEM} system headers or 4 MB"
                written.append(marker(f"<{name}> reaching {reach}"))
            for edge in edges or ():
                if edge[:2] not in shadows:  # (each once)
                    shadows.add(edge[:2])
                    pending.append(edge)
        if by_compiler and path is None:  # (not the kernel's: keyed as before)
            continue
        real = os.path.realpath(path) if path is not None else ""  # the file read (once)
        read = _read(real) if path is not None else None
        if path is not None and read is None and (kind := no_file(real)):  # never built
            written.append(marker(f"{NO_FILE}{path} is {kind}"))  # (raw: as any reason)
        shown = HEADER_MARK if name in marked else shown_as.get(name, name)  # (by content)
        written.append(f"{'d' * dated}{'qa'[not quoted]}{shown}\0{read[0] if read else '-'}")
        at.append(path or "")
        past = len(written) > MAX_HEADERS * 64  # names, found or not (a macro's many values)
        if not past and (path is None or read is None or real in seen or dated):
            continue
        if past or len(seen) >= MAX_HEADERS:  # past: unkeyed
            written.append(marker(f"more than {MAX_HEADERS} headers"))
            break
        seen[real] = read[0]
        pending.extend((n, q, os.path.dirname(path)) for n, q in read[1])
    written += precompiled(primary, orders) + once_copies(seen, source)  # (`covered`'s 1st)
    why = reason_in(written)
    if not folders and not any(at) and not why:  # nothing found where only the environment looks
        return ""  # (as before)
    if bound:  # the folders' paths keyed after all (`keyed_options` left them out), and where
        written += ["\0folders", *own, "\0found at", *at]  # each was found (since warm 47)
    elif len({*same}) < len(same):  # each folder as the first one that is the same folder
        written += ["\0same folders", *(str(same.index(folder)) for folder in same)]
    digest = hashlib.sha256("\n".join(written).encode(errors="surrogatepass")).hexdigest()
    for i, name in enumerate(pre[: len(written)]):  # keyed `<header>`, shown by its path
        written[i] = written[i].replace(HEADER_MARK, name, 1) if name in marked else written[i]
    covered[digest] = written if len(covered) < 256 else covered.clear() or written  # bounded
    note(digest, why)
    return digest
