"""`errors.headline`: the line of a compiler's log shown for a failed compile is its error
line, whatever comes before it (gcc's context lines, a warning), in gcc's, clang's,
nvcc's and NVRTC's formats. Pure logic over real logs' shapes."""

from __future__ import annotations

from warmcli.errors import headline


def test_the_error_line_is_shown_not_a_warning_before_it() -> None:
    gcc = (
        "k.c: In function 'warm_k':\n"
        "k.c:4:14: warning: initialization of 'int *' from incompatible pointer type\n"
        "    4 |     int *p = &x;\n"
        "k.c:5:3: error: expected ';' before '}' token\n"
    )
    assert headline(gcc) == "k.c:5:3: error: expected ';' before '}' token"
    nvcc = (
        'z.cu:1:2: warning: #warning "deprecated path" [-Wcpp]\n'
        'z.cu(2): error: identifier "undefined_thing" is undefined\n'
        '1 error detected in the compilation of "z.cu".\n'
    )
    assert headline(nvcc) == 'z.cu(2): error: identifier "undefined_thing" is undefined'
    assert headline("cc1: fatal error: k.c: No such file or directory") == (
        "cc1: fatal error: k.c: No such file or directory"
    )
    assert headline("In file included from k.c:1:\nx.h:3:1: fatal error: y.h: missing") == (
        "x.h:3:1: fatal error: y.h: missing"
    )


def test_a_text_with_no_error_line_shows_its_first_line_past_gccs_context() -> None:
    assert headline("add.c: In function 'f':\nsomething odd happened\n") == (
        "something odd happened"
    )
    assert headline("launch raised ValueError") == "launch raised ValueError"
    assert headline("") == ""
