"""The files a host kernel's options give cc or its linker as input, as one digest for its key.

A host C kernel's options may name a file that cc builds into the kernel's binary: an
object or archive to link (`/opt/lib/helper.o`, `-Wl,/opt/lib/helper.o`, `-Xlinker ...`),
a linker script (`-T`, `-Wl,--version-script=...`), a plugin
(`-fplugin=...`), a library (`-lhelper`, `-Wl,-lhelper`, `-Xlinker -l -Xlinker helper`; and
warm's `-lm`, cc's `-lc`, `-lgcc` where such a folder holds them) found in a folder `-L`
(`-Wl,-L`, `-Xlinker -L -Xlinker dir`) or `LIBRARY_PATH` names.
The key's options hold its path only, so an edited file was served the old build:
`linked_digest` covers the content of each file the options name by its absolute path (a
relative one is not found: cc runs in a scratch folder), whole options, each piece of
`-Wl,`/`-Wa,`/`-Wp,` and the value after an option's `=`, and of each library found there
(an archive only where the linker takes no shared library: `-Wl,-Bstatic`, `-static`), and
of each member a thin archive among them names (read from its own file by the linker) and
each file a linker script among them links (`INPUT(...)`, `GROUP(...)`: as the linker finds it)
or includes (`INCLUDE`), in the folders it adds (`SEARCH_DIR`) too.
An ELF relocatable object or a regular archive named so (a whole option or a `-Wl,` piece)
is keyed by its content alone, its path `LINKED_MARK` in the key's options too
(`placeless_options`, as ccache's base folder): no path of it reaches the binary, so a
checkout at another path (a CI cache restored elsewhere) is served; a shared library (the
binary may name it by that path) and a thin archive (its members found by path) keep it.
Include folders, headers read first (`warmcli.headers` keys those by content), defines and what cc
or its linker writes (`-o`, `-MF`, cc's reports, `-fopt-info-all=`, `-Wl,-Map=`,
`-Wl,--dependency-file=`) are not looked at, so the keys of kernels naming no such file are as
before; cc's `-static` links no shared library, the linker's (`-Wl,-static`) none from its place on.
Past a bound (a thin archive's 1,024 members or 64 MB, a script's 1,024 inputs or 1 MB, 8
`INCLUDE`s deep, 256 folders), or at a file named by its path, a library `-l` finds or an input a
linked script names that is a FIFO or a device (`NO_FILE`: never built, `warmcli.backends.batch`),
the digest holds `warmcli.unkeyed`'s marker, its reason noted. State: a per-process memo of each
file's digest (its kind, whether it names no other file) by its path and stat stamp, of files
unchanged in the last seconds (`warmcli.stamped`: what was opened, a regular file only), and of
options' linker words. It never runs a compiler, never writes, never raises for an unreadable file.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, TypeVar

from warmcli.handed_on import PREFIXES, handed_pieces, tool_words
from warmcli.kernel_parts import INCLUDE_PREFIXES, PRE_INCLUDE_PREFIXES
from warmcli.stamped import Stamp, compiler_opens, no_file, opened, settled, stamp
from warmcli.unkeyed import NO_FILE, first_of, marker, note, reason_in, reason_of

# Options whose value is no linked file: include folders and headers read first (keyed by
# content in `warmcli.headers`), defines, what cc writes (`-o`, `-MF deps.d`, `-Wp,-MD,deps.d`:
# its content changes with each build; cc's reports: `-fopt-info-all=opt.txt`, `-fdump-tree-all=f`,
# `-aux-info f`, `-dumpdir d/`) and what its linker writes (`-Wl,-Map=out.map`,
# `-Wl,--dependency-file=deps.d`). The next option (or piece) is their value where given alone.
_NOT_FILES = (
    *INCLUDE_PREFIXES, *PRE_INCLUDE_PREFIXES, "-D", "-U", "-o", "-MF", "-MT", "-MQ", "-MD", "-MMD",
    "-fopt-info", "-fdump-", "-aux-info", "-dumpdir", "-dumpbase", "-fprofile-note=",
    "-Map", "--Map", "--dependency-file", "--out-implib",
)  # fmt: skip
# cc's `-MD` and `-MMD` take no value (cc names the file); given through `-Wp,` they do.
_FLAGS_ALONE = ("-MD", "-MMD")
_STATIC = ("-Bstatic", "-dn", "-non_shared", "-static")  # the linker's: archives only after
_DYNAMIC = ("-Bdynamic", "-dy", "-call_shared")  # and shared libraries again
_IMPLICIT = ("gcc", "gcc_s", "gcc_eh", "c")  # what cc links after a kernel's options
_OWN = "m"  # what warm links after a kernel's source (`-lm`), whatever its options
# The linker's flags that gcc reads otherwise when given as a whole option (`-Bstatic`: a
# `-B` prefix, `static`; `-dn`: a dump flag): only a `-Wl,` or `-Xlinker` one is the linker's.
_LINKER_ONLY = tuple(w for w in (*_STATIC, *_DYNAMIC) if w != "-static")
_MAX_MEMO = 1024
_MAX_THIN = 64 << 20  # the most of a thin archive (or linker script) read for what it names
_MAX_SCRIPT = 1 << 20
_MAX_DEPTH = 9  # the most linker scripts `INCLUDE`d one in another followed (as ld: its stack
# holds 10 files, the first script and 9 it includes one in another)
_MAX_FOLDERS = 256  # the most library folders searched, with those scripts add
_COMMENT = re.compile(rb"/\*.*?(?:\*/|\Z)", re.DOTALL)
_SCRIPT_TOKEN = re.compile(rb'"[^"]*"|[()]|[^\s,()]+')  # a linker script's words, a
# quoted one whole (`SEARCH_DIR("/opt/my lib")`, as `ld --verbose` writes its own: a name)
_Stamp = tuple[str, Stamp]  # a file's path and stamp
_T = TypeVar("_T")
_memo: dict[_Stamp, str] = {}
# What a linked file keyed by its content alone is named in the key instead of its path.
LINKED_MARK = "<linked file>"
FOLDER_MARK = "<library folder>"  # and a library folder's instead of its path
_ELF_REL = 1  # ELF's e_type of a relocatable object (`.o`)
_kinds: dict[_Stamp, bool] = {}  # whether each is `_placeless`
_opaque: dict[_Stamp, bool] = {}  # whether each names no other file (`_names_none`)


def file_texts(options: Sequence[str]) -> Iterator[str]:
    """Each text of `options` that may name a file cc or its linker reads: each option, or
    each piece of one passed on (`-Wl,a,b`), and the value after a `=` or `-T`."""
    tokens = (
        (piece, option.startswith("-Wp,")) for option in options for piece in handed_pieces(option)
    )
    skip_next = False
    for token, preprocessor in tokens:
        if skip_next or token.startswith(_NOT_FILES):
            valued = token in _NOT_FILES and (preprocessor or token not in _FLAGS_ALONE)
            skip_next = not skip_next and valued
            continue
        yield token
        if "=" in token:
            yield token.split("=", 1)[1]
        if token.startswith("-T") and len(token) > 2:
            yield token[2:]


def _placeless(path: str) -> bool:
    """Whether the regular file at `path` is an ELF relocatable object or a regular (not
    thin) archive: linked by its content, its path reaches no binary (`_by_stamp`)."""

    def kind(fh: BinaryIO) -> bool:
        head = fh.read(18)
        order = "little" if head[5:6] == b"\x01" else "big"
        elf = len(head) == 18 and head[:4] == b"\x7fELF"
        return head.startswith(b"!<arch>\n") or (
            elf and int.from_bytes(head[16:], order) == _ELF_REL
        )

    return _by_stamp(path, _kinds, kind) or False


def _folder_flag(token: str) -> str:
    """The flag of a library folder `token` names (`-L/opt/lib`, `--library-path=...`), or ""."""
    return next((f for f in ("-L", "--library-path=") if token.startswith(f) and token != f), "")


def placeless_options(options: Sequence[str]) -> tuple[str, ...]:
    """`options` as a host kernel's key takes them: each whole option or `-Wl,` piece that
    names an object or regular archive by its absolute path (`_placeless`) `LINKED_MARK`, and
    a library folder's absolute path (`-L`, `--library-path=`) `FOLDER_MARK`: the libraries
    found there are keyed by name and content (the path of a value of `_NOT_FILES` kept)."""
    keyed = list(options)
    skip_next, before = False, ""
    for at, option in enumerate(options):
        wl = option.startswith("-Wl,")
        pieces = handed_pieces(option)
        for i, token in enumerate(pieces):
            if skip_next or token.startswith(_NOT_FILES):
                preprocessor = option.startswith("-Wp,")
                valued = token in _NOT_FILES and (preprocessor or token not in _FLAGS_ALONE)
                skip_next = not skip_next and valued
            elif not (wl or option == token):
                pass
            elif before == "-L" and os.path.isabs(token):
                pieces[i] = FOLDER_MARK
            elif os.path.isabs(token) and _placeless(token):
                pieces[i] = LINKED_MARK
            elif (flag := _folder_flag(token)) and os.path.isabs(token[len(flag) :]):
                pieces[i] = flag + FOLDER_MARK
            before = token
        if wl or not option.startswith(PREFIXES):
            keyed[at] = "-Wl," + ",".join(pieces) if wl else pieces[0]
    return tuple(keyed)


def file_digest(path: str) -> str | None:
    """The sha256 of the regular file at `path`, or None where there is none to read."""

    def digest(fh: BinaryIO) -> str:
        hashed = hashlib.sha256()
        while chunk := fh.read(1 << 20):
            hashed.update(chunk)
        return hashed.hexdigest()

    return _by_stamp(path, _memo, digest)


def _by_stamp(path: str, memo: dict[_Stamp, _T], read: Callable[[BinaryIO], _T]) -> _T | None:
    """`read` of the regular file at `path`, opened, or None where there is none to read;
    kept in `memo` by its path and the stamp of what was opened once settled
    (`warmcli.stamped`), at most `_MAX_MEMO` of them."""
    try:
        known = memo.get((path, stamp(os.stat(path))))
    except (OSError, ValueError):
        return None
    if known is not None:
        return known
    if (found := opened(path)) is None:
        return None
    try:
        with found[0] as fh:
            value = read(fh)
    except OSError:
        return None
    if len(memo) < _MAX_MEMO and settled(found[1]):
        memo[(path, stamp(found[1]))] = value
    return value


def flag_values(options: Sequence[str], flag: str) -> Iterator[str]:
    """The value of each `flag` option in `options`, joined (`-Lfolder`) or the next one."""
    for before, option in zip(("", *options), options, strict=False):
        if before == flag:
            yield option
        elif option.startswith(flag) and option != flag:
            yield option[len(flag) :]


@functools.lru_cache(maxsize=256)  # (each variant of a kernel keys its options: read once)
def linker_words(options: tuple[str, ...]) -> tuple[str, ...]:
    """`options` with each `-Wl,a,b` given as its pieces (`a`, `b`) and each `-Xlinker a` as `a`
    (`tool_words`): what the linker reads, its long spellings of `-L` and `-l` (`--library-path=`,
    `--library=`, or with the value next) as those; a `_LINKER_ONLY` flag given cc left out."""
    words = []
    for piece, handed in tool_words(options, "-Xlinker"):
        if not handed and piece in _LINKER_ONLY:
            continue
        if piece.startswith(("--library-path", "--library")):  # `=value` or the next
            long, _, value = piece.partition("=")
            piece = {"--library-path": "-L", "--library": "-l"}.get(long, "") + value or piece
        words.append(piece)
    return tuple(words)


def _search_folders(words: Sequence[str], library_path: str) -> list[str]:
    """The folders the linker searches for a library, those given by an absolute path."""
    folders = [*flag_values(words, "-L"), *library_path.split(os.pathsep)]
    return [folder for folder in folders if os.path.isabs(folder)]


def found_libraries(words: Sequence[str], folders: list[str], static: bool) -> Iterator[str]:
    """For each library `-lname` (`-l:file`) found in a folder `-L` or `LIBRARY_PATH` names by
    its absolute path (as the linker searches them: the first folder holding it; its archive
    alone after `-Bstatic`, `-static`, till `-Bdynamic`), its name and the file found; a
    library found only in the system's folders is the toolchain's. Those warm (`-lm`) and cc
    link unasked (`-lgcc`, `-lgcc_s`, `-lgcc_eh`, `-lc`) too: a `libm.a` in a `-L` folder is
    linked.
    `words` are the options as the linker reads them (`linker_words`: `-Wl,-L/opt/lib`,
    `-Wl,-lhelper` given as `-L/opt/lib`, `-lhelper`); `folders` the ones searched
    (`_search_folders`), which a linker script read meanwhile may add to (`SEARCH_DIR`);
    `static`: cc's own `-static` (`-static-pie`), no shared library linked at all (the
    linker's, `-Wl,-static`, from its place on, as `-Bstatic`)."""
    implicit = () if {"-nostdlib", "-nodefaultlibs"} & {*words} else _IMPLICIT  # cc's own
    implicit = (_OWN, *(n for n in implicit if n != "c" or "-nolibc" not in words))
    given = [*zip(("", *words), words, strict=False), *(("", f"-l{n}") for n in implicit)]
    for before, word in given:
        static = word in _STATIC or (static and word not in _DYNAMIC)
        name = word if before == "-l" else word[2:] if word.startswith("-l") else ""
        if not name or word == "-l":
            continue
        files = [name[1:]] if name.startswith(":") else [f"lib{name}.so", f"lib{name}.a"]
        files = [f for f in files if not (static and f.endswith(".so"))]  # -Bstatic: .a only
        for folder in folders:
            found = [p for p in (os.path.join(folder, f) for f in files) if compiler_opens(p)]
            if found:
                yield from (f"-l{name}\0{path}" for path in found)
                break


def _named_inputs(path: str, folders: list[str]) -> list[str]:
    """Each file the linker reads for the one at `path`, as `name\0sha256` ('-' where none
    is found): a thin archive's members (`ar rcsT`: from their own files, its folder's where
    relative) or the files a linker script links (`_script_inputs`); [] for any other (an
    object, a shared library: known by its stamp once settled, not read again, `_opaque`)."""
    if _by_stamp(path, _opaque, _names_none) or (opening := opened(path)) is None:
        return []  # (a FIFO come in its place: not waited on)
    try:
        with opening[0] as fh:
            head = fh.read(8)
            thin, script = head == b"!<thin>\n", head.isascii() and head != b"!<arch>\n"
            data = fh.read(_MAX_THIN if thin else _MAX_SCRIPT if script else 0)
            cut = bool(data) and fh.read(1) != b""  # longer than read: past a bound
    except OSError:
        return []
    if not thin:
        found = _script_inputs(head + data, folders)
        cut = cut and b"\0" not in data and data.isascii()  # a script's text, not a binary's
        return [*found, marker(f"a linker script over {_MAX_SCRIPT >> 20} MB")] if cut else found
    at, names, found = 0, b"", []
    while at + 60 <= len(data) and len(found) < _MAX_MEMO:  # a 60-byte header for each
        name, size = data[at : at + 16].rstrip(b" "), data[at + 48 : at + 58].strip()
        at += 60
        if name in (b"/", b"/SYM64/", b"//"):  # the symbol table, the long names: held here
            if not size.isdigit():
                return [*found, "\0malformed"]
            names = data[at : at + int(size)] if name == b"//" else names
            at += int(size) + (int(size) & 1)
            continue
        if name[1:].isdigit():  # `/offset` into the long names, each ending `/\n`
            name = names[int(name[1:]) :].split(b"/\n", 1)[0]
        member = os.path.join(os.path.dirname(path), os.fsdecode(name.rstrip(b"/")))
        found.append(f"{os.fsdecode(name)}\0{file_digest(member) or '-'}")
    if at + 60 <= len(data) or cut:  # members past the bound: not keyed
        found.append(marker(f"a thin archive of more than {_MAX_MEMO:,} members"))
    return found


def _names_none(fh: BinaryIO) -> bool:
    """Whether the file open as `fh` names no other file to `_named_inputs`, whatever the
    folders: not a thin archive, and no text read as a linker script (a NUL or a byte past
    ASCII in its first 1 MB, as in an ELF file; not one longer, marked as cut)."""
    head = fh.read(8)
    if head == b"!<thin>\n" or not head.isascii() or head == b"!<arch>\n":
        return head != b"!<thin>\n"
    data = fh.read(_MAX_SCRIPT)
    if b"\0" in head:  # (unread past it, but marked as cut where the rest is text)
        return not (data and fh.read(1) and b"\0" not in data and data.isascii())
    return b"\0" in data or not data.isascii()


def _script_inputs(
    data: bytes,
    folders: list[str],
    found: list[str] | None = None,
    depth: int = 0,
    followed: set[str] | None = None,
) -> list[str]:
    """Each file the linker script `data` links (`INPUT(...)`, `GROUP(...)`, `AS_NEEDED(...)`
    within them) or includes (`INCLUDE file`, and what that links, `_MAX_DEPTH` deep), as
    `_named_inputs`: by its absolute path, or `-lname` or a file's name searched in `folders`
    as the linker does (a scratch folder's cc finds none in its own), added to `found`; each
    folder it names by its absolute path, `SEARCH_DIR(/opt/lib)`, added to `folders` (after
    those named, as the linker searches it: for the libraries named after it too). A name
    may be quoted (`INCLUDE "/opt/a b.ld"`); each included script is followed once (`followed`:
    one that includes itself, an error to ld, is not read again and again)."""
    found = [] if found is None else found
    followed = set() if followed is None else followed
    if b"\0" in data or not data.isascii():
        return found
    nest, command, before = 0, b"", b""
    for word in _SCRIPT_TOKEN.findall(_COMMENT.sub(b" ", data)):  # one pass: linear
        quoted = len(word) > 1 and word[:1] == word[-1:] == b'"'  # (`"("`: a name)
        token = word[1:-1] if quoted else word
        if word == b"(":
            command, nest = command if nest else before, nest + 1  # whose parentheses
        elif word == b")":
            nest = max(nest - 1, 0)
        elif nest and command == b"SEARCH_DIR" and os.path.isabs(token):
            added = os.fsdecode(token)  # (each once, at most `_MAX_FOLDERS` in all)
            if added not in folders and len(folders) >= _MAX_FOLDERS:
                found.append(marker(f"more than {_MAX_FOLDERS} library folders"))
            folders += [added] if added not in folders and len(folders) < _MAX_FOLDERS else []
        elif (nest and command in (b"INPUT", b"GROUP") and word != b"AS_NEEDED") or (
            not nest and before == b"INCLUDE"
        ):
            if len(found) >= _MAX_MEMO:  # the rest not keyed
                found.append(marker(f"a linker script naming more than {_MAX_MEMO:,} inputs"))
                break
            name = os.fsdecode(token)
            lib = name[2:] if name.startswith("-l") else ""
            files = (f"lib{lib}.so", f"lib{lib}.a") if lib else (name,)
            paths = [os.path.join(f, n) for f in folders for n in files]
            at = [name] if os.path.isabs(name) else paths  # (a FIFO too: ld waits on it: refused)
            hit = next((p for p in at if compiler_opens(p)), "")
            why = f"{NO_FILE}{hit} is {k}" if (k := no_file(hit)) else ""  # (never built)
            found.append(marker(why) if why else f"{name}\0{file_digest(hit) or '-'}")
            if hit and not nest and depth >= _MAX_DEPTH:  # what it links: not keyed
                found.append(marker(f"linker scripts included more than {_MAX_DEPTH} deep"))
            elif hit and not nest and hit not in followed:  # an included script: what it
                followed.add(hit)  # links (once: one that includes itself is not read again)
                text = _by_stamp(hit, {}, lambda fh: fh.read(_MAX_SCRIPT)) or b""  # (unkept)
                _script_inputs(text, folders, found, depth + 1, followed)
        before = word
    return found


def linked_digest(
    options: Sequence[str], library_path: str = "", words: Sequence[str] | None = None
) -> str:
    """The sha256 over each file `options` name by its absolute path and its content's
    sha256, in the order named, then each library they link from their `-L` folders (or
    `library_path`, `LIBRARY_PATH`'s); "" where they name none. `words`: `options` as the
    linker reads them, where the caller has them (`linker_words`)."""
    lines, words = [], linker_words(tuple(options)) if words is None else words
    folders = _search_folders(words, library_path)
    for text in file_texts(options):
        if os.path.isabs(text) and (found := file_digest(text)) is not None:
            lines.append(f"{LINKED_MARK if _placeless(text) else text}\0{found}")
            lines += _named_inputs(text, folders)
        elif os.path.isabs(text) and (kind := no_file(text)):  # never built (`headers`' alike)
            lines.append(marker(f"{NO_FILE}{text} is {kind}"))
    pairs = zip(("", *options), options, strict=False)  # cc's own `-static`, not `-Xlinker`'s
    static = any(o in ("-static", "-static-pie") and b != "-Xlinker" for b, o in pairs)
    for library in found_libraries(words, folders, static):
        name, path = library.split("\0", 1)  # its file's name, not its folder's path
        if (found := file_digest(path)) is not None:
            lines.append(f"{name}\0{os.path.basename(path)}\0{found}")
            lines += _named_inputs(path, folders)
        elif kind := no_file(path):  # a FIFO `libfoo.a`: ld waited on it (never built)
            lines.append(marker(f"{NO_FILE}{path} is {kind}"))
    if not lines:
        return ""
    digest = hashlib.sha256("\n".join(lines).encode(errors="surrogatepass")).hexdigest()
    note(digest, reason_in(lines))  # (`warmcli.unkeyed`: past a bound)
    return digest


def with_linked(headers: str, options: Sequence[str], library_path: Callable[[], str]) -> str:
    """A kernel's headers digest (`warmcli.headers`) with the files its `options` link
    (`library_path()`: `LIBRARY_PATH`, read where they name a library): `headers` itself
    where they name none (its key as before)."""
    words = linker_words(tuple(options))
    libraries = any(word.startswith("-l") for word in words)
    named = libraries or any("/" in option for option in options)
    linked = linked_digest(options, library_path() if libraries else "", words) if named else ""
    if not linked:
        return headers
    digest = hashlib.sha256(f"{headers}\0linked\0{linked}".encode()).hexdigest()
    note(digest, first_of(reason_of(headers), reason_of(linked)))  # (a FIFO's first)
    return digest
