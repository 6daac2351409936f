"""One-line `TypeError`s for a runtime call handed the wrong kind of object (a `str` for the
kernel, a `Kernel` for the tunable, an `int` for the stream), said where the call's own use
of it failed (an `AttributeError`), so a correct call pays nothing for the check; and a read
of a buffer under a pass that discards launches (`discarded_read`): refused (and noted, as a
workload may catch the error and go on), or warned of.

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


def discarded_read(what: object, device_id: str, executes: bool, allowed: bool, level: int) -> None:
    """A read of `what` (a `Buffer`, or a text naming what is read) under a discarding pass
    on device `device_id` (one that `executes`, or not): `DiscardedReadError` (naming the
    flag that allows it), or where reads are `allowed` a `DiscardedReadWarning` (`level`:
    its stack level, from the caller's caller), counted and noted. The note of a buffer's
    read names its device, not its shape: one line a pass however many buffers were read
    (a library warmed over many sizes said one line per shape and dtype, 22 a pass)."""
    import warnings

    from warmcli.backends.base import Buffer
    from warmcli.errors import DiscardedReadError, DiscardedReadWarning
    from warmcli.execution import process_mode
    from warmcli.runtime.tune_check import read_meaningless

    mode = process_mode.current_process_mode().value
    said = (
        f" under {mode}: launches are discarded in this pass, so buffers are left as they "
        "were and what is read back is meaningless"
    )
    message = f"read of {what}{said}"
    noted = f"read of Buffer({device_id}){said}" if isinstance(what, Buffer) else message
    if not allowed:  # noted too: a workload that catches it (pytest) goes on silently
        process_mode.note_reported(refused_read_note(mode, "DiscardedReadError", ALLOW))
        raise DiscardedReadError(f"{message}; {ALLOW}")  # (the note is dropped where it ends)
    try:
        warnings.warn(message, DiscardedReadWarning, stacklevel=level + 2)
    except DiscardedReadWarning:  # a warnings filter made it an error (pytest.ini's `error`)
        process_mode.note_reported(refused_read_note(mode, WARNING_RAISED, IGNORE))
        raise
    read_meaningless(executes)  # no GPU: no refusal after it is a GPU's
    process_mode.active_collector().count(device_id, "execution", "discarded_reads")
    process_mode.note_reported(noted)


WARNING_RAISED = "DiscardedReadWarning, which a warnings filter made an error"
CAUGHT = "), and the workload caught it and went on"  # (`warm run` finds the note by it)
ALLOW = "with --allow-discarded-reads the read gives the buffer as it was and the code goes on"
IGNORE = "a filter `ignore::warmcli.DiscardedReadWarning` after that one lets the read go on"


def refused_read_note(mode: str, raised: str, hint: str) -> str:
    """The note of a read refused under the pass `mode` (by `raised`; `hint`: what lets it
    go on), the same text for every read of a pass (counted as one note): what it says is of
    a workload that caught the error and went on, so an error that ended the run says it
    alone (`warm run` drops this note there)."""
    return (
        f"a read back under {mode} was refused ({raised}{CAUGHT} (a test runner, pytest, takes "
        "it for a test's failure): what the code that read would have launched or tuned after "
        "the read (the rest of that test) is not warmed in this pass, and the verify pass names "
        f"what is missed; {hint}"
    )
