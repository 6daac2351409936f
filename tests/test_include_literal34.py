"""A character literal right after a word is a literal to the include scan, not a digit
separator: C23's and C++14's `1'000` separates digits inside a number only, but the scan
took every `'` after a letter or digit for one, so in `return'/*';` (a keyword, then the
literal `'/*'`) it read `/*` as a comment's start and an include below it as commented out:
the kernel was keyed without that header, and after the header changed a production
process was served the stale build."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmcli.headers import _includes
from warmcli.kernel import Kernel, kernel_key

AFTER_A_WORD = {
    "return": "char f(void) { return'/*'; }",
    "case": "int g(int c) { switch (c) { case'/*': return 1; } return 0; }",
    "sizeof": "int h(void) { return sizeof'/*'; }",
    "identifier with digits": "#define C2 +\nint i(void) { return 1 C2'/*'; }",
}
BODY = "\nvoid k(int *p, int n) { if (n > 0) p[0] = V; }\n/* a comment's end: */\n"


@pytest.mark.parametrize("word", list(AFTER_A_WORD))
def test_a_literal_after_a_word_hides_no_include(tmp_path: Path, word: str) -> None:
    source = AFTER_A_WORD[word] + '\n#include \\\n"k.h"' + BODY
    assert _includes(source.encode()) == (("k.h", True),)
    header = tmp_path / "k.h"
    header.write_text("#define V 1\n")

    def key() -> str:
        kernel = Kernel(source, "k", "Pi", options=(f"-I{tmp_path}",))
        return kernel_key(kernel, "host", "cc-test")

    before = key()
    header.write_text("#define V 2\n")
    assert key() != before, word


@pytest.mark.parametrize(
    "number", ["1'000", "0x1'ff", "0b1'0", "1'0.5'0e+1'0", ".5'0", "1'000'000ull"]
)
def test_digit_separators_in_a_number_stay_no_quote(number: str) -> None:
    source = f"int x = {number} + c('/*');\n#include \\\n\"k.h\"\nint y; /* */\n"
    assert _includes(source.encode()) == (("k.h", True),), number
