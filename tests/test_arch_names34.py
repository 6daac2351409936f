"""The architecture and version names serving reads are ASCII and whole: Python's `\\d`
matched any script's digits (`int("9٠")` is 90) and `$` a trailing newline, so an arch
named `compute_9٠` or `compute_90\\n` in a bundle's row read as compute_90's PTX, and a
driver version `12.8\\n` as 12.8 (pure logic: the functions serving decides with)."""

from __future__ import annotations

import pytest

from warmcli.backends.serving import driver_release, virtual_sm


@pytest.mark.parametrize(
    "arch", ["compute_9\u0660", "compute_90\n", "compute_\u0669\u0660", "compute_090"]
)
def test_an_arch_not_spelled_in_ascii_whole_is_no_virtual_arch(arch: str) -> None:
    assert virtual_sm(arch) is None


def test_virtual_archs_read_as_before() -> None:
    assert [virtual_sm(a) for a in ("compute_90", "compute_100", "sm_90")] == [90, 100, None]


@pytest.mark.parametrize("driver", ["12.8\n", "1\u0662.8", "12.\u0668"])
def test_a_driver_version_not_spelled_in_ascii_whole_is_unknown(driver: str) -> None:
    assert driver_release(driver) is None
    assert driver_release("12.8") == (12, 8)
