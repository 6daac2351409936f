"""serve60: a served kernel's per-kernel path made cheaper, its verdicts unchanged.

`kernel_key`'s clock pre-test reads the source and each define's value as they are (no repr
of the defines tuple): a value whose repr escapes (a tab, a quote) is no longer handed to
`build_clock.clocked`, while every value that spells a clock macro, or a splice that may make
one, still is, and keys its kernel apart. A served launch's arguments are still checked
before its kernel is loaded, and a served kernel still registers and settles once.
"""

from __future__ import annotations

import pytest

import warmcli.kernel as kernel_module
from warmcli import Kernel
from warmcli.backends.base import LaunchError
from warmcli.backends.launch_args import check_before_load
from warmcli.execution.statistics import Registrations, StatisticsCollector

SOURCE = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
TOOLCHAIN = "cc:test 1.0"


def _clock_calls(monkeypatch: pytest.MonkeyPatch, defines: dict[str, str]) -> list[str]:
    """The kernels `kernel_key` handed to `clocked` (the exact, slower test) for `defines`."""
    calls: list[str] = []
    real = kernel_module.clocked

    def spy(headers: str, kernel: Kernel) -> str:
        calls.append(kernel.label)
        return real(headers, kernel)

    monkeypatch.setattr(kernel_module, "clocked", spy)
    kernel_module.kernel_key(Kernel(SOURCE, "touch", "Pi", defines=defines), "x86_64", TOOLCHAIN)
    return calls


@pytest.mark.parametrize("value", ["a\tb", "it's", 'say "x"', "é", "1"])
def test_a_define_whose_repr_escapes_is_not_tested_again(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # Before: the pre-test read the defines tuple's repr, whose escapes (`\\t`) hold a
    # backslash, so such a kernel took `clocked`'s exact test (failed for the tab).
    assert _clock_calls(monkeypatch, {"V": value}) == []
    assert _clock_calls(monkeypatch, {"A": "1", "V": value}) == []


@pytest.mark.parametrize(
    "defines",
    [
        {"V": "__TIME__"},
        {"V": "__DATE__"},
        {"A": "1", "V": "__TIMESTAMP__"},
    ],
)
def test_a_define_that_spells_a_clock_still_is_keyed_apart(
    monkeypatch: pytest.MonkeyPatch, defines: dict[str, str]
) -> None:
    assert len(_clock_calls(monkeypatch, defines)) == 1
    clocked = Kernel(SOURCE, "touch", "Pi", defines=defines)
    key = kernel_module.kernel_key(clocked, "x86_64", TOOLCHAIN)
    monkeypatch.setattr(kernel_module, "clocked", lambda headers, kernel: headers)
    assert kernel_module.kernel_key(clocked, "x86_64", TOOLCHAIN) != key  # its own marker


@pytest.mark.parametrize("value", ["a\\b", "1\\"])
def test_a_define_with_a_backslash_is_still_tested_exactly(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # a backslash may splice a line (`clock_reason`'s own pre-test): `clocked` decides (a
    # value holds no line break, so these spell no clock and key as they are)
    assert len(_clock_calls(monkeypatch, {"V": value})) == 1


def test_arguments_still_checked_before_load() -> None:
    from warmcli.backends.host.device import HostDevice

    device = HostDevice()
    try:
        buffer = device.allocate((4,), "int32")
        kernel = Kernel(SOURCE, "touch", "Pi")
        check_before_load(kernel, device.id, (buffer, 1))  # passes in its one frame
        for wrong in ((buffer, 2**31), (buffer, 1.0), (1, 1), (buffer,), (buffer, 1, 2)):
            with pytest.raises(LaunchError):
                check_before_load(kernel, device.id, wrong)
    finally:
        device.close()


def test_a_served_kernel_registers_and_settles_once() -> None:
    collector = StatisticsCollector()
    registrations = Registrations("host", "compilation")
    for key in ("a" * 64, "b" * 64, "a" * 64):
        registrations.register_settled(collector, key, "loaded")
    compilation = collector.reader().total().compilation
    assert (compilation.registered, compilation.loaded) == (2, 2)
    with pytest.raises(ValueError, match="no outcome"):
        registrations.register_settled(collector, "c" * 64, "eaten")
    assert not collector._lock.locked() and not registrations._lock.locked()
