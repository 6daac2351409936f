"""hotfloor39b: a served process makes no more at import than a hit needs (the int keyed in
decimal is judged by its bit length, not by a power of ten computed at import)."""

from __future__ import annotations


def test_an_int_keys_in_decimal_below_ten_to_the_4300_and_in_hex_from_it() -> None:
    from warmcli.runtime.tune_spec import describe_input

    limit = 10**4300
    for number in (0, -1, 2**14284, 2**14285 - 1, limit - 1, limit, limit + 1, 2**14286):
        for value in (number, -number):
            below = -limit < value < limit  # (4,300 digits at most: Python's default limit)
            assert describe_input(value, None) == (str(value) if below else hex(value)), value
