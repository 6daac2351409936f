"""Stop 60's small mends to environment reading, as pure logic of `warmcli.config`."""

from __future__ import annotations

import os

from warmcli import config


def test_a_blank_trusted_keys_entry_is_none_as_an_empty_one_is_pure_logic() -> None:
    """`a.pub: :b.pub` (a variable unset between two) failed `WARM_TRUSTED_KEYS:  : cannot read
    key`, where `a.pub::b.pub` was read as two keys (stop 60)."""
    for text in ("a.pub: :b.pub", "a.pub::b.pub", " a.pub:b.pub"):
        given = {"WARM_TRUSTED_KEYS": text.replace(":", os.pathsep)}
        assert [p.strip() for p in config.trusted_keys(given) or []] == ["a.pub", "b.pub"]
