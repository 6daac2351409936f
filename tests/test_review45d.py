"""Hostile review of review 45b's computed includes and remote 45's s3:// deadline (review 45d).

Each case here was a wrong result served from a bundle, or keying that grew without bound:
- a function-like macro: `-DCFG="a.h"` then, in the source, `#undef CFG`, `#define CFG(x) x`,
  `#include CFG("b.h")` (gcc reads `b.h`), or `-D'CFG(x)=x'` with the source's fallback
  `#define CFG "a.h"`: the key followed `a.h` only (the function-like definition was skipped),
  so an edited `b.h` was served the old build; now a function-like definition of the macro
  (a `#define` line or a `-D` option) makes the kernel unkeyed, never served;
- a chain of headers each computing the next (`#define H1 "h1.h"`, `#include H1`, ...): each
  link read every header reached so far again, all at once in memory (200 headers of 100 kB
  took 22 s to key, 400 took 87 s: quadratic); now each file is read once.
Real CLI (each `warm` command a fork of a process that imported the CLI once,
`tests/forked_cli.py`: an unkeyed kernel's token is made on first use, in the fork), real
SQLite bundles, the system C compiler; no fakes.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from raw_store import RawStore
from test_review45b import _key, _served_and_cold, _unkeyed, _warmed

from warmcli.bundle.remote import RemoteError, fetch
from warmcli.headers import headers_digest

MAX_GIVEN_UP = 16  # (warmcli.bundle.remote_s3's: threads given up on alive at once)

REDEFINED = '#undef CFG\n#define CFG(x) x\n#include CFG("b.h")\nvoid f(float *x) { x[0] = VAL; }\n'


def _headers(tmp_path: Path) -> Path:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "a.h").write_text("#define VAL 1\n")
    (inc / "b.h").write_text("#define VAL 2\n")
    return inc


def test_a_function_like_redefinition_is_never_served(warm: Warm, tmp_path: Path) -> None:
    """`-DCFG="a.h"`, the source's `#define CFG(x) x` and `#include CFG("b.h")`: gcc reads
    b.h, the key followed a.h: an edited b.h was served the old build."""
    inc = _headers(tmp_path)
    script = _warmed(warm, tmp_path, REDEFINED, ('-DCFG="a.h"', f"-I{inc}"))
    (inc / "b.h").write_text("#define VAL 3\n")
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "3.0", cold
    assert served != "2.0", "the old build served for an edited header a macro's argument names"
    assert "strict mode" in served and "no plain header name (CFG)" in served, served


def test_a_function_like_define_option_is_never_keyed(tmp_path: Path) -> None:
    """`-D'CFG(x)=x'` and the source's fallback `#define CFG "a.h"`: gcc reads b.h; the
    option's value was kept under the name `CFG(x)`, so the key followed a.h alone."""
    inc = _headers(tmp_path)
    source = '#ifndef CFG\n#define CFG "a.h"\n#endif\n#include CFG("b.h")\n'
    assert "no plain header name (CFG)" in _unkeyed(source, ("-DCFG(x)=x", f"-I{inc}"))
    assert "no plain header name (CFG)" in _unkeyed(REDEFINED, ('-DCFG="a.h"', f"-I{inc}"))
    # an object-like one (`#define CFG "a.h"`, `-DCFG="a.h"`) keys as before
    assert _unkeyed('#define CFG "a.h"\n#include CFG\n', (f"-I{inc}",)) == ""
    assert _unkeyed("#include CFG\n", ('-DCFG="a.h"', f"-I{inc}")) == ""


def _counted(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[object, ...]]:
    """The arguments of each call of `warmcli.computed_includes`' `name` from now on (each
    call made as it was: counted, not replaced)."""
    from warmcli import computed_includes

    calls: list[tuple[object, ...]] = []
    real = getattr(computed_includes, name)

    def counted(*args: object) -> object:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(computed_includes, name, counted)
    return calls


def test_a_chain_of_computed_includes_keys_in_linear_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """150 headers of 100 kB, each `#include`ing the next by a macro it defines: each link read
    every header reached so far again (~12 s here: 11,325 reads); once each now (150). Counted
    as the headers' reads for their macros' values, not timed."""
    inc = tmp_path / "inc"
    inc.mkdir()
    count, filler = 150, "/*" + "x" * 100_000 + "*/\n"
    for i in range(count):
        link = f'#define H{i + 1} "h{i + 1}.h"\n#include H{i + 1}\n' if i + 1 < count else ""
        (inc / f"h{i}.h").write_text(link + filler + f"#define VAL{i} {i}\n")
    source = '#define H0 "h0.h"\n#include H0\n'
    reads = _counted(monkeypatch, "file_head")
    first = headers_digest(source, (f"-I{inc}",))
    read = sorted(str(args[0]) for args in reads)
    assert read == sorted(str(inc / f"h{i}.h") for i in range(count)), len(read)  # each once
    assert first and _unkeyed(source, (f"-I{inc}",)) == ""
    (inc / f"h{count - 1}.h").write_text("#define VAL 0\n")  # the last link is followed
    assert headers_digest(source, (f"-I{inc}",)) != first


def test_directives_spelled_with_a_lone_carriage_return_or_form_feed_are_keyed(
    tmp_path: Path,
) -> None:
    """GCC ends a line at a lone `\\r` and reads `\\f`, `\\v` in a directive as blanks (it
    builds each of these, reading b.h): `int y;\\r#include "b.h"`, `#include\\f"b.h"`,
    `#\\vdefine CFG "b.h"` past `-DCFG="a.h"`: the scans read one line, or no directive, and
    the key did not follow b.h: an edited b.h was served the old build."""
    inc = _headers(tmp_path)
    given = ('-DCFG="a.h"', f"-I{inc}")
    cases: list[tuple[str, tuple[str, ...]]] = [
        ('int y;\r#include "b.h"\n', (f"-I{inc}",)),
        ('#include\f"b.h"\n', (f"-I{inc}",)),
        ('\v#include "b.h"\n', (f"-I{inc}",)),
        ('#\vdefine CFG "b.h"\n#include CFG\n', given),
        ('\f#define CFG "b.h"\n#include CFG\n', given),
        ('int y;\r#define CFG "b.h"\n#include CFG\n', given),
        ("int y;\r#include CFG\n", ('-DCFG="b.h"', f"-I{inc}")),
    ]
    before = [_key(source, options) for source, options in cases]
    (inc / "b.h").write_text("#define VAL 3\n")
    after = [_key(source, options) for source, options in cases]
    same = [source for (source, _), b, a in zip(cases, before, after, strict=True) if b == a]
    assert not same, f"an edited b.h kept the key of {same}"


def test_a_macro_of_many_values_keys_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header giving CFG 40,000 values no file has (`#define CFG "xN.h"`): each was looked
    up in each folder with no bound (the 512-header bound counted files found); now past
    32,768 names the kernel is unkeyed. A chain of 300 computed links beside 30,000 values of
    one macro told each of them again at each link (7.6 s); once now (counted, not timed)."""
    inc = tmp_path / "inc"
    inc.mkdir()
    many = "".join(f'#define CFG "x{i}.h"\n' for i in range(40_000)) + "#include CFG\n"
    (inc / "many.h").write_text(many)
    assert "more than 512 headers" in _unkeyed('#include "many.h"\n', (f"-I{inc}",))
    count = 300
    for i in range(count):
        link = f'#define H{i + 1} "h{i + 1}.h"\n#include H{i + 1}\n' if i + 1 < count else ""
        (inc / f"h{i}.h").write_text(link)
    values = "".join(f'#define CFG "x{i}.h"\n' for i in range(30_000))
    (inc / "v.h").write_text(values + "#include CFG\n")
    source = '#include "v.h"\n#define H0 "h0.h"\n#include H0\n'
    told = _counted(monkeypatch, "named_headers")
    assert headers_digest(source, (f"-I{inc}",))
    assert [name for name, _ in told].count("CFG") == 1  # (17 with its told-once check gone)


def test_past_the_define_bound_a_computed_include_is_unkeyed(tmp_path: Path) -> None:
    """Three headers of 175,000 `#define` lines each (3.5 MB: each within the 4 MiB scanned
    of a file), the last computing an include: their values were all held (hundreds of MB
    for 512 such headers); past 524,288 in all the kernel is unkeyed. (Four of 150,000 read
    450,000 lines' values before the bound, 350,000 here: ~0.7 CPU-s less.)"""
    inc = tmp_path / "inc"
    inc.mkdir()
    for f in range(3):
        link = f'#include "m{f + 1}.h"\n' if f < 2 else '#define CFG "a.h"\n#include CFG\n'
        lines = "".join(f"#define V{f}_{i} 1\n" for i in range(175_000))
        (inc / f"m{f}.h").write_text(link + lines)
    assert "past 524,288 #define lines" in _unkeyed('#include "m0.h"\n', (f"-I{inc}",))
    (inc / "m2.h").write_text('#define CFG "a.h"\n#include CFG\n')  # fewer: keyed
    (inc / "a.h").write_text("#define VAL 1\n")
    assert _unkeyed('#include "m0.h"\n', (f"-I{inc}",)) == ""


def test_a_macro_a_computed_header_defines_is_followed(tmp_path: Path) -> None:
    """`-DCFG="b.h"`, `#include CFG`, `#include CFG2`, where b.h (reached only through CFG)
    defines CFG2 "c.h": the first pass found no value of CFG2 and marked the kernel unkeyed
    (never served) though b.h then told it; now the marker waits until nothing more is found."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "b.h").write_text('#define CFG2 "c.h"\n')
    (inc / "c.h").write_text("#define VAL 1\n")
    source, options = "#include CFG\n#include CFG2\n", ('-DCFG="b.h"', f"-I{inc}")
    assert _unkeyed(source, options) == ""
    first = _key(source, options)
    (inc / "c.h").write_text("#define VAL 2\n")
    assert _key(source, options) != first
    assert "(CFG3)" in _unkeyed(source + "#include CFG3\n", options)  # none gives it: unkeyed


def test_a_define_cc_hands_its_preprocessor_is_followed(tmp_path: Path) -> None:
    """`-Wp,-DCFG="b.h"` (or `-Xpreprocessor -D -Xpreprocessor CFG="b.h"`) and the source's
    fallback `#define CFG "a.h"`: gcc reads b.h, the key followed a.h only (those options were
    not read for values): an edited b.h was served the old build."""
    inc = _headers(tmp_path)
    source = '#ifndef CFG\n#define CFG "a.h"\n#endif\n#include CFG\n'
    handed = [
        ('-Wp,-DCFG="b.h"', f"-I{inc}"),
        ("-Xpreprocessor", "-D", "-Xpreprocessor", 'CFG="b.h"', f"-I{inc}"),
    ]
    before = [_key(source, options) for options in handed]
    (inc / "b.h").write_text("#define VAL 3\n")
    after = [_key(source, options) for options in handed]
    assert before[0] != after[0] and before[1] != after[1], "an edited b.h kept the key"


def test_a_computed_include_a_raw_string_hides_from_the_spliced_scan_is_followed(
    tmp_path: Path,
) -> None:
    """gcc's C raw string `R"(` with `/*)"` on its next line: no comment to gcc (it builds it,
    reading b.h), but the spliced scan took `/*` for one and saw neither `#define CFG "b.h"`
    nor `#include CFG` below it: the key followed nothing (not even unkeyed), so an edited
    b.h was served the old build. Now what is written is read too."""
    inc = _headers(tmp_path)
    source = 'const char *s = R"(\n/*)";\n#define CFG "b.h"\n#include CFG\n/* */\n'
    options = ('-DCFG="a.h"', f"-I{inc}")
    first = _key(source, options)
    (inc / "b.h").write_text("#define VAL 3\n")
    assert _key(source, options) != first, "an edited b.h kept the key"
    # a define's own comment, or its value on a spliced line, still keys as one plain value
    for spelled in ('#define CFG "a.h" /* the config */\n', '#define CFG \\\n  "a.h"\n'):
        assert _unkeyed(spelled + "#include CFG\n", (f"-I{inc}",)) == "", spelled


class _Dripping(RawStore):
    """An S3-speaking store whose every answer's headers drip a byte each 0.1 s (faster than
    any read's wait) until `stop` is set."""

    threaded = True

    def __init__(self) -> None:
        self.stop = threading.Event()
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
        while not self.stop.wait(0.1):
            conn.sendall(b"a")


def test_fetches_given_up_on_a_dripping_s3_store_hold_bounded_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running process whose s3:// fetches were each given up at the deadline: each
    left its thread and socket waiting on the store for as long as it dripped (20 fetches:
    20 threads, 20 sockets, growing without bound); now at most MAX_GIVEN_UP, past them a
    fetch is refused at once (one line), and asked again once they ended."""
    pytest.importorskip("boto3")
    store = _Dripping()
    env = {
        "WARM_HOME": str(tmp_path / "home"), "AWS_ENDPOINT_URL": store.endpoint,
        "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1", "WARM_REMOTE_DEADLINE": "0.3",
    }  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    said = []
    try:
        for i in range(MAX_GIVEN_UP + 3):
            with pytest.raises(RemoteError) as caught:
                fetch(f"s3://fleet/b{i}.warm")
            said.append(str(caught.value))
        left = [t for t in threading.enumerate() if t.name.startswith("warm-s3")]
        assert len(left) <= MAX_GIVEN_UP, f"{len(left)} threads left waiting on the store"
        assert "WARM_REMOTE_DEADLINE" in said[0] and "not asked" in said[-1], said[-1]
    finally:
        store.stop.set()
        store.close()
    for thread in left:  # each ends at its next read's wait
        thread.join(15)
    with pytest.raises(RemoteError, match=r"unreachable|not done"):  # asked again
        fetch("s3://fleet/again.warm")


class _Garbled(RawStore):
    """An S3-speaking store whose answers hold a header botocore cannot parse (`field`)."""

    threaded = True
    field = b""

    def answer(self, conn: socket.socket, request: bytes) -> None:
        body = b"" if request.startswith(b"HEAD") else b"hello"
        head = b'HTTP/1.1 200 OK\r\nETag: "x"\r\nContent-Length: 5\r\n%s\r\n\r\n' % self.field
        conn.sendall(head + body)


def test_an_s3_answer_botocore_cannot_parse_is_one_line(warm: Warm, tmp_path: Path) -> None:
    """A store answering `x-amz-missing-meta: abc` (or `Last-Modified: garbage`): botocore's
    ValueError (no BotoCoreError) left `warm pull` with a traceback (exit 1), and a production
    process's fetch with an error no caller expects; now a one-line RemoteError (exit 2)."""
    pytest.importorskip("boto3")
    store = _Garbled()
    env = {
        "WARM_HOME": str(tmp_path / "home"), "AWS_ENDPOINT_URL": store.endpoint,
        "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1", "WARM_REMOTE_DEADLINE": "5",
    }  # fmt: skip
    try:
        for field in (b"x-amz-missing-meta: abc", b"Last-Modified: garbage"):
            store.field = field
            proc = warm.with_env(**env)("pull", "s3://fleet/b.warm", tmp_path / "o.warm")
            assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-800:]
            assert "answer is unreadable" in proc.stderr, proc.stderr
    finally:
        store.close()
