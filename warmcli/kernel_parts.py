"""A `Kernel`'s parts as its constructor takes them: options and defines, checked.

`options` makes a kernel's options a tuple of `str` (refusing one `str`, a non-`str`
option, a NUL byte); `defines` makes its defines (name, value text) pairs from a mapping
or a sequence of pairs, each name a C identifier given once, each value as the compiler
will read it (`define_value`: a bool is 1 or 0, a numpy number the Python number it
holds; no NaN, no NUL); `opens_comment` tells a value that would swallow the text after
its `#define` line; `not_identifier` says why an entry is none (a template instance, CuPy's
name expression, told what to declare instead). Every refusal is a `TypeError`/`ValueError`
naming the kernel's entry.
`stored` reads options or defines back from a bundle's (untrusted) text, as
`warmcli.kernel.key_components` writes them, `source_digest` its source's digest and
`headers_digest` its headers' (as a listing shows it); `NATIVE_OPTION` tells `-march=native`;
`key_of` recomputes a kernel's key from the parts such a row keeps (its content hash,
arch, headers, toolchain; `arch_keys` for many archs at once), and `cubin_archs` names the
archs whose cubin a PTX build's symbol may name (`virtual_sm`: a PTX arch's SM;
`cuda_release`: the CUDA release a toolchain identity names, for `warm stats` too);
`kept_by` is what a process keeps a kernel's key by (its content hash, with its options where it
has some: the hash holds no path of an include folder or linked object, which the key reads);
`INCLUDE_PREFIXES` and `PRE_INCLUDE_PREFIXES` tell options naming include folders and
headers read first; `header_files` lists the headers a headers digest this process made lately
covers (`warmcli.headers.covered`, the one thing here read but its arguments), kept beside a key
so a miss can name the header that changed. Its only state is `HOST_VERSION`, the hook by which a
key reads the version line of a binary a CUDA kernel names nvcc's host compiler (`-ccbin`:
`warmcli.wrapper_script`), told by the backends (`warmcli.backends.serving`: this layer starts no
compiler); `warmcli.kernel` keys what it returns. It never imports numpy (`warm stats` reads
`stored`): a numpy define value is told by the numpy the process imported.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping

from warmcli.printable import Pattern

# How a binary host compiler's version line is read for a key ("" where it cannot be): told
# by `warmcli.backends.serving`, which every process keying a CUDA kernel imports.
HOST_VERSION: list[Callable[[str], str]] = []

# What every option naming an include folder starts with (`warmcli.include_options.INCLUDE_FLAGS`,
# which a serving process never imports), for `warmcli.kernel` and `warmcli.linked` alike.
INCLUDE_PREFIXES = ("-I", "--include-path", "--include-directory", "-isystem", "-iquote",
                    "-idirafter", "--system-include")  # fmt: skip
# `warmcli.include_options.PRE_INCLUDE_FLAGS` (`--include` is a prefix of `--include-path` too)
PRE_INCLUDE_PREFIXES = ("-include", "--pre-include", "--include", "-imacros", "--imacros")
# What names an include folder or a header for gcc (`-I`, `-isystem`, `-include`, `-imacros`...)
# in the pieces another option passes on (`-Wp,`, nvcc's `-Xcompiler`), which no key reads.
PASSED_INCLUDE_PREFIXES = ("-I", "-i", "--include", "--imacros", "--pre-include")


def is_identifier(name: object) -> bool:
    """Whether `name` is a `str` spelling a C identifier (`[A-Za-z_][A-Za-z0-9_]*`, whole:
    no trailing line break), told by `str` methods: no pattern compiled by a serving process."""
    return isinstance(name, str) and name.isascii() and name.isidentifier()


def not_identifier(entry: object) -> str:
    """Why `entry`, no C identifier, is no kernel's entry: a template instance or a qualified
    name (CuPy's name expressions, `scale<float>`, `ns::scale`) told what to declare instead."""
    said = f"kernel entry {entry!r} is not a C identifier"
    if isinstance(entry, str) and ("<" in entry or "::" in entry):
        said += (
            ': a template instance or qualified name is no entry: declare one extern "C" '
            "__global__ function per instance (calling a __device__ template) and name that"
        )
    return said


def stored(text: str, pairs: bool) -> list[str] | list[tuple[str, str]] | None:
    """A kernel's options (a JSON list of texts) or, given `pairs`, its defines (of
    `[name, value]` text pairs) as a bundle holds them; None where `text` is no such list
    (not what warm writes: a bundle's, shown as it is or not at all, never raised)."""
    try:
        items = json.loads(text) if text else []
    except (ValueError, RecursionError):
        return None
    if not isinstance(items, list):
        return None
    if not pairs:
        return items if all(isinstance(item, str) for item in items) else None
    found = [
        (item[0], item[1])
        for item in items
        if isinstance(item, list) and len(item) == 2 and all(isinstance(v, str) for v in item)
    ]
    return found if len(found) == len(items) else None


def source_digest(components: Mapping[str, object]) -> str:
    """A kernel row's source digest (`components`' `source`, as `warmcli.kernel.key_components`
    writes it) as a listing gives it: "" where it is no text, a lone surrogate (JSON's
    `\\ud800`, which no strict JSON reader takes back) written escaped, as `\\ud800` text."""
    value = components.get("source", "")
    if not isinstance(value, str):
        return ""
    if value.isascii():
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


_HEX = Pattern(r"[0-9a-f]{64}")  # a sha256 digest, as `key_components` writes one
# An option (or a part of a joined one, or a word a C compiler's wrapper script adds) that tunes
# for the building CPU: `Kernel.tunes_native`, `HostCompiler.toolchain`.
NATIVE_OPTION = Pattern(r"-m(?:arch|tune|cpu)=native")


def headers_digest(components: Mapping[str, object]) -> str:
    """A kernel row's digest of the headers it read (`components`' `headers`), as a listing
    gives it: "" where it read none keyed, or the value is no hex digest (a bundle's)."""
    value = components.get("headers", "")
    return value if isinstance(value, str) and _HEX.fullmatch(value) else ""


# A define value's tokens as far as comments go: a string or char literal, a comment, any other.
_VALUE_TOKEN = Pattern(r'"(?:\\.|[^"\\])*"?|\'(?:\\.|[^\'\\])*\'?|//.*|/\*(?:.*?\*/)?|.')


def opens_comment(value: str) -> bool:
    """Whether `value` opens a block comment it does not close (it would swallow the text
    after its `#define` line)."""
    if "/*" not in value:
        return False
    return any(t == "/*" for t in _VALUE_TOKEN.findall(value))


def kind_of(value: object) -> str:
    """What `value` is, for an error: `None`, else its type's name."""
    return "None" if value is None else type(value).__name__


def checked_options(entry: str, options: object) -> tuple[str, ...]:
    """A kernel's options as a tuple of `str`; one `str`, or an option that is no `str` (a
    `Path`, a number), is refused."""
    if options is None:
        return ()
    if isinstance(options, str):
        raise TypeError(
            f"kernel {entry}: options={options!r} is one str; pass a tuple of options, "
            f"e.g. options=({options!r},)"
        )
    if not isinstance(options, Iterable) or isinstance(options, bytes | bytearray | Mapping):
        raise TypeError(
            f"kernel {entry}: options is a tuple of str (options=('-O3',)), not {kind_of(options)}"
        )
    out = tuple(options)
    for i, option in enumerate(out):
        if not isinstance(option, str):
            raise TypeError(
                f"kernel {entry}: option {i + 1} is {option!r} ({kind_of(option)}); "
                "every option is a str"
            )
        if "\x00" in option:  # no command line, nor NVRTC, can carry it
            raise ValueError(f"kernel {entry}: option {i + 1} holds a NUL byte: {option!r}")
    return tuple(o if type(o) is str else str(o) for o in out)


def checked_defines(entry: str, defines: object) -> list[tuple[str, str]]:
    """A kernel's defines as (name, value text) pairs, from a mapping or a sequence of
    (name, value) pairs naming each define once."""
    if defines is None:
        return []
    if isinstance(defines, Mapping) or hasattr(defines, "items"):
        pairs: list[object] = list(defines.items())  # type: ignore[union-attr]
    elif isinstance(defines, Iterable) and not isinstance(defines, str | bytes | bytearray):
        pairs = list(defines)
    else:
        raise TypeError(
            f"kernel {entry}: defines is a mapping of names to values, not {kind_of(defines)}"
        )
    out: dict[str, str] = {}
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(
                f"kernel {entry}: defines is a mapping or a sequence of (name, value) pairs, "
                f"and {pair!r} is no pair"
            )
        name, value = pair
        if not is_identifier(name):
            error = ValueError if isinstance(name, str) else TypeError
            raise error(f"kernel {entry}: define {name!r} is not an identifier")
        if name in out:
            raise ValueError(f"kernel {entry}: define {name!r} is given twice")
        out[str(name)] = define_value(entry, name, value)
    return list(out.items())


def define_value(entry: str, name: str, value: object) -> str:
    """A define's value as the compiler sees it: a bool (Python's or numpy's) is 1 or 0, a
    numpy number the Python number it holds, text and Python numbers as `str` writes them.
    numpy is not imported here (`warm stats` reads `stored` and never needs it): a value
    can only be a numpy number where the process imported numpy already."""
    np = sys.modules.get("numpy")
    if isinstance(value, bool) or (np is not None and isinstance(value, np.bool_)):
        return "1" if value else "0"
    floating = isinstance(value, float) or (np is not None and isinstance(value, np.floating))
    if floating and not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"kernel {entry}: define {name}: {value} is no C number (a finite float)")
    if isinstance(value, str) and "\x00" in value:
        raise ValueError(f"kernel {entry}: define {name}: its value holds a NUL byte")
    if isinstance(value, str | int | float):
        try:
            return str(value)
        except ValueError:  # an int over Python's limit on an int's text
            limit = sys.get_int_max_str_digits()
            raise ValueError(
                f"kernel {entry}: define {name}: an int of more than {limit:,} digits, "
                "Python's limit on an int's text (sys.set_int_max_str_digits)"
            ) from None
    if np is not None and isinstance(value, np.integer):
        return str(int(value))
    if floating:  # float16/32: as numpy writes it, the text typed
        return str(value)
    raise TypeError(
        f"kernel {entry}: define {name}: a value is a str, bool, int or float, "
        f"not {value!r} ({kind_of(value)})"
    )


PTX_SMS = range(10, 200)  # the SMs a PTX row's cubin is looked for in (`cubin_archs`)
_VIRTUAL = Pattern(r"compute_([1-9][0-9]{1,2})\Z")  # no compiler takes compute_090
_RELEASE = Pattern(r"release ([0-9]+)\.([0-9]+)")  # a toolchain identity's CUDA release
_STRING = json.encoder.encode_basestring_ascii  # one string as `warmcli.kernel` quotes it


MAX_HEADER_FILES = 512  # headers `header_files` lists (`warmcli.headers.MAX_HEADERS` reached)


def header_files(digest: str) -> str:
    """The headers `digest` covers, where it is a headers digest this process made lately: a
    JSON list of [name as written, the first 16 hex digits of its sha256, or "-" where none was
    found], in the order reached; "" where it is not (a digest with linked files in it). A
    name written as an absolute path keeps its file name only: a bundle ships no folder of
    the machine that built it (README: the folders are not keyed)."""
    from warmcli.headers import NEXT, covered  # (imported already where it made a digest)

    written = covered.get(digest)
    if written is None:
        return ""
    files = []
    for entry in written[: MAX_HEADER_FILES * 2]:
        entry = entry.removeprefix("d")  # (a file a GCC dependency names: listed as a header)
        name, _, sha = entry[1:].rpartition("\0")
        if entry[:1] in ("q", "a") and name:
            name = name.removeprefix(NEXT)
            files.append([name.rpartition("/")[2] if name.startswith("/") else name, sha[:16]])
    return json.dumps(files[:MAX_HEADER_FILES])


def virtual_sm(arch: str) -> int | None:
    """The SM number of a virtual architecture (`compute_90` → 90), else None."""
    m = _VIRTUAL.match(arch)
    return int(m.group(1)) if m else None


def cuda_release(identity: str) -> tuple[int, int] | None:
    """The CUDA release an nvcc identity names (`nvcc:Cuda compilation tools, release 13.0, …`)."""
    found = _RELEASE.search(identity)
    return (int(found.group(1)), int(found.group(2))) if found else None


def kept_by(content: str, options: tuple[str, ...]) -> str | tuple[str, tuple[str, ...]]:
    """What a process keeps a kernel's key by: its content hash `content`, with its `options`
    where it has some (two kernels naming `-I/a` and `-I/b`, or `/a/x.o` and `/b/x.o`, share a
    content hash, not a key: `Kernel.keyed_options`)."""
    return (content, options) if options else content


def key_of(content: str, arch: str, headers: str, toolchain_identity: str) -> str:
    """`kernel_key` from its parts, as a bundle row's components keep them (`key_components`:
    the kernel's `content_hash` as `kernel`, and its `headers`, "" for none): a reader
    recomputes a row's key from them, so a row moved under another build's key is known."""
    after = _after_arch(content, headers, toolchain_identity)
    return hashlib.sha256(f'{{"arch":{_STRING(arch)}{after}'.encode()).hexdigest()


def arch_keys(
    content: str, archs: Iterable[str], headers: str, toolchain_identity: str
) -> Iterator[tuple[str, str]]:
    """`key_of` for each of `archs` in turn, (arch, key): the text after the arch is made
    once (a PTX row's symbol is looked for among its kernel's keys for every SM)."""
    after = _after_arch(content, headers, toolchain_identity).encode()
    for arch in archs:
        yield arch, hashlib.sha256(b'{"arch":' + _STRING(arch).encode() + after).hexdigest()


def _after_arch(content: str, headers: str, toolchain_identity: str) -> str:
    """A key's text after its arch, as `warmcli.kernel.kernel_key` writes it."""
    keyed = f'"headers":{_STRING(headers)},' if headers else ""
    return f',{keyed}"kernel":{_STRING(content)},"toolchain":{_STRING(toolchain_identity)}}}'


def cubin_archs(ptx_arch: str) -> Iterator[str]:
    """The SM archs whose cubin PTX of `ptx_arch` (`compute_XX`) may have been built beside,
    whose key its symbol names (`warm_<key[:16]>_`): XX first, then every other SM of
    `PTX_SMS` (`--arch sm_80 --ptx compute_90`), each plain and with its `a` or `f`."""
    for sm in (virtual_sm(ptx_arch) or PTX_SMS[0], *PTX_SMS):
        for suffix in ("", "a", "f"):
            yield f"sm_{sm}{suffix}"
