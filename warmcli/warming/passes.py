"""The warming passes: `CompileOnly`, then `CompileAndAutotune`, then an optional verify.

`warm_bundle` runs a workload on every device under `CompileOnly` (everything it and its tunes
reach is queued), then under `CompileAndAutotune` (the first load compiles the whole queue in
one batch, every tune measures), writes what was built and measured into the bundle, and finally
runs a verify pass with fresh runtimes over the freshly opened bundle: under `Execute` on
devices that can execute (it must compile 0 kernels and measure 0 tunes, nor fail to), under
`CompileOnly` on compile-only devices (it must queue 0 kernels); each miss there is explained
(`PassReport.misses`), but a kernel no bundle ever serves (its key this process's own,
`warmcli.unkeyed`), nor a tune of a tunable with such a candidate (its checksum holds its
headers): never stored (a note says so), built or measured in each process, no miss
(`never_served`). Under trusted keys the bundle is opened trusting only them
(`warmcli.bundle.signing`); with a signing key, what the run stored (its own builds, `own_builds`)
is signed before the verify pass (with what trusted keys had signed, or everything when no keys are
trusted). Given a `Shard`, every pass does only that shard's part (`warmcli.runtime.shard`), and the
verify pass runs under `CompileOnly` on every device: it must queue none of the shard's kernels and
find every one of its tunes. While the bundle is opened (created and synced), a thread finds each
device's compiler and reads its version (`warmcli.warming.probe`, into `RunReport.compilers`;
memoised, so the first pass keys its kernels with it, after the join; an interrupt kills its
`--version` process). An existing bundle whose SQL indexes disagree with its rows is refused before
anything is written (`warmcli.bundle.consistency`). Interrupted (`KeyboardInterrupt`, which a SIGINT
or SIGTERM handler raises), what was built and measured so far is stored and `RunInterrupted` says
how much (a store and its count are one step, `held_interrupts`, under the write lock taken first,
so that Ctrl-C stops a wait for another writer at once: one landing as it commits is
answered once counted; a later store the disk refuses says what earlier ones kept; a bundle
this process may not write, that lacked only times of use, is served read-only: `unwritten`);
a workload that raised or exited once a store committed says what it kept too (`kept_after`),
and one whose own code raised in the second pass, the first having run it through, says that
(`_ran_before`). A
host runtime the workload asks for during a pass on another device is the run's own
(`warmcli.warming.companions`): warmed, stored and verified beside the others (its compiler
listed in `compilers`). Each pass announces itself to the crash journal
(`warmcli.warming.isolation`) and counts into its own `StatisticsCollector`; an observer may
read it while the pass runs (one pass, and its report: `warmcli.warming.one_pass`, whose
names are importable from here too). It never prints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from warmcli.backends.base import Device
from warmcli.backends.machine import compiler_info
from warmcli.bundle.admin import drop_corrupt
from warmcli.bundle.consistency import require_consistent
from warmcli.bundle.file import FORMAT_VERSION, check_header
from warmcli.bundle.lock import waiting_at_most, write_lock
from warmcli.bundle.replacing import is_empty_file, remove_new
from warmcli.bundle.store import Bundle, BundleError
from warmcli.errors import WarmError, WorkloadError
from warmcli.execution.process_mode import ProcessMode, note_reported
from warmcli.execution.snapshots import DeviceStatistics
from warmcli.interrupted import held_interrupts
from warmcli.records import Record, factory
from warmcli.runtime.buildable import CANNOT_BUILD
from warmcli.runtime.runtime import Runtime
from warmcli.runtime.shard import Shard
from warmcli.warming.companions import Companions
from warmcli.warming.forked_launches import note as forked_note
from warmcli.warming.one_pass import Observer, PassReport, did_something, merged, run_pass
from warmcli.warming.probe import CompilerProbe
from warmcli.warming.script_main import MAIN_GUARD_HINT, block_only_calls, guarded_main
from warmcli.warming.sealing import join_record, kept_after, kept_before, seal
from warmcli.warming.worker_journal import note_stored
from warmcli.warming.workload import Workload


class RunReport(Record, frozen=False):
    bundle: Path
    devices: list[str]
    passes: list[PassReport] = factory(list)
    stored_kernels: int = 0
    stored_tunes: int = 0
    missing: list[str] = factory(list)
    signature: str = ""  # signed by which key, or why what was stored is unsigned
    shard: str = ""  # "I/N" when the run did one shard's part
    compilers: list[dict[str, str]] = factory(list)  # `compiler_info` a device
    format_before: int | None = FORMAT_VERSION  # the bundle's before the run (None: new)
    unwritten: str = ""  # why a bundle that needed no store could not be written (read-only)

    @property
    def children_launched(self) -> bool:
        """Whether a child process the workload forked launched or tuned in a pass: what
        it compiled is not in the bundle, whatever the verify pass found."""
        return any(p.forked for p in self.passes)

    @property
    def verified(self) -> bool | None:
        has_verify = any(p.mode.startswith("Verify") for p in self.passes)
        return None if not has_verify else not self.missing


def verify_pass(
    workload: Workload,
    devices: Sequence[Device],
    bundle_path: Path,
    *,
    jobs: int | None = None,
    compile_timeout: float | None = None,
    allow_discarded_reads: bool = False,
    observer: Observer | None = None,
    trusted_keys: Sequence[bytes] | None = None,
    shard: Shard | None = None,
) -> tuple[PassReport, list[str]]:
    """Run the workload over a freshly opened bundle; return the report and what was missed
    (a shard's part only, under `CompileOnly`, given `shard`)."""
    reports, missing = [], []
    with Bundle.open(bundle_path, trusted_keys=trusted_keys) as bundle:
        for executing in (True, False):
            group = [d for d in devices if (d.can_execute and shard is None) is executing]
            if not group:
                continue

            def make(d: Device) -> Runtime:
                return Runtime(
                    d,
                    bundle,
                    jobs=jobs,
                    compile_timeout=compile_timeout,
                    allow_discarded_reads=allow_discarded_reads,  # compile-only: reads discard
                    shard=shard,
                )

            runtimes = [make(d) for d in group]
            extra = Companions(make, runtimes)
            mode = ProcessMode.EXECUTE if executing else ProcessMode.COMPILE_ONLY
            label = f"Verify ({mode.value})"
            try:
                report = run_pass(mode, label, workload, runtimes, observer, extra=extra)
            finally:
                late = extra.close()  # (made once the pass's statistics were read)
            report.notes += late
            reports.append(report)
            never: set[str] = set()  # keys
            for runtime in runtimes + extra.runtimes:
                device = runtime.device.id
                stats = report.per_device.get(device, DeviceStatistics())
                unkeyed = runtime.kernels.never_stored(queued=not executing)
                report.never_served += [
                    f"{device}: kernel {label} is built in each process, never served ({why})"
                    for label, _, why in unkeyed
                ]
                never.update(key for _, key, _ in unkeyed)
                tuned = list(runtime.tunes.never.items())  # measured here: never served either
                report.never_served += [
                    f"{device}: tune {label} is measured in each process, never served ({why})"
                    for _, (label, why) in tuned
                ]
                never.update(key for key, _ in tuned)
                missing += _missed(device, stats, executing, len(unkeyed), len(tuned))
            report.misses = [m for m in report.misses if m.key not in never]
    report = reports[0] if len(reports) == 1 else merged(reports)
    return report, missing


def _missed(
    device: str, stats: DeviceStatistics, executing: bool, never: int, tunes: int = 0
) -> list[str]:
    """What the verify pass on `device` missed: but `never` kernels it built (`executing`) or
    queued, and `tunes` it measured or reached, that no bundle serves (`warmcli.unkeyed`)."""
    c, a = stats.compilation, stats.autotune
    out, compiled, queued = [], c.compiled - never, c.queued - never
    if executing and compiled > 0:
        out.append(f"{device}: {compiled} kernel(s) compiled, not in the bundle")
    if executing and c.failed:  # launched where its error did not end the workload (a thread)
        out.append(f"{device}: {c.failed} kernel(s) failed to compile, not in the bundle")
    if not executing and queued > 0:
        out.append(f"{device}: {queued} kernel(s) queued, not in the bundle")
    if not executing and a.unrecorded - tunes > 0:
        out.append(f"{device}: {a.unrecorded - tunes} tune(s) reached, not recorded in the bundle")
    if a.measured - tunes > 0:
        out.append(f"{device}: {a.measured - tunes} tune(s) measured, not in the bundle")
    if a.failed:  # reached where its error did not end the workload (a thread): none stored
        out.append(f"{device}: {a.failed} tune(s) failed (every candidate), not in the bundle")
    return out


def warm_bundle(
    workload: Workload,
    open_devices: Callable[[], list[Device]],
    bundle_path: Path,
    *,
    verify: bool = True,
    jobs: int | None = None,
    compile_timeout: float | None = None,
    allow_discarded_reads: bool = False,
    observer: Observer | None = None,
    trusted_keys: Sequence[bytes] | None = None,
    signing_key: Any = None,
    shard: Shard | None = None,
) -> RunReport:
    """Both warming passes, the bundle written (and signed, given `signing_key`), then the
    verify pass."""
    report = RunReport(bundle_path, [], shard="" if shard is None else str(shard))
    try:
        _warm(
            report,
            workload,
            open_devices,
            verify=verify,
            jobs=jobs,
            compile_timeout=compile_timeout,
            allow_discarded_reads=allow_discarded_reads,
            observer=observer,
            trusted_keys=trusted_keys,
            signing_key=signing_key,
            shard=shard,
        )
    except (KeyboardInterrupt, WorkloadError) as exc:  # what its stores kept is said
        raise kept_after(_ran_before(exc, report.passes), report) from None
    said_once(report.passes)
    return report


def _remove_made(path: Path, empty: bool, *, opened: bool) -> None:
    """A first run's bundle that failed with nothing stored: no bundle left (an empty file
    given: emptied), no lock file. One whose open failed (refused by the disk, interrupted
    as it made the file: its lock file and the empty bundle were left) too, but only where
    no other writer holds the lock now: a lock another first run holds stays, and is not
    waited for again after an interrupt. A clean-up that fails leaves the run's own error."""
    bounded = contextlib.nullcontext() if opened else waiting_at_most(0)
    with contextlib.suppress(OSError), bounded:
        remove_new(path, was_empty=empty)


def _ran_before(exc: BaseException, passes: list[PassReport]) -> BaseException:
    """`exc`, where the workload's own code raised it (no warm error) in the second pass,
    with that said: `warm run` calls it once a pass in one process, so what its first run
    left (a folder it made) may be what it trips on now (not said of the verify pass, whose
    reads give real data: an error of that data is no leftover)."""
    cause = exc.__cause__
    if len(passes) != 1 or not isinstance(cause, Exception) or isinstance(cause, WarmError):
        return exc
    before = passes[0].mode
    first, lines, more = str(exc).partition("\n")
    said = WorkloadError(
        f"{first} (it ran to its end in this process before, during {before}: warm calls it "
        f"once a pass, so it must run again after it returned, whatever its earlier run left, "
        f"a folder or file it made){lines}{more}"
    )
    said.notes_before = getattr(exc, "notes_before", ())
    return said


def said_once(passes: list[PassReport]) -> None:
    """The note of forked children that launched made by the first pass that saw some only,
    naming every pass that did and counting all their children (each pass forks its own)."""
    saw = [p for p in passes if p.forked]
    for later in saw[1:]:
        later.notes = [n for n in later.notes if n != forked_note(later.mode, later.forked)]
    if len(saw) > 1:
        first, said = saw[0], forked_note(saw[0].mode, saw[0].forked)
        every = [pid for p in saw for pid in p.forked]  # the first pass's first
        once = forked_note(first.mode, every, [p.mode for p in saw[1:]])
        first.notes = [once if n == said else n for n in first.notes]


def _warm(
    report: RunReport,
    workload: Workload,
    open_devices: Callable[[], list[Device]],
    *,
    verify: bool,
    jobs: int | None,
    compile_timeout: float | None,
    allow_discarded_reads: bool,
    observer: Observer | None,
    trusted_keys: Sequence[bytes] | None,
    signing_key: Any,
    shard: Shard | None,
) -> None:
    bundle_path = report.bundle
    devices = open_devices()
    report.devices = [d.id for d in devices]
    created, empty = not bundle_path.exists(), is_empty_file(bundle_path)  # mktemp's: new
    bundle: Bundle | None = None
    extra: Companions | None = None
    finished = False
    try:
        probe = CompilerProbe(devices, report.compilers)
        try:
            report.format_before = None if created or empty else FORMAT_VERSION  # None: new
            with contextlib.suppress(OSError, BundleError):  # an older one is migrated as it
                report.format_before = check_header(bundle_path)[0]  # opens to write: said so
            signs = signing_key is not None  # it signs what it stores: its own builds, only
            bundle = Bundle.open(bundle_path, write=True, trusted_keys=trusted_keys, signs=signs)
            bundle.own_builds = signs
            if not created:  # a write beside a stale index adds to it: refused, as readers do
                require_consistent(bundle)
            probe.join()
        except BaseException:  # an interrupt included: the probe's `--version` stops too
            probe.stop()
            raise
        dropped = 0 if created else drop_corrupt(bundle)
        warming, new = bundle, created or empty

        def make(d: Device) -> Runtime:
            return Runtime(
                d,
                warming,
                jobs=jobs,
                compile_timeout=compile_timeout,
                allow_discarded_reads=allow_discarded_reads,
                misses=None,  # warming: every miss is expected, none is explained
                shard=shard,
            )

        runtimes = [make(d) for d in devices]
        extra = hosts = Companions(make, runtimes)
        args = (workload, runtimes, observer)  # each pass's
        report.passes.append(run_pass(ProcessMode.COMPILE_ONLY, "CompileOnly", *args, extra=hosts))
        if dropped:
            report.passes[-1].notes.insert(
                0,
                f"removed {dropped} kernel(s) whose blob failed its sha256 "
                "(rebuilt where the workload launches them)",
            )
        idle = not shard and not did_something(report.passes[-1].total)
        idle = idle and not any(n.startswith(CANNOT_BUILD) for n in report.passes[-1].notes)
        path = workload.path  # (no hint for a block that only calls the entry: warm ran it)
        if idle and guarded_main(path) and not block_only_calls(path, workload.entry):
            report.passes[-1].notes.append(f"the workload did nothing: {MAIN_GUARD_HINT}")

        def persist(completed: bool) -> None:
            # Whatever was built or measured before a failure stays stored; once the workload
            # ran to its end, the run's record is in the last write (one commit: `join_record`).
            every = runtimes + hosts.runtimes
            last = max((i for i, r in enumerate(every) if r.unstored()), default=-1)
            try:
                for i, runtime in enumerate(every):
                    if completed and i == last:
                        join_record(warming, signing_key, (workload, report.devices, shard), new)
                    try:  # the lock first: a wait for another writer stops on Ctrl-C at once
                        with write_lock(warming.path), held_interrupts():  # committed, counted
                            k, t = runtime.persist(warming)
                            note_stored(k, t)
                            report.stored_kernels += k
                            report.stored_tunes += t
                    except BundleError as exc:  # only times of use left to write, to a bundle
                        if i <= last or not exc.unwritable:  # this process may not write: it
                            raise  # is served as a read-only process is, nothing written
                        report.unwritten = exc.problem
                    for label, _, why in runtime.kernels.never_stored():  # (in its pass's notes)
                        note_reported(f"kernel {label}: not stored: never served ({why})")
                    for label, why in list(runtime.tunes.never.values()):
                        note_reported(f"tune {label}: not stored: never served ({why})")
            except BundleError as exc:  # an earlier device's store stands: said so
                raise kept_before(exc, warming, report) from None
            finally:
                warming.joining = None  # (none consumed it: `seal` records the run)

        mode = ProcessMode.COMPILE_AND_AUTOTUNE
        report.passes.append(
            run_pass(mode, "CompileAndAutotune", *args, finish=persist, extra=hosts)
        )
        finished = True
        stored = report.stored_kernels + report.stored_tunes
        run = (workload, report.devices, shard)
        report.signature = seal(bundle, signing_key, stored, run, new)
    finally:
        if extra is not None:  # its runtimes and the pass's retired: a late thread stops
            report.devices += [r.device.id for r in extra.runtimes]
            report.compilers += [compiler_info(r.device) for r in extra.runtimes]
            late = extra.close()  # (made once the passes' statistics were read)
            if report.passes:
                report.passes[-1].notes += late
        for d in devices:
            d.close()
        if bundle is not None:
            bundle.close()
        if (created or empty) and not finished and not report.stored_kernels + report.stored_tunes:
            _remove_made(bundle_path, empty, opened=bundle is not None)
    if verify:
        fresh = open_devices()
        try:
            verify_report, report.missing = verify_pass(
                workload,
                fresh,
                bundle_path,
                jobs=jobs,
                compile_timeout=compile_timeout,
                allow_discarded_reads=allow_discarded_reads,
                observer=observer,
                trusted_keys=trusted_keys,
                shard=shard,
            )
            report.passes.append(verify_report)
        finally:
            for d in fresh:
                d.close()
