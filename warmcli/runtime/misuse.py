"""One-line `TypeError`s for a runtime call handed the wrong kind of object (a `str` for the
kernel, a `Kernel` for the tunable, an `int` for the stream), said where the call's own use
of it failed (an `AttributeError`), so a correct call pays nothing for the check.

It owns no state, never prints, and never raises for an argument of the right kind (then
the caller re-raises its own error).
"""

from __future__ import annotations


def refuse_wrong_kinds(call: str, **given: object) -> None:
    """Raise the `TypeError` naming the first of `given` (`kernel`, `tunable`, `stream`,
    `buffer`)
    that is not of its kind; return when each is (the failure was another)."""
    from warmcli.backends.base import Buffer, Stream
    from warmcli.kernel import Kernel
    from warmcli.runtime.tune import Tunable

    kinds: dict[str, tuple[type | tuple[type, ...], str]] = {
        "kernel": (Kernel, "a Kernel"),
        "tunable": (Tunable, "a Tunable"),
        "stream": ((Stream, type(None)), "a stream from rt.stream()"),
        "buffer": (Buffer, "a Buffer (from rt.buffer, rt.upload or rt.wrap)"),
    }
    for name, value in given.items():
        kind, said = kinds[name]
        if not isinstance(value, kind):
            raise TypeError(f"{call}: {name} must be {said}, not {type(value).__name__}")


def refuse_device_data(call: str, array: object) -> None:
    """The `TypeError` for a `Buffer` handed where host data belongs (`rt.upload`)."""
    from warmcli.backends.base import Buffer

    if isinstance(array, Buffer):
        raise TypeError(
            f"{call}: array is a Buffer, already on the device: it takes host data (a numpy "
            "array or numbers); rt.read(buffer) gives a buffer's contents back"
        )
