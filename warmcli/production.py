"""The production side: a process that loads a bundle and runs its workload code unchanged.

`use_bundle(path)`, else the `WARM_BUNDLE` environment variable (set and empty: none), else the
default bundle `warm run` writes (`WARM_HOME/bundle.warm`) when it exists (no other user may write
it or its folder: native code nobody named), is the bundle this process serves kernels and picks
from (`use_bundle(None)`: none); `runtime()` hands out one `Runtime` per device over it, opened
read-only and read lazily (while a runtime of that device is bound, `warm run`'s passes, that one,
and for `host` on another the pass's own: what a workload does on it is warmed; at import, a
`LateRuntime` going to the pass's: `warmcli.late_runtime`, imported only where `warm run` imported
it). A miss still compiles or tunes, as it would without warm, and is counted into the process's
default collector (`warmcli.execution`); `report()` names every kernel this process had to compile
and every tune it had to measure because the bundle lacked them, and counts what a runtime
`use_bundle` closed did cold since (`warmcli.production_report`; `WARM_REPORT=1`, or
`report(at_exit=True)`, prints that on stderr at exit; a forked child's, what it did, not its
parent). With `write=True` (or `WARM_BUNDLE_WRITE=1`) what was missed is written back at exit, in
one transaction under the bundle's lock, so several processes may do it at once (another writer's
lock waited for `WRITE_BACK_WAIT_SECONDS` at most: a process always ends; a failure once every miss
is stored, moving last-used times only, is none). A read-only process never writes the file. Every
miss is explained (`warmcli.runtime.explain`), logged on logger `warmcli` with `WARM_EXPLAIN=1`,
and refused with `StrictMissError` under `strict=True` or `WARM_STRICT=1` (`warn`: logged instead).
Under trusted keys (`trusted_keys=`, `WARM_TRUSTED_KEYS`) a bundle no trusted key signed is
refused, and only the entries they signed are served (`warmcli.bundle.signing`); a write-back is
not signed, and into a signed bundle it logs so (logger `warmcli`). `WARM_BUNDLE` and `use_bundle`
also take an `https://` or `s3://` URL: fetched once per machine into `WARM_HOME`
(`warmcli.bundle.remote`), served read-only from there, its last good copy (one
`RemoteBundleWarning`) where the store is unreachable. A bundle another process keeps (named or the
default one) locked past `LOCK_WAIT_SECONDS` (a writer stopped mid-write) is not loaded: one line,
and the process runs cold (`_unless_locked`; under strict mode raised) until it is free: its
runtimes serve from it then, read-only (`warmcli.bundle.reopening`). The module owns the process's
bundle (and the one `close` closed last, the report's until a runtime is made again, and why a
write-back failed), runtimes, the misses and strict refusals of closed ones (and a forked child's
parent's), what each closed one had done when closed (and since), in one object (`_Production`); it
prints that report when asked, else only a failed write-back's line, and never in warm's own
commands (`in_warms_command`: they serve nothing).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from warmcli import config
from warmcli.backends.opening import open_devices
from warmcli.bundle import served as _served
from warmcli.bundle.core import BundleCore
from warmcli.bundle.served import needs_writer, open_served, trusted, write_back_into
from warmcli.errors import BundleError, BundleLocked, DeviceError
from warmcli.forking import renew_on_fork
from warmcli.home import default_bundle_path
from warmcli.interrupted import end_as_stopped
from warmcli.printable import printable, printable_lines
from warmcli.runtime.misses import EXPLAIN, MissPolicy, Strictness, warn
from warmcli.runtime.runtime import Runtime

if TYPE_CHECKING:  # imported where a report or a miss is read, where a bundle is kept locked
    from warmcli.bundle.reopening import Reopening
    from warmcli.production_report import Miss, ProductionReport


class _Production:
    """The process's production state, one object: the bundle in use and how it was chosen,
    its runtimes, closed runtimes' misses, the policy (each `_` method: called with `lock` held)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: str | None = None  # the bundle in use, as given (a path or a URL)
        self.closed_path: str | None = None  # the last one `close` closed: its report's
        self.write = False
        self.bundle: BundleCore | None = None
        self.reopening: Reopening | None = None  # the bundle, locked at its open (read-only)
        self.runtimes: dict[str, Runtime] = {}  # by device id: one runtime per device
        self.asked: dict[str, str] = {}  # what `runtime()` was asked for -> device id
        self.closed_misses: list[Miss] = []
        self.closed_refused: list[Miss] = []  # what strict mode refused on those
        # each runtime closed (while alive): what it had done then, so that what it did
        # cold afterwards (another library's `use_bundle` closed it) is counted
        self.closed: weakref.WeakKeyDictionary[Runtime, list[int]] = weakref.WeakKeyDictionary()
        self.gone: list[tuple[int, int]] = []  # that, of each one collected since (a request's)
        # a forked child's runtime (while alive): the misses its parent had made on it
        self.inherited: weakref.WeakKeyDictionary[Runtime, set[tuple[str, str]]] = (
            weakref.WeakKeyDictionary()
        )
        self.report_at_exit = False
        self.command = False  # warm's own command (`in_warms_command`): no report at exit
        self.policy: MissPolicy = EXPLAIN
        self.off = False  # `use_bundle(None)`: no bundle, whatever the environment says
        self.looked = False  # the environment and the default bundle were consulted
        self.unstored, self.failed = 0, ""  # what the last close did not write back, and why
        self.notes_from = 0  # the default collector's notes before: not the report's

    def _bundle(self) -> BundleCore | None:
        if self.bundle is not None or self.path is not None or self.looked or self.off:
            return self.bundle
        self.policy = MissPolicy.from_env()
        named = config.bundle()
        if named == "":
            self.looked = True
            return None  # set and empty: no bundle
        write = config.bundle_write()
        if named is None:
            default = default_bundle_path()
            if not default.is_file():
                self.looked = True
                return None
            try:  # unconfigured: a default bundle that cannot be opened only costs a cold start
                self.bundle = self._unless_locked(str(default), write, trusted(None), True)
            except BundleError as exc:
                if self.policy.strict is Strictness.RAISE:
                    raise
                warn("warm: default bundle not loaded: %s", printable(exc))
                self.looked = True
                return None
            if self.bundle is None:  # locked past the wait: cold, and tried again as late
                self.looked = True
                return None
            self.path, self.write = str(default), write
            return self.bundle
        if named.lower() in ("0", "false", "no", "off") and not os.path.lexists(named):
            raise BundleError(f"WARM_BUNDLE={named}: no such bundle (to load none, set it empty)")
        self.bundle = self._unless_locked(named, write, trusted(None))
        if self.bundle is None:  # locked past the wait: cold, and not waited for again
            self.looked = True
            return None
        self.path, self.write = named, write  # set once opened: a failed open raises again
        return self.bundle

    def _unless_locked(
        self, path: str, write: bool, keys: Sequence[bytes] | None, default: bool = False
    ) -> BundleCore | None:
        """The bundle at `path` opened to serve (the `default` one: only where no other user
        may write it, at each try); None, said in one line, where another process kept it
        locked past the wait (`LOCK_WAIT_SECONDS`: a writer stopped mid-write), and tried again
        later (`Reopening`), the default bundle too: a bundle changes how fast a process
        starts, never whether it runs (`strict=True`: raised)."""
        opener = _served.default_served if default else open_served
        try:
            return opener(path, write, keys)
        except BundleLocked as exc:
            if self.policy.strict is Strictness.RAISE:
                raise
            warn("warm: bundle not loaded, this process runs cold: %s", printable(exc))
            if "://" not in path:  # its runtimes serve from it once it is free (the file
                whole = _served.absolute(path)  # named now: a daemon changes its folder later)
                from warmcli.bundle.reopening import Reopening  # (a serving process: never)

                self.reopening = Reopening(whole, lambda: opener(whole, write, keys), exc)
            return None

    def _report(self, read: bool = True) -> ProductionReport:
        from warmcli.production_report import report_of

        return report_of(self, read)

    def _own_misses(self, rt: Runtime) -> list[Miss]:
        """`rt`'s misses, but those a forked child's parent had made on it before the fork."""
        if not (any(rt.done_cold()) or rt.tunes.failed or rt.tunes_cut):
            return []  # a hot runtime: the report's records are not even imported
        from warmcli.production_report import misses_of

        parents = self.inherited.get(rt, set())
        return [m for m in misses_of(rt) if (m.kind, m.key) not in parents]

    def _own_refused(self, rt: Runtime) -> list[Miss]:
        """What strict mode refused on `rt`, but what a forked child's parent had."""
        if not rt.misses.refused():
            return []  # not strict, or nothing refused: the report's records not imported
        from warmcli.production_report import refused_of

        return refused_of(rt, self.inherited.get(rt, set()))

    def _pending(self) -> int:
        """How many misses a write-back would store now (0 when not writing)."""
        return sum(rt.unstored() for rt in self.runtimes.values()) if self.write else 0

    def _close(self) -> None:
        """Write back (when writing), then release everything, even when a write-back fails:
        the first failure is raised once all is released."""
        failure: BundleError | None = None
        written, writer = 0, None
        self.unstored = self._pending()
        for rt in self.runtimes.values():
            self.closed_misses.extend(self._own_misses(rt))
            self.closed_refused.extend(self._own_refused(rt))
            left = rt.unstored() if self.write else 0
            try:
                if self.write and self.bundle is not None and failure is None:
                    news = bool(rt.kernels.unpersisted() or rt.tunes.unpersisted())
                    if writer is not None or needs_writer(self.bundle, news):
                        from warmcli.bundle.lock import waiting_at_most  # (to write back)

                        with waiting_at_most(WRITE_BACK_WAIT_SECONDS):  # not for ever
                            writer = writer or write_back_into(self.bundle, warn)
                            written += sum(rt.persist(writer))
            except BundleError as exc:
                failure = exc
            finally:
                if self.write:  # what this write stored (all of it: the rest is LRU times)
                    self.unstored -= left - rt.unstored()
                rt.close()
                self.closed[rt] = then = list(rt.done_cold())  # (counted here if alive at exit)
                weakref.finalize(rt, _gone, self.gone, rt.kernels, rt.tunes, then).atexit = False
        if writer is not None and writer is not self.bundle:
            writer.close()
        self.runtimes.clear()
        self.asked.clear()
        if written and _served.signed(self.bundle):
            unsigned = "warm: wrote %d entries back into %s; they are unsigned: sign it again"
            warn(f"{unsigned} (warm sign)", written, printable(self.bundle.path))
        if self.bundle is not None:
            self.bundle.close()
            self.bundle = None
        if self.reopening is not None:
            self.reopening.close()
            self.reopening = None
        if failure is not None and self.unstored:  # else only last-used times were lost
            self.failed = str(failure)  # (the report's: not written back, whatever comes)
            raise failure


_STATE = _Production()
renew_on_fork(_STATE, "lock")
WRITE_BACK_WAIT_SECONDS = 60.0  # the most a write-back waits for another writer's lock


def _forked() -> None:
    """In a forked child (its locks renewed first): what its parent compiled and tuned so
    far, in memory, and the notes it made, are not the child's to report (written back, it
    may be); a hot runtime missed nothing: the report's records are not imported for it
    (`_own_misses`)."""
    state = _STATE
    state.closed_misses.clear()
    state.closed_refused.clear()
    for rt in state.runtimes.values():
        state.inherited.pop(rt, None)  # all it missed (and strict mode refused), its parent's too
        refused = {(why.kind, why.key) for why in rt.misses.refused()}
        state.inherited[rt] = {(m.kind, m.key) for m in state._own_misses(rt)} | refused
    for rt, then in list(state.closed.items()):
        then[:] = rt.done_cold()  # (the list its finalizer holds too)
    state.gone.clear()
    _notes_from_now(state)


def _notes_from_now(state: _Production) -> None:
    """The report's notes from now on: not those made before (a forked child's parent's, or
    over the bundle an earlier `use_bundle` closed)."""
    if (modes := sys.modules.get("warmcli.execution.process_mode")) is not None:
        state.notes_from = len(modes.default_collector().reader().notes())


def _gone(into: list[tuple[int, int]], kernels: Any, tunes: Any, then: list[int]) -> None:
    """A closed runtime collected: what it did cold since closed, for the report (no lock:
    a collection may run where this thread holds one); most did nothing: no entry."""
    tuned = len(tunes.unpersisted()) + len(tunes.never)  # (never stored: cold all the same)
    if any(cold := (len(kernels.missed()) - then[0], tuned - then[1])):
        into.append(cold)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def use_bundle(
    path: str | os.PathLike[str] | None,
    *,
    write: bool | None = None,
    strict: bool | str | None = None,
    trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
) -> None:
    """Serve kernels and tune picks from the bundle at `path` (a path or a URL) from now on
    (`None`: no bundle at all, whatever `WARM_BUNDLE` or the default bundle); `write=True`:
    what this process missed is written back into it at exit (a bundle made where none is).

    Raises `BundleError` (one line) when the bundle is missing (unless writing), unreadable
    or not warm's (`RemoteError`: a URL not fetched, no last good copy; `TypeError`: an
    argument of the wrong type): a production process fails fast on it, or catches it and
    runs cold (a bundle refused leaves none in use, as `use_bundle(None)`: its report says
    so). `strict=True` makes any compile or tune the bundle lacks raise `StrictMissError`
    (`"warn"` logs it instead); `trusted_keys` (Ed25519 public key files): a bundle no
    trusted key signed is refused (`SignatureError`), and an entry none signed is not
    served. `None` reads `WARM_BUNDLE_WRITE`, `WARM_STRICT`, `WARM_TRUSTED_KEYS`."""
    write = _served.check_types(path, write, trusted_keys)
    policy = MissPolicy.from_env(strict)
    keys = trusted(trusted_keys) if path is not None else None
    state = _STATE
    with state.lock:
        state._close()
        state.closed_misses.clear()  # the report is about the bundle in use, not the last one
        state.closed_refused.clear()
        _notes_from_now(state)  # and so are its notes
        state.policy = policy
        state.off = state.looked = True  # refused: no bundle, as `use_bundle(None)` leaves it
        state.path, state.closed_path, state.write, state.failed = None, None, False, ""
        if path is not None:
            state.bundle = state._unless_locked(os.fspath(path), write, keys)
            if state.bundle is not None:  # (locked past the wait: none, as when refused)
                state.off, state.path, state.write = False, os.fspath(path), write


def bundle() -> BundleCore | None:
    """The bundle in use: `use_bundle`'s, else `WARM_BUNDLE`'s (empty: none), else the
    default bundle `warm run` writes (`WARM_HOME/bundle.warm`) when it exists."""
    with _STATE.lock:
        return _STATE._bundle()


def runtime(device: str = "auto") -> Runtime:
    """The process's runtime for `device` (`host`, `cuda:N`, `cuda`: the first GPU, `auto`),
    over the bundle in use; one per device, however it is named. Under a bound runtime of
    that device (`warm run`'s passes), that runtime (`host` on another: the pass's own), so
    what the workload does there is warmed."""
    if not isinstance(device, str):
        raise DeviceError(f"device {device!r} is no str: use host, cuda, cuda:N or auto")
    if "warmcli.late_runtime" in sys.modules or "warmcli.runtime.binding" in sys.modules:
        from warmcli.late_runtime import bound, handed, importing  # (`warm run`'s: else none)

        if (active := bound(device)) is not None:
            return active
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if importing() and not caller.startswith("warmcli."):
            return handed(device, _own)  # one a device (`warmcli.late_runtime`)
    return _own(device)


def _own(device: str) -> Runtime:
    """This process's own runtime for `device` (one per device), over the bundle in use."""
    state = _STATE
    with state.lock:  # one lock with the bundle: a concurrent `use_bundle` cannot slip between
        loaded = state._bundle()
        known = state.asked.get(device)
        if known is not None:
            return state.runtimes[known]
        first = open_devices(device, first=True)[0]  # `cuda`: the first GPU, the one opened
        rt = state.runtimes.get(first.id)
        if rt is None:
            store = loaded if loaded is not None else state.reopening
            rt = state.runtimes[first.id] = Runtime(first, store, misses=state.policy)
        else:
            first.close()  # already served under another name
        state.asked[device] = first.id
        return rt


def report(*, at_exit: bool = False) -> ProductionReport:
    """What this process compiled or tuned that the bundle lacked; `at_exit`: print it then."""
    with _STATE.lock:
        _STATE.report_at_exit = _STATE.report_at_exit or at_exit
        return _STATE._report()


def close() -> None:
    """Write back misses (when writing: a failure raises once all is released), release all,
    and forget `use_bundle`'s path (not `use_bundle(None)`), but as the report's bundle."""
    state = _STATE
    with state.lock:
        state._close()
        state.closed_path = state.path or state.closed_path  # (its report's, `report_of`)
        state.path, state.looked = None, state.off


def in_warms_command() -> None:
    """Said by `warmcli.__main__` once any of warm's own commands has ended: this process
    serves no bundle, so `WARM_REPORT` is not its (it would say "no bundle is loaded")."""
    _STATE.command = True


def _at_exit() -> None:
    final, stop, wanted = None, None, False
    try:
        with _STATE.lock:
            wanted = (_STATE.report_at_exit or config.report()) and not _STATE.command
            _STATE.unstored = _STATE._pending()  # (for an interrupt before close counts them)
            final = _STATE._report() if wanted else None  # (reads the bundle: may wait)
        close()
    except (BundleError, KeyboardInterrupt, SystemExit) as exc:
        # at exit there is no caller to raise to: one line instead (Ctrl-C: "interrupted"),
        # unless every miss was stored before it (only last-used times were not moved)
        why, stop = (str(exc), None) if isinstance(exc, BundleError) else ("interrupted", exc)
        if wanted and final is None:  # cut short as it was made: again, reading no bundle
            with contextlib.suppress(KeyboardInterrupt, SystemExit), _STATE.lock:
                _STATE.unstored, final = _STATE._pending(), _STATE._report(read=False)
        if _STATE.unstored and final is None:
            sys.stderr.write(f"warm: could not write back into the bundle: {printable(why)}\n")
        elif _STATE.unstored and final is not None:
            final.write_error = why
    if final is not None:
        final.pending = 0  # written back by now, or its write_error says why not
        sys.stderr.write("\n".join(printable_lines(final)) + "\n")
    sys.stderr.flush()
    end_as_stopped(stop)  # a process stopped (here or before) ends as stopped, not with 0


atexit.register(_at_exit)
