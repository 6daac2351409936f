"""Kernel definitions and the content-addressed kernel key.

A `Kernel` is what a workload declares: source text, entry name, compile options, defines, the
language the backend compiles (`c` for the host, `cuda` for NVRTC or nvcc) and its parameter
signature in `struct` letters (`P` pointer, `b B h H i I l L q Q` signed and unsigned integers of 8
to 64 bits, `?` bool, `e` float16 on CUDA only, `f` float32, `d` float64), the vocabulary PyCUDA's
`prepare` uses too. The `kernel_key` over source, entry, parameter letters, language, options,
defines, target architecture and toolchain identity decides a cache hit: any change is a different
kernel, never a stale hit; its `name` is a label for people, in no key and in no compiled text. What
a kernel is made of is checked where it is made (`Kernel(...)`, a `TypeError`/`ValueError` naming
it): a `str` source, options as a sequence of `str`, defines as a mapping (or (name, value) pairs)
of identifiers to a `str`, bool, int or float (numpy's too: a bool is 1 or 0, a number the Python
number it holds). A host kernel whose options tune for the building CPU (`tunes_native`) is keyed
with that CPU by its callers, in the toolchain identity they pass (`warmcli.backends.native`). For a
kernel whose options (nvcc's: with `NVCC_PREPEND_FLAGS`/`NVCC_APPEND_FLAGS`' around them) name
include folders (`-I`) or a header read first (`-include`), or that reaches a header in one its
compiler takes from the environment (`CPATH`; NVRTC's system toolkit: `warmcli.compiler_includes`),
or includes one by its absolute path, the key covers the headers it reaches there
(`warmcli.headers`), by their names and content, not the include folders' paths (`keyed_options`),
and the files a host kernel's options link (`warmcli.linked`: an object's or archive's content, not
its path; `__TIME__`: `warmcli.build_clock`); nvcc's host compiler a CUDA kernel names (`-ccbin`) by
its path and a script's digest or a binary's version line (`warmcli.wrapper_script`). Pickled, it
holds its fields only (what a key reads of this machine is read again where it is unpickled). Its
only state is bounded memos of the texts keys repeat, JSON-quoted (an arch, a toolchain, a source
many kernels share, a content hash's text after its defines, however long), of whether a source may
read a header or includes one by its path, NVRTC's folders (`CPATH` and its kin: read at each key),
and `CC_SYSTEM` (a compiler's folders); it compiles nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from warmcli import config
from warmcli.build_clock import clocked
from warmcli.kernel_parts import (
    INCLUDE_PREFIXES,
    NATIVE_OPTION,
    PRE_INCLUDE_PREFIXES,
    checked_defines,
    checked_options,
    header_files,
    is_identifier,
    kind_of,
    not_identifier,
    opens_comment,
)
from warmcli.once import once as _once
from warmcli.printable import Pattern, refuse_unreadable
from warmcli.records import Record

# Scalar parameter letters and the numpy type each one is passed as; `P` is a pointer.
PARAM_SCALARS: dict[str, type[np.generic]] = {
    "b": np.int8, "B": np.uint8, "h": np.int16, "H": np.uint16, "i": np.int32, "I": np.uint32,
    "l": np.int64, "L": np.uint64, "q": np.int64, "Q": np.uint64, "?": np.bool_,
    "e": np.float16, "f": np.float32, "d": np.float64,
}  # fmt: skip
PARAM_LETTERS = frozenset({"P", *PARAM_SCALARS})
# A native numeric dtype's name is its kind's and its bits (`dtype_name`).
_KIND_NAMES = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}


def dtype_name(found: np.dtype[Any]) -> str:
    """`found.name` (numpy makes it in Python, ~5 µs) written here for a native builtin numeric
    dtype as numpy writes it: its kind's name and its bits (`bool` none); numpy's for others."""
    if found.isbuiltin == 1:
        kind = _KIND_NAMES.get(found.kind)
        if kind is not None:
            return kind if kind == "bool" else f"{kind}{found.itemsize * 8}"
    return found.name


# Each scalar letter's numpy type name (`dtype_name`: `.name` would cost ~70 µs at import).
PARAM_DTYPES = {letter: dtype_name(np.dtype(t)) for letter, t in PARAM_SCALARS.items()}
# What each letter stands for, as errors and the README say it.
PARAM_DESCRIPTIONS: dict[str, str] = {
    "P": "pointer: a buffer",
    **PARAM_DTYPES,
    "e": "float16, CUDA only",
}
# Letters the host backend cannot pass (ctypes has no half type).
CUDA_ONLY_LETTERS = frozenset("e")
# The most arguments ctypes passes in one call (`_argtypes_`): a host kernel's parameters.
HOST_MAX_PARAMS = 1024


def accepted_letters() -> str:
    """Every accepted parameter letter with its meaning, for an error message."""
    return ", ".join(f"{letter} ({what})" for letter, what in PARAM_DESCRIPTIONS.items())


# The longest entry: its symbol, 22 characters more, within `bundle.rows.MAX_NAME_CHARS`.
MAX_ENTRY = 4096 - 22


class Kernel(Record):
    """One kernel as the workload declares it (its source without an opening BOM, as gcc has it)."""

    source: str
    entry: str
    params: str = ""
    language: str = "c"
    options: tuple[str, ...] = ()
    defines: tuple[tuple[str, str], ...] = ()
    name: str = ""

    def __init__(
        self,
        source: str,
        entry: str,
        params: str = "",
        *,
        language: str = "c",
        options: Sequence[str] | None = (),
        defines: Mapping[str, object] | Iterable[tuple[str, object]] | None = None,
        name: str = "",
    ) -> None:
        if not is_identifier(entry):
            raise (ValueError if isinstance(entry, str) else TypeError)(not_identifier(entry))
        if len(entry) > MAX_ENTRY:
            raise ValueError(
                f"kernel entry {entry[:40]}... of {len(entry)} characters: at most {MAX_ENTRY} "
                "(its symbol in a bundle, warm_<key>_<entry>, holds at most 4096)"
            )
        if not isinstance(source, str):
            raise TypeError(
                f"kernel {entry}: source is text (a str), not {kind_of(source)}"
                + (": decode it first" if isinstance(source, bytes | bytearray) else "")
            )
        if not isinstance(params, str):
            raise ValueError(f"kernel {entry}: params is a string of letters, not {params!r}")
        bad = sorted(set(params) - PARAM_LETTERS)
        if bad:
            raise ValueError(
                f"kernel {entry}: unknown parameter letter(s) {', '.join(map(repr, bad))} in "
                f"{params!r}; accepted: {accepted_letters()}"
            )
        if language not in ("c", "cuda"):
            raise ValueError(f"kernel {entry}: language must be 'c' or 'cuda', not {language!r}")
        if language == "c" and CUDA_ONLY_LETTERS & set(params):
            raise ValueError(
                f"kernel {entry}: 'e' (float16) is for CUDA kernels only: the host backend "
                "calls C through ctypes, which has no half type (pass a float, 'f')"
            )
        if language == "c" and len(params) > HOST_MAX_PARAMS:
            raise ValueError(
                f"kernel {entry}: {len(params)} parameters, but the host backend calls C through "
                f"ctypes, which passes at most {HOST_MAX_PARAMS} arguments (pass them in a buffer)"
            )
        if not isinstance(name, str):
            raise TypeError(f"kernel {entry}: name is a label (a str), not {kind_of(name)}")
        norm = tuple(sorted(checked_defines(entry, defines)))
        given = checked_options(entry, options)
        texts = [("its source", source), ("its name", name)]
        texts += [(f"option {i + 1}", o) for i, o in enumerate(given)]
        for what, text in texts + [(f"define {k}", v) for k, v in norm]:
            refuse_unreadable(f"kernel {entry}", what, text)
        for k, v in norm:
            if "\n" in v or "\r" in v or opens_comment(v):
                raise ValueError(
                    f"kernel {entry}: define {k}={v!r} does not fit on its own line: "
                    "a value holds no line break and closes every comment it opens"
                )
        source = source.removeprefix("\ufeff")  # a file's BOM, as gcc skips it (not mid-unit)
        vars(self).update(source=source, entry=entry, params=params, language=language)
        vars(self).update(options=given, defines=norm, name=name or entry)

    def __getstate__(self) -> dict[str, object]:  # its fields, no `once` value of this machine
        return {k: v for k, v in vars(self).items() if k in self._names}

    def define(self, name: str, default: str | None = None) -> str | None:  # ("TILE")
        return dict(self.defines).get(name, default)  # its text as the compiler sees it

    @_once
    def names_include_folders(self) -> bool:
        """Whether an option names an include folder (`-I`...: `warmcli.headers`), once."""
        return any(o.startswith(INCLUDE_PREFIXES) for o in self.options)

    @_once
    def keyed_options(self) -> tuple[str, ...]:
        """Its options as its key takes them: no path of an include folder, a header read first
        (`warmcli.headers.keyed_options`: by content) or an object a host kernel links
        (`warmcli.linked.placeless_options`); nvcc's host compiler with a script's digest."""
        options = self.options
        if self.language == "cuda":  # (a host kernel's process never imports the module)
            from warmcli.wrapper_script import keyed_host_compiler, names_host_compiler

            if names_host_compiler(options):
                options = keyed_host_compiler(options)
        elif any("/" in option for option in options):  # by content, not its checkout's path
            from warmcli.linked import placeless_options

            options = placeless_options(options)
        if self.names_include_folders or any(o.startswith(PRE_INCLUDE_PREFIXES) for o in options):
            from warmcli.headers import keyed_options

            return keyed_options(options)
        return options

    @_once
    def reads_headers(self) -> bool:
        """Whether it names an include folder, a header read first (`-include`) or one by path."""
        return (
            self.names_include_folders
            or any(o.startswith(PRE_INCLUDE_PREFIXES) for o in self.options)
            or (_may_include(self.source) and _by_path(self.source))
        )

    @_once
    def tunes_native(self) -> bool:
        """Whether this host kernel's options tune for the building CPU (`-march=native`,
        `-mtune=`/`-mcpu=native`, joined too): its key then names it (`warmcli.backends.native`)."""
        options = self.options  # most have none: no generator made for them
        return (
            bool(options)
            and self.language == "c"
            and any("native" in o and NATIVE_OPTION.search(o) is not None for o in options)
        )

    @_once
    def content_hash(self) -> str:
        """Hash of what the workload wrote: independent of target and toolchain.

        Computed once per kernel (a kernel is immutable): every launch keys on it. The
        digest of `{"defines", "entry", "language", "options", "params", "source"}` as
        `_digest` writes it, written directly (a process serving thousands keys them all);
        its options are `keyed_options` (no include folder's path).
        """
        options, defines, source = self.options, self.defines, self.source
        if options:  # (most kernels name none: no further lookup for them)
            options = self.keyed_options
        if len(defines) == 1:  # one define: the common variant, written without a list
            ((name, value),) = defines
            written = f"[{_STRING(name)},{_STRING(value)}]"
        else:
            written = ",".join([f"[{_STRING(k)},{_STRING(v)}]" for k, v in defines])
        shape = (self.entry, self.language, options, self.params, source)
        tail = _TAILS.get(shape)  # what follows its defines: written once for its variants
        if tail is None:
            tail = (
                f'],"entry":{_STRING(self.entry)},"language":{_STRING(self.language)},'
                f'"options":[{",".join(map(_STRING, options))}],"params":{_STRING(self.params)},'
                f'"source":{_QUOTED.get(source) or _quote(source)}}}'
            )
            held = len(tail) + sum(map(len, _TAILS.values()))  # (the values summed in C)
            if len(_TAILS) < _MAX_QUOTED and held <= _MAX_TAIL:
                _TAILS[shape] = tail
        return hashlib.sha256(f'{{"defines":[{written}{tail}'.encode()).hexdigest()

    def _content(self) -> dict[str, object]:
        """What `content_hash` digests, as a JSON object."""
        return {
            "source": self.source,
            "entry": self.entry,
            "params": self.params,
            "language": self.language,
            "options": list(self.keyed_options),
            "defines": [list(d) for d in self.defines],
        }

    @property
    def label(self) -> str:
        """Short human name: its `name` (the entry unless `name=` was given) and defines."""
        defines = ",".join(f"{k}={v}" for k, v in self.defines)
        return f"{self.name}[{defines}]" if defines else self.name


# An `#include` by an absolute path or a macro, `__has_include`'s, a GCC dependency's (`_Pragma`'s).
_ABSOLUTE_INCLUDE = Pattern(
    r"(?m)(?:^[ \t]*(?:#|%:|\?\?=)[ \t]*(?:include(?:_next)?|import|pragma\s+GCC\s+dependency)"
    r'(?:[ \t]*["<]/|[ \t]+[A-Za-z_])|__has_include(?:_next)?[ \t]*\([ \t]*(?:["<]/|[A-Za-z_]))'
    r'|GCC\s+dependency\s*\\?["<]/'
)


@functools.lru_cache(maxsize=64)
def _may_include(source: str) -> bool:
    """Whether `source` may read a header (`#include`, `#import`, `__has_include`, a GCC
    dependency): a word, a backslash or `??/` (may splice one), once per source text."""
    return any(w in source for w in ("include", "import", "dependency", "\\", "??/"))


@functools.lru_cache(maxsize=64)
def _by_path(source: str) -> bool:
    """Whether `source` includes a header by its absolute path (or asks for one): once per source
    text (its variants share it), as the scan reads all of it (45 us for 9 kB); however its
    directive is spelled (`warmcli.directives`: lines spliced, comments)."""
    if _ABSOLUTE_INCLUDE.search(source) is not None:
        return True
    from warmcli.directives import spliced_text  # only where a plain scan found none

    text = spliced_text(source)
    return text is not None and _ABSOLUTE_INCLUDE.search(text) is not None


# `json.dumps(payload, sort_keys=True, separators=(",", ":"))`, without a new encoder per call.
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
_STRING = json.encoder.encode_basestring_ascii  # one string as `_ENCODE` writes it
# Texts keys repeat (an arch, a toolchain, a source many kernels share) as `_STRING` writes them,
# quoted once (`_QUOTED`), and a content hash's text after its defines by its other parts (`_TAILS`,
# a long source's too: its variants share it): at most `_MAX_QUOTED` of each, a quoted text of at
# most `_MAX_QUOTED_CHARS`, the tails of `_MAX_TAIL` in all; never evicted (others written anew).
_QUOTED: dict[str, str] = {}
_TAILS: dict[tuple[str, str, tuple[str, ...], str, str], str] = {}
_MAX_QUOTED, _MAX_QUOTED_CHARS, _MAX_TAIL = 128, 16 << 10, 4 << 20
_ENV_INCLUDES: dict[str, tuple[str, str]] = {}  # "nvrtc" -> `env_includes`, once a process
CC_SYSTEM: dict[str, Callable[[], tuple[str, ...]]] = {}  # a compiler's own folders, as told


def _quote(text: str) -> str:
    """`_STRING(text)`, kept in `_QUOTED` while it has room and the text is short enough."""
    quoted = _STRING(text)
    if len(_QUOTED) < _MAX_QUOTED and len(quoted) <= _MAX_QUOTED_CHARS:
        _QUOTED[text] = quoted
    return quoted


def _digest(payload: object) -> str:
    return hashlib.sha256(_ENCODE(payload).encode()).hexdigest()


def env_includes(language: str) -> tuple[str, str]:
    """The include folders cc ("c": `CPATH`, `C_INCLUDE_PATH`) or nvcc's gcc ("cuda": `CPLUS_...`)
    take, read now as a compiler would (a workload may set them), or NVRTC's (once a process)."""
    if language != "nvrtc":  # (a unit's, as its key read them: `config.read_in`)
        return config.compiler_include_paths(cxx=language != "c")
    if (found := _ENV_INCLUDES.get(language)) is None:
        from warmcli.compiler_includes import nvrtc_includes  # (a host start: none imported)

        found = _ENV_INCLUDES[language] = nvrtc_includes()
    return found


def included_headers(kernel: Kernel, toolchain: str = "") -> str:
    """The digest of the headers a kernel reaches in the include folders its options name, or its
    compiler's (`toolchain`: `warmcli.compiler_includes`), and of the files it links, or ""."""
    compiler = "c" if kernel.language == "c" else toolchain.partition(":")[0]
    env = env_includes(compiler if compiler in ("c", "nvrtc") else "cuda")
    headers, options, reads = "", kernel.options, kernel.reads_headers  # (most: no header)
    system = CC_SYSTEM.get(toolchain.partition(" +native ")[0])  # its own folders, if told
    if compiler == "nvcc":  # with `NVCC_*_FLAGS`' options; a `-ccbin`'s own folders
        from warmcli.compiler_includes import with_nvcc_flags

        options, reads, system = with_nvcc_flags(options, reads, system)
    may = compiler == "nvcc" or _may_include(kernel.source)  # (nvcc's cuda_runtime.h: CPATH's)
    if reads or (env != ("", "") and may):
        from warmcli.compiler_includes import compiler_search

        env, around, toolkit, reach = compiler_search(compiler, env, toolchain)
        if reads or reach:  # (a serving process never imports `warmcli.headers` otherwise)
            from warmcli.headers import headers_digest

            given = (env, around, toolkit, kernel.defines, compiler, system)
            headers = headers_digest(kernel.source, options, *given)
    if kernel.language == "c" and kernel.options:  # a host kernel: with the files it links
        from warmcli.linked import with_linked

        headers = with_linked(headers, kernel.options, config.library_path)
    return clocked(headers, kernel)  # (a kernel reading the clock: never served)


def kernel_key(kernel: Kernel, arch: str, toolchain_identity: str) -> str:
    """The content-addressed key of `kernel` compiled for `arch` by one toolchain: the digest
    of `{"arch", "kernel", "toolchain"}` as `_digest` writes it, written directly (every kernel
    a process serves is keyed), with `"headers"` for one that reaches headers keyed."""
    content = kernel.content_hash  # hex digits: quoted as they are
    if kernel.language == "c" and not kernel.options and not _may_include(kernel.source):
        src = "\0".join((kernel.source, *sum(kernel.defines, ())))  # (`clock_reason`'s pre-test)
        headers = clocked("", kernel) if "TIME" in src or "DATE__" in src or "\\" in src else ""
    else:
        headers = included_headers(kernel, toolchain_identity)
    headers = f'"headers":"{headers}",' if headers else ""
    text = (
        f'{{"arch":{_QUOTED.get(arch) or _quote(arch)},{headers}"kernel":"{content}",'
        f'"toolchain":{_QUOTED.get(toolchain_identity) or _quote(toolchain_identity)}}}'
    )
    return hashlib.sha256(text.encode()).hexdigest()


def key_components(kernel: Kernel, arch: str, toolchain_identity: str) -> dict[str, str]:
    """The parts a key is made of (and the headers it read, `header_files`), kept beside it so a
    miss can be explained, and its key recomputed (`kernel_parts.key_of`: `kernel` its hash)."""
    headers = included_headers(kernel, toolchain_identity)
    return {
        **({"headers": headers} if headers else {}),
        **({"header_files": f} if headers and (f := header_files(headers)) else {}),
        "kernel": kernel.content_hash,
        "source": hashlib.sha256(kernel.source.encode()).hexdigest(),
        "entry": kernel.entry,
        "options": json.dumps(list(kernel.keyed_options)),  # as keyed: folders unnamed
        "defines": json.dumps([list(d) for d in kernel.defines]),
        "arch": arch,
        "toolchain": toolchain_identity,
    }
