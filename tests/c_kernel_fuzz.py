"""A test helper: a seeded generator of C kernels and a differential check of warm's shared units.

`batch(seed, count)` makes `count` host kernels (`void entry(unsigned char *out)`, signature
`P`) mixing what C programmers write at file scope: typedefs (scalar, struct, function
pointer), tagged structs, unions and enums, enumerators as array sizes and case labels,
static helpers (inline, with attributes, indented, prototyped first, recursive, mutually
recursive), static tables, object and function-like macros (stringizing, pasting, naming
helpers or types), conditionals, `sizeof`/`offsetof`/`_Alignof`, compound literals,
designated initializers, `_Generic`, bit-fields, flexible array members, a variadic helper
behind `#include <stdarg.h>`, and some kernels that use a name only a neighbour declares
(they must fail as they fail alone). Names come from small pools, so kernels of a batch
collide (one helper name, different bodies; one typedef name, different types). Each
kernel writes what it computes into `out` byte by byte.

`differences(kernels, scratch)` compiles and runs each kernel alone with plain `cc` and
through warm's batch compiler (one shared unit), and returns every kernel whose outcome
differs (compiles or not, the bytes it writes). Run it by hand over many seeds:
`python tests/c_kernel_fuzz.py FIRST LAST`. Owns only the scratch folder it is given.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.host.building import BASE_FLAGS
from warmcli.backends.host.compiler import HostCompiler
from warmcli.kernel import Kernel, kernel_key

OUT = 2048  # bytes each kernel may write
HELPERS = ["helper", "mix", "clamp", "step", "scale", "norm"]  # entries too
TYPES = ["T", "real", "idx_t", "vec_t", "word"]
TAGS = ["node", "pair", "cell", "bits", "fam"]
ENUMERATORS = ["A", "B", "C", "N", "COUNT", "RED", "GREEN", "MAX"]
HELPER_STYLES = [
    *("plain", "inline", "attribute", "attr_after", "indented", "prototype", "recursive"),
    *("mutual", "global", "typed", "const_attr"),
]
SCALARS = ["int", "float", "double", "unsigned char", "long", "short", "unsigned"]


def put(expr: str) -> str:
    """A statement writing `expr` as 8 little-endian bytes of a long long."""
    return (
        f"{{ long long v_ = (long long)({expr}); "
        "for (int b_ = 0; b_ < 8; b_++) out[pos++] = (unsigned char)(v_ >> (8 * b_)); }"
    )


def putd(expr: str) -> str:
    """A statement writing `expr` as a double's 8 bytes."""
    return f"{{ double d_ = (double)({expr}); __builtin_memcpy(out + pos, &d_, 8); pos += 8; }}"


class _Kernel:
    """One kernel being generated: its file-scope text, its body, the names it took."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.head: list[str] = []
        self.tail: list[str] = []  # after the entry (a helper's definition after its prototype)
        self.body: list[str] = []
        self.taken: set[str] = set()
        self.types: list[str] = []  # typedef names of a scalar type it declared
        self.helpers: list[str] = []  # `int name(int)` helpers it declared
        self.macros: set[str] = set()
        self.defines: dict[str, object] = {}
        self.local = 0

    def name(self, pool: list[str]) -> str:
        free = [n for n in pool if n not in self.taken]
        chosen = self.rng.choice(free) if free else f"{pool[0]}{len(self.taken)}"
        self.taken.add(chosen)
        return chosen

    def var(self) -> str:
        self.local += 1
        return f"l{self.local}"

    def value(self) -> int:
        return self.rng.randint(-20, 40)


def _scalar_typedef(k: _Kernel) -> None:
    t, ty = k.name(TYPES), k.rng.choice(SCALARS)
    k.head.append(f"typedef {ty} {t};")
    v = k.var()
    k.body += [f"{t} {v} = ({t})({k.value()} * 1.75);", putd(v), put(f"sizeof({t})")]
    k.body.append(put(f"_Generic(({t})0, int: 1, float: 2, double: 3, long: 4, default: 5)"))
    k.types.append(t)


def _struct(k: _Kernel) -> None:
    tag = k.name(TAGS)
    packed = k.rng.random() < 0.2
    attr = " __attribute__((packed))" if packed else ""
    fields = f"char c; double b; int a; struct {tag} *next;"
    if k.rng.random() < 0.5:
        t = k.name(TYPES)
        k.head.append(f"typedef struct{attr} {tag} {{ {fields} }} {t};")
    else:
        t = f"struct {tag}"
        k.head.append(f"struct{attr} {tag} {{ {fields} }};")
    v = k.var()
    k.body += [
        f"{t} {v} = ({t}){{ .b = {k.value()} / 4.0, .a = {k.value()}, .next = 0 }};",
        put(f"{v}.a"),
        putd(f"{v}.b"),
        put(f"sizeof({t})"),
        put(f"__builtin_offsetof({t}, b)"),
        put(f"_Alignof({t})"),
    ]


def _union(k: _Kernel) -> None:
    tag = k.name(TAGS)
    k.head.append(f"union {tag} {{ float f; unsigned int u; unsigned char b[4]; }};")
    v = k.var()
    k.body += [f"union {tag} {v} = {{ .f = {k.value()} * 0.5f }};", put(f"{v}.u"), put(f"{v}.b[3]")]


def _enum(k: _Kernel) -> None:
    names = [k.name(ENUMERATORS) for _ in range(3)]
    first = k.rng.randint(0, 5)
    items = f"{names[0]} = {first}, {names[1]}, {names[2]} = {names[1]} + 2"
    style = k.rng.choice(["tag", "anon", "typedef"])
    if style == "tag":
        tag = k.name(TAGS)
        k.head.append(f"enum {tag} {{ {items} }};")
        typ = f"enum {tag}"
    elif style == "anon":
        k.head.append(f"enum {{ {items} }};")
        typ = "int"
    else:
        typ = k.name(TYPES)
        k.head.append(f"typedef enum {{ {items} }} {typ};")
    arr, x = k.var(), k.var()
    k.body += [
        f"int {arr}[{names[2]}] = {{ [{names[0]}] = 7 }};",
        put(f"sizeof {arr}"),
        put(f"{arr}[{names[0]}]"),
        f"{typ} {x} = ({typ}){k.rng.choice(names)};",
        f"switch ({x}) {{ case {names[0]}: {put(1)} break; case {names[1]}: {put(2)} break;"
        f" default: {put(3)} }}",
    ]


def _bitfield(k: _Kernel) -> None:
    tag = k.name(TAGS)
    k.head.append(f"struct {tag} {{ unsigned a : 3; unsigned b : 5; signed c : 4; }};")
    v = k.var()
    k.body += [
        f"struct {tag} {v} = {{ .a = {abs(k.value())}, .b = 33, .c = -3 }};",
        put(f"{v}.a"),
        put(f"{v}.b"),
        put(f"{v}.c"),
        put(f"sizeof(struct {tag})"),
    ]


def _flexible(k: _Kernel) -> None:
    tag = k.name(TAGS)
    k.head.append(f"struct {tag} {{ int n; double d[]; }};")
    k.body += [put(f"sizeof(struct {tag})"), put(f"__builtin_offsetof(struct {tag}, d)")]


def _helper(k: _Kernel) -> None:
    h = k.name(HELPERS)
    c, m = k.value(), k.rng.randint(1, 5)
    style = k.rng.choice(HELPER_STYLES)
    body = f"{{ return x * {m} + {c}; }}"
    if style == "plain":
        k.head.append(f"static int {h}(int x) {body}")
    elif style == "inline":
        k.head.append(f"static inline int {h}(int x)\n{body}")
    elif style == "attribute":
        k.head.append(f"static __attribute__((noinline)) int {h}(int x) {body}")
    elif style == "attr_after":
        k.head.append(f"static int {h}(int x) __attribute__((const));")
        k.tail.append(f"static int {h}(int x) {body}")
    elif style == "const_attr":
        k.head.append(f"__attribute__((always_inline)) static inline int {h}(int x) {body}")
    elif style == "indented":
        k.head.append(f"  static int {h}(int x) {body}")
    elif style == "prototype":
        k.head.append(f"static int {h}(int);")
        k.tail.append(f"static int {h}(int x) {body}")
    elif style == "recursive":
        k.head.append(f"static int {h}(int x) {{ return x <= 1 ? {m} : x + {h}(x - 1); }}")
    elif style == "mutual":
        other = k.name(HELPERS)
        k.head += [
            f"static int {other}(int x);",
            f"static int {h}(int x) {{ return x <= 0 ? {c} : {other}(x - 1) * 2; }}",
            f"static int {other}(int x) {{ return x <= 0 ? {m} : {h}(x - 1) + 1; }}",
        ]
    elif style == "global":  # (not libc's `step`: the process's would be called)
        h = f"g_{h}"
        k.taken.add(h)
        k.head.append(f"int {h}(int x) {body}")
    else:
        t = k.rng.choice(k.types) if k.types else "int"
        k.head.append(f"static {t} {h}({t} x) {{ return ({t})(x * {m} + {c}); }}")
    if style != "typed":  # `int name(int)`: a function pointer may take it
        k.helpers.append(h)
    k.body.append(put(f"{h}({k.rng.randint(0, 6)})"))


def _table(k: _Kernel) -> None:
    t = k.name([*HELPERS, "tbl", "lut"])
    values = ", ".join(str(k.value()) for _ in range(5))
    kind = k.rng.choice(["static const int", "static const double", "static int", "const int"])
    k.head.append(f"{kind} {t}[5] = {{ {values} }};")
    i = k.var()
    k.body.append(f"for (int {i} = 0; {i} < 5; {i}++) {putd(f'{t}[{i}] * 1.5')}")


def _macros(k: _Kernel) -> None:
    style = k.rng.choice(["object", "function", "stringize", "paste", "names", "cond", "define"])
    if style == "object" and "SCALE" not in k.macros:
        k.head.append(f"#define SCALE {k.rng.randint(1, 9)}")
        k.macros.add("SCALE")
        k.body.append(put("SCALE * 2"))
    elif style == "function" and "SQ" not in k.macros:
        k.head.append("#define SQ(x) ((x) * (x))")
        k.macros.add("SQ")
        k.body.append(put(f"SQ({k.value()} + 1)"))
    elif style == "stringize" and "STR" not in k.macros:
        k.head += ["#define STR(x) #x", "#define XSTR(x) STR(x)"]
        k.macros |= {"STR", "XSTR"}
        named = k.rng.choice(k.helpers + k.types + ["plain words", "SCALE", "__LINE__"])
        k.body += [put("sizeof(STR(hello world))"), put(f"sizeof(XSTR({named}))")]
    elif style == "paste" and "CAT" not in k.macros:
        k.head.append("#define CAT(a, b) a##b")
        k.macros.add("CAT")
        k.body.append(put("CAT(1, 2)"))
        if k.helpers:
            h = k.rng.choice(k.helpers)
            k.body.append(put(f"CAT({h[:2]}, {h[2:]})(3)"))
    elif style == "names" and "CALL" not in k.macros and (k.helpers or k.types):
        if k.helpers:
            k.head.append(f"#define CALL {k.rng.choice(k.helpers)}")
            k.body.append(put("CALL(4)"))
        else:
            k.head.append(f"#define CALL {k.rng.choice(k.types)}")
            k.body.append(put("sizeof(CALL)"))
        k.macros.add("CALL")
    elif style == "cond":
        m = k.rng.choice(["SCALE", "SQ", "TWICE"])
        k.body += [f"#ifdef {m}", put(1), "#else", put(2), "#endif"]
        k.body += ["#if defined(SCALE) && SCALE > 3", put(3), "#elif 1", put(4), "#endif"]
    elif "TWICE" not in k.macros:
        k.defines["TWICE"] = k.rng.randint(1, 4)
        k.head += ["#ifndef TWICE", "#define TWICE 1", "#endif"]
        k.macros.add("TWICE")
        k.body.append(put("TWICE * 2"))


def _generic(k: _Kernel) -> None:
    if "KIND" not in k.macros:
        k.macros.add("KIND")
        k.head.append("#define KIND(x) _Generic((x), int: 1, float: 2, double: 3, default: 0)")
        k.body += [put("KIND(1.0f)"), put("KIND('a')"), put("KIND(2.0)")]


def _variadic(k: _Kernel) -> None:
    h = k.name(HELPERS)
    k.head = ["#include <stdarg.h>", *k.head]
    k.head.append(
        f"static int {h}(int n, ...) {{ va_list ap; va_start(ap, n); int s = 0;"
        " for (int i = 0; i < n; i++) s += va_arg(ap, int); va_end(ap); return s; }"
    )
    k.body.append(put(f"{h}(3, {k.value()}, 2, 3)"))


def _function_pointer(k: _Kernel) -> None:
    t = k.name(TYPES)
    k.head.append(f"typedef int (*{t})(int);")
    if k.helpers:
        v = k.var()
        k.body += [f"{t} {v} = {k.helpers[-1]};", put(f"{v}(5)")]


def _static_state(k: _Kernel) -> None:
    v = k.name(["counter", "total", "seed"])
    k.head.append(f"static int {v} = {k.value()};")
    k.body += [f"{v} += 3;", put(v)]


def _misc(k: _Kernel) -> None:
    k.body += [put("__LINE__"), put("sizeof(__func__)")]
    if k.types:
        k.head.append(f'_Static_assert(sizeof({k.types[0]}) > 0, "size");')


def _leak(k: _Kernel) -> None:
    """A name only a neighbour may declare: alone this does not compile."""
    pick = k.rng.choice(
        [f"sizeof({t})" for t in TYPES] + [f"sizeof(struct {t})" for t in TAGS] + list(ENUMERATORS)
    )
    if not set(pick.replace("(", " ").replace(")", " ").split()) & k.taken:
        k.body.append(put(pick))


CONSTRUCTS: list[tuple[float, Callable[[_Kernel], None]]] = [
    (3, _scalar_typedef), (3, _struct), (1, _union), (3, _enum), (1, _bitfield),
    (1, _flexible), (5, _helper), (2, _table), (5, _macros), (1, _generic),
    (0.3, _variadic), (0.3, _function_pointer), (0.5, _static_state), (0.3, _misc),
    (0.4, _leak),
]  # fmt: skip


def kernel(rng: random.Random, index: int) -> Kernel:
    """One generated kernel."""
    k = _Kernel(rng)
    weights = [w for w, _ in CONSTRUCTS]
    for _ in range(rng.randint(2, 7)):
        rng.choices(CONSTRUCTS, weights)[0][1](k)
    entry = f"k{index}" if rng.random() < 0.8 else k.name([*HELPERS, "run", "main_k"])
    lines = [*k.head, f"void {entry}(unsigned char *out) {{", "    int pos = 0;"]
    lines += [f"    {line}" if not line.startswith("#") else line for line in k.body]
    lines += ["    (void)pos;", "}", *k.tail]
    return Kernel("\n".join(lines) + "\n", entry, "P", defines=k.defines)


def batch(seed: int, count: int) -> list[Kernel]:
    """`count` kernels of one seed."""
    rng = random.Random(seed)
    return [kernel(rng, i) for i in range(count)]


def _run(library: Path, symbol: str) -> bytes:
    lib = ctypes.CDLL(str(library))
    out = ctypes.create_string_buffer(OUT)
    getattr(lib, symbol)(out)
    return out.raw


def alone(k: Kernel, scratch: Path) -> bytes | None:
    """What `k` writes built alone by `cc` (None: it does not compile or load; `-z defs`: a
    function nothing defines fails here, not at its first call). Built once per `scratch`:
    a second call for the same source and defines reuses the library (or the failure)."""
    digest = hashlib.sha256(repr((k.source, k.defines)).encode()).hexdigest()[:16]
    source, library = scratch / f"{digest}.c", scratch / f"{digest}.so"
    failed = scratch / f"{digest}.failed"
    if failed.exists():
        return None
    if not library.exists():
        source.write_text(k.source)
        defines = [f"-D{name}={value}" for name, value in k.defines]
        command = ["cc", *BASE_FLAGS, "-Wl,-z,defs", *defines, "-o", library, source, "-lm"]
        if subprocess.run(command, capture_output=True).returncode != 0:
            failed.touch()
            return None
    try:
        return _run(library, k.entry)
    except AttributeError:  # it exports no such function (a `static` entry)
        return None


def batched(kernels: list[Kernel], scratch: Path) -> list[bytes | None]:
    """What each kernel writes built through warm's batch compiler (one job: one unit)."""
    ident = HostCompiler().toolchain.identity
    units = [CompileUnit(kernel_key(k, "host", ident), k, "host") for k in kernels]
    result = compile_batch(HostCompiler(), units, jobs=1)
    outputs: list[bytes | None] = []
    for unit in units:
        built = result.built.get(unit.key)
        if built is None:
            outputs.append(None)
            continue
        library = scratch / f"warm-{built.sha256[:16]}.so"
        if not library.exists():
            library.write_bytes(built.binary)
        outputs.append(_run(library, built.symbols[unit.key]))
    return outputs


def differences(kernels: list[Kernel], scratch: Path) -> list[tuple[Kernel, str]]:
    """Each kernel whose outcome through warm differs from plain `cc`'s, with how."""
    found = []
    for k, got in zip(kernels, batched(kernels, scratch), strict=True):
        want = alone(k, scratch)
        if (want is None) != (got is None):
            how = "compiles only alone" if got is None else "compiles only through warm"
            found.append((k, how))
        elif want != got:
            found.append((k, "writes other bytes"))
    return found


if __name__ == "__main__":  # python tests/c_kernel_fuzz.py FIRST LAST [COUNT]
    import tempfile

    first, last = int(sys.argv[1]), int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    for seed in range(first, last + 1):
        with tempfile.TemporaryDirectory() as tmp:
            for k, how in differences(batch(seed, count), Path(tmp)):
                sys.stdout.write(f"seed {seed}: {k.entry} {how}\n{k.source}\n{k.defines}\n\n")
