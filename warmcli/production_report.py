"""What a production process reports: `ProductionReport`, every kernel it compiled and every
tune it measured because its bundle lacked them (`Miss`: one whose every candidate failed, or
whose measuring a Ctrl-C cut short, too), and what runtimes `use_bundle`
closed did cold afterwards (counted only: no bundle was theirs to lack it), whether its
bundle was locked at its open and is not loaded yet (`locked`), what strict mode refused
(`refused`: a `Miss` whose `pick` is why, `refused_of` reads them off runtimes), how many
misses a write-back at exit is still to store (`pending`: a report asked before it), and the
notes of tunes it measured whose check told no candidate apart (`judged_nothing`), as the text
`WARM_REPORT=1` prints at exit (the first `LISTED` misses named, the rest counted; a tune
measured with the candidate it picked and its median, and how much slower the others were,
`picked s4, 33.6 µs; s1 1.22×, s16 1.42×`: `tune_pick`, made when first read, so a process
that never reports never makes it);
`misses_of` reads them off a runtime (`Runtime.done_cold` counts them); `report_of` assembles
the report of production's state (`warmcli.production`'s one object, its lock held: the misses
of its runtimes and of those closed, what closed ones did cold since, the bundle as shown).
Plain records: it owns no state, reads nothing but that state, a runtime's misses, the
default collector's notes and, for a report's text, whether its bundle's file is there and
writable (`cannot_write`), and never prints (`warmcli.production` prints them, and imports
this module only once a runtime missed something or a report is asked for: a hot process
never does)."""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from warmcli.printable import LISTED, cut, printable
from warmcli.records import Record, TuneRecord, factory

if TYPE_CHECKING:
    from warmcli.runtime.runtime import Runtime

OTHERS_SHOWN = 4  # the candidates a tune's pick is compared with, of those that ran


class Miss(Record):
    """One thing production had to do itself: a kernel compiled or a tune measured."""

    kind: str  # "kernel" or "tune"
    device: str
    name: str
    key: str
    pick: str = ""  # a tune measured: `tune_pick`'s text, made when first read (`measured`)

    @classmethod
    def measured(cls, device: str, tune: TuneRecord) -> Miss:
        """A tune this process measured, its `pick` made of `tune` when first read (the
        report's line, `warmcli.report()`): a process that closes or forks unreported
        makes none (~5 µs a tune of 16 candidates)."""
        miss = cls("tune", device, f"{tune.operation} {tune.shape_key}", tune.key)
        values = miss.__dict__
        del values["pick"]  # (read through `__getattr__` until made)
        values["_tune"] = tune
        return miss

    def __getattr__(self, name: str) -> str:
        """`pick`, not made yet (no other attribute is ever missing)."""
        values = self.__dict__
        if name != "pick" or "_tune" not in values:
            raise AttributeError(name)
        values["pick"] = text = tune_pick(values["_tune"])  # (two threads: the same text)
        return text


del Miss.pick  # (its default is the record's: a class attribute would hide `__getattr__`)


class ProductionReport(Record, frozen=False):
    """Everything this process compiled or tuned because its bundle lacked it."""

    bundle: str | None
    write: bool
    misses: list[Miss] = factory(list)
    signed: bool = False  # the bundle holds signatures, which do not cover a write-back
    write_error: str = ""  # why the write-back failed (at exit)
    cold_kernels: int = 0  # compiled by runtimes `use_bundle` closed, after it closed them
    cold_tunes: int = 0  # measured by them, likewise
    notes: list[str] = factory(list)  # a tune measured whose check told no candidate apart
    # `bundle` was locked at this process's open, and is not open yet: "locked", or why its
    # last try failed another way (a file replaced)
    locked: str = ""
    refused: list[Miss] = factory(list)  # what strict mode refused (`StrictMissError`)
    # how many misses the exit's write-back is still to store (a report asked before it)
    pending: int = 0

    @property
    def kernels(self) -> list[Miss]:
        return [m for m in self.misses if m.kind == "kernel"]

    @property
    def tunes(self) -> list[Miss]:
        return [m for m in self.misses if m.kind == "tune"]

    def _cold(self) -> str:
        """What closed runtimes did cold, said where it happened ("" where nothing)."""
        if not (self.cold_kernels or self.cold_tunes):
            return ""
        return (
            f"a runtime that an earlier use_bundle() closed compiled {self.cold_kernels} "
            f"kernel(s) and tuned {self.cold_tunes} operation(s) cold "
            "(ask warmcli.runtime() again after use_bundle)"
        )

    def __str__(self) -> str:
        """The report, each line one line: the bundle's path, each miss's name (a `key=`
        text) and each note with every control character escaped (`printable`), as
        `warm stats` shows them, so a newline in one cannot break its line in two."""
        cold = self._cold()
        bundle = printable(self.bundle) if self.bundle else ""
        done = f"compiled {len(self.kernels)} kernel(s) and tuned {len(self.tunes)} operation(s)"
        # refused with no bundle loaded (or before its lock was free), said after what was done
        refused = f"; strict mode refused {len(self.refused)} (StrictMissError)"
        after = (refused if self.refused else "") + (":" if self.misses or self.refused else "")
        if self.locked:
            then = "" if self.locked == "locked" else f", then: {printable(self.locked)}"
            lines = [
                f"warm: bundle {bundle} not loaded yet: another process held its lock when this "
                f"process opened it (tried again at a lookup every 5 s{then}); this process "
                f"{done} itself" + after
            ]
        elif not self.bundle:
            lines = [
                f"warm: no bundle is loaded: this process {done} itself"
                + (" (warm them with `warm run`, then set WARM_BUNDLE)" if self.misses else "")
                + after
            ]
        elif self.refused and not self.misses:
            kernels = sum(m.kind == "kernel" for m in self.refused)
            never = all(NEVER_SERVED in m.pick for m in self.refused)  # no re-warm serves them
            lines = [
                f"warm: bundle {bundle} lacked {kernels} kernel(s) and "
                f"{len(self.refused) - kernels} tune(s), which strict mode refused "
                f"(StrictMissError): {NEVER if never else self._rewarm()}:"
            ]
        elif not self.misses:
            if cold:
                return f"warm: bundle {bundle} served all its runtimes asked for; {cold}"
            served = "served everything: compiled 0 kernels, tuned 0 operations"
            return f"warm: bundle {bundle} {served}"
        else:
            if not self.write and all(NEVER_SERVED in m.name for m in self.misses):
                then = NEVER  # built in each process
            elif not self.write:
                then = self._rewarm()
            elif self.write_error:
                then = f"NOT written back: {printable(self.write_error)}"
            elif all(m.name.endswith(UNSTORED) for m in self.misses):  # cut short or failed
                then = "none of them stored: each says why"
            elif self.pending:  # asked before the exit: nothing of them is in the bundle yet
                then = "to be written back into it at exit"
            else:
                then = "written back into it"
                if self.signed:
                    then += ", unsigned: sign the bundle again with `warm sign`"
            lines = [
                f"warm: bundle {bundle} lacked {len(self.kernels)} kernel(s) and "
                f"{len(self.tunes)} tune(s); this process compiled and tuned them itself ({then})"
                + (f"; strict mode refused {len(self.refused)} more:" if self.refused else ":")
            ]
        listed = (self.misses + self.refused)[:LISTED]
        lines += [
            f"  {m.kind} {printable(cut(m.name))} on {m.device} (key {m.key[:16]})"
            + (f": {printable(cut(m.pick))}" if m.pick else "")
            for m in listed
        ]
        if len(self.misses) + len(self.refused) > LISTED:
            more = len(self.misses) + len(self.refused) - LISTED
            lines.append(f"  and {more:,} more not listed (warmcli.report() names every one)")
        lines += [f"  note: {printable(note)}" for note in self.notes[:LISTED]]
        return "\n".join(lines + ([f"  {cold}"] if cold else []))

    def _rewarm(self) -> str:
        """What a process that wrote nothing back tells its user to do about what its bundle
        lacked: re-warm it, unless its file is gone or this process cannot write it."""
        then = "re-warm it with `warm run`"
        # gone (an `as_file` copy, its block ended): where a relative path's folder cannot be
        # known to be the one it was opened in, not said
        if os.path.isabs(self.bundle) and not os.path.exists(self.bundle):
            return "no file is at that path now: it was removed since it was opened"
        if cannot_write(self.bundle):  # installed read-only (a library's, an image's)
            return f"this process cannot write it: {then} where it was built, or ask its owner"
        return then


def cannot_write(bundle: str) -> bool:
    """Whether this process could not write the bundle file `bundle` (a path, as shown): the
    file or its folder read-only to it, as a `warm run` into it needs both (its lock file is
    made beside it). A URL, or a file gone: False."""
    if "://" in bundle or not os.path.isfile(bundle):  # (a file gone: said otherwise)
        return False
    folder = os.path.dirname(os.path.abspath(bundle))
    return not (os.access(bundle, os.W_OK) and os.access(folder, os.W_OK))


def judged_nothing(since: int = 0) -> list[str]:
    """The notes of the tunes this process measured whose output check told no candidate
    apart (`warmcli.runtime.tune_guard.OutputCheck.judged_nothing`), among the default
    collector's notes from the `since`-th (those before: a forked child's parent's): a tune's
    own (`tune NAME SHAPE: its check could not ...`), never another note quoting those words
    (a compile's log, a blob's library name)."""
    from warmcli.execution.process_mode import default_collector
    from warmcli.runtime.tune_guard import JUDGED_NOTHING

    notes = default_collector().reader().notes()[since:]
    return [n for n in notes if n.startswith("tune ") and f": {JUDGED_NOTHING}: " in n]


def tune_pick(tune: TuneRecord) -> str:
    """The candidate a measured tune picked, its median, and how much slower the fastest
    others that ran were (`OTHERS_SHOWN`, then a count), those that failed counted: `picked
    s4, 33.6 µs; s1 1.22×, s16 1.42×, 1 failed` ("" for a tune with no pick)."""
    ran = sorted(
        (c for c in tune.candidates if c.status == "ok" and c.seconds is not None),
        key=lambda c: c.seconds or 0.0,
    )
    best = next((c for c in ran if c.name == tune.pick), None)
    if best is None or best.seconds is None:
        return ""
    text = f"picked {tune.pick}, {best.seconds * 1e6:,.1f} µs"
    others = [c for c in ran if c is not best]
    shown = [
        f"{c.name} {(c.seconds or 0.0) / best.seconds:.2f}×"
        if best.seconds > 0  # (a clock that measured nothing: times, not ratios)
        else f"{c.name} {(c.seconds or 0.0) * 1e6:,.1f} µs"
        for c in others[:OTHERS_SHOWN]
    ]
    if len(others) > OTHERS_SHOWN:
        shown.append(f"{len(others) - OTHERS_SHOWN} more")
    failed = sum(c.status == "failed" for c in tune.candidates)
    shown += [f"{failed} failed"] if failed else []
    return text + ("; " + ", ".join(shown) if shown else "")


# how the name of a miss that left nothing to store ends (`misses_of`, `KernelCache.missed`)
UNSTORED = (": nothing stored)", ": nothing compiled)")
NEVER_SERVED = " (never served: "  # in the name of one no bundle serves (`warmcli.unkeyed`)
NEVER = "warm never serves them: each says why"  # (where re-warming would serve none)


def misses_of(rt: Runtime) -> list[Miss]:
    """What `rt` compiled or tuned itself, its failed tunes too."""
    device = rt.device.id
    kernels = [Miss("kernel", device, label, key) for label, key in rt.kernels.missed()]
    tunes = [Miss.measured(device, t) for t in rt.tunes.unpersisted()]
    never = [(key, f"{label}{NEVER_SERVED}{why}: nothing stored)") for key, (label, why) in
             list(rt.tunes.never.items())]  # fmt: skip
    tunes += [Miss("tune", device, name, key) for key, name in never]
    failed = "(every candidate failed: nothing stored)"
    tunes += [Miss("tune", device, f"{n} {failed}", k) for k, n in list(rt.tunes.failed.items())]
    cut_short = "(measuring interrupted: nothing stored)"  # by a Ctrl-C
    tunes += [Miss("tune", device, f"{n} {cut_short}", k) for k, n in list(rt.tunes_cut.items())]
    return kernels + tunes


def report_of(state: Any, read: bool = True) -> ProductionReport:
    """The report of `state`, production's one object (`warmcli.production._Production`: its
    lock held), as `report()` hands it out and `WARM_REPORT` prints it; `read` False: the
    bundle is not read (its signatures: `signed` False), as at exit once an interrupt cut the
    first report short there (a SIGTERM while a writer's lock was waited for)."""
    from warmcli.bundle import served

    misses = list(state.closed_misses)
    for rt in state.runtimes.values():
        misses += state._own_misses(rt)
    misses = list(dict.fromkeys(misses))  # a close cut short (SIGTERM) kept them in use too
    signed = read and state.write and bool(misses) and served.signed(state.bundle)
    # what runtimes closed meanwhile did cold since (those collected since, then the others)
    kernels, tunes = map(sum, zip((0, 0), *list(state.gone), strict=True))
    for rt, (then_kernels, then_tunes) in list(state.closed.items()):
        now_kernels, now_tunes = rt.done_cold()
        kernels, tunes = kernels + now_kernels - then_kernels, tunes + now_tunes - then_tunes
    tuned = any(m.kind == "tune" for m in misses)
    notes = list(dict.fromkeys(judged_nothing(state.notes_from))) if tuned else []  # once
    from warmcli.bundle.location import shown  # a URL's password or query: never said

    path, reopening = state.path, state.reopening  # (or the one locked at its open)
    if path is None and reopening is not None:
        path = reopening.path
    if path is None and not state.runtimes:  # closed (`close`), none made since: its bundle's
        path = state.closed_path  # (misses of a runtime made since: no bundle's)
    bundle = shown(path) if path is not None else None
    report = ProductionReport(bundle, state.write, misses, signed, state.failed, kernels, tunes)
    report.notes = notes
    refused = state.closed_refused + [
        m for rt in state.runtimes.values() for m in state._own_refused(rt)
    ]
    report.refused = list(dict.fromkeys(refused))  # strict mode's (WARM_STRICT=1)
    report.pending = state._pending()  # (the exit's own report: 0 once it wrote them back)
    if state.path is None and reopening is not None and reopening.bundle is None:
        report.locked = reopening.refused or "locked"  # not opened since: why
    return report


def refused_of(rt: Runtime, parents: Collection[tuple[str, str]] = ()) -> list[Miss]:
    """What strict mode refused on `rt` (`WARM_STRICT=1`), but the (kind, key)s in `parents`
    (a forked child's parent's), each a `Miss` whose `pick` says so with the miss's reason
    (`refused by strict mode: absent: ...`)."""
    return [
        Miss(
            why.kind,
            rt.device.id,
            why.label,
            why.key,
            f"refused by strict mode: {why.reason}: " + why.detail,
        )
        for why in rt.misses.refused()
        if (why.kind, why.key) not in parents
    ]
