"""`warm check`: preflight on the production machine: can it serve every entry of a bundle?

It opens the bundle as production opens it (a URL's copy, under `WARM_TRUSTED_KEYS` the last
good one where the store's is refused), the devices asked for (`--device`, `--arch`), and
prints what `warmcli.ops.check.check_servable` judged: who is here, the summary line (each
kernel once, with its builds where they are more; the tunes; the builds and tune records only
other architectures use), what is served by PTX JIT, what was not checked (a backend with no device
here; CUDA's with the archs its cubins are for), that no GPU looks up an `--arch sm_90a` device's
builds, and one row per reason of what is not servable (a `source` column where one label stands for
several sources on one device and arch, as `warm stats` shows it), or all of it as one JSON document
(each kernel entry with its `source_sha256`). Exit 1 where an entry checked is not servable. It
judges nothing itself and owns no state.
"""

from __future__ import annotations

import typer

from warmcli.backends.base import COMPILE_ONLY
from warmcli.backends.machine import machine_devices
from warmcli.bundle.store import Bundle, BundleError
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import readable_bundle, shown_name
from warmcli.cli.common import (
    ArchOpt,
    BundleOrUrlArg,
    CompilerOpt,
    DeviceOpt,
    JsonOpt,
    NvccOpt,
    emit_json,
    fail,
    guarded,
    out,
    unused_nvcc,
)
from warmcli.cli.render import add_row, listing
from warmcli.cli.render.kernel_columns import SOURCE_SHOWN, sources_apart
from warmcli.ops.check import CheckReport, check_servable
from warmcli.printable import Pattern, printable
from warmcli.runtime.explain import REASONS, MissExplanation

DRIVER = Pattern(r"[0-9]{1,3}\.[0-9]{1,3}")  # ASCII X.Y, whole (`fullmatch`)
# An NVIDIA driver's own version (nvidia-smi's `Driver Version`, 550.54), not a CUDA release:
# taken as CUDA 550.54 it passed every build no CUDA 12.4 driver loads; as nvidia-smi prints it
# (575.51.03) it is told so too, not only that it is no X.Y.
DRIVER_VERSION = Pattern(r"[1-9][0-9]{2}(?:\.[0-9]{1,3}){1,2}")


@app.command()
def check(
    bundle: str | None = BundleOrUrlArg,
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    nvcc: str | None = NvccOpt,
    compiler: str | None = CompilerOpt,
    as_json: bool = JsonOpt,
    driver: str | None = typer.Option(
        None,
        "--driver",
        metavar="X.Y",
        help="With --arch: the CUDA release the fleet's driver supports (e.g. 13.0).",
    ),
) -> None:
    """Can this machine serve every entry of BUNDLE, without running a workload?

    For every device here, every kernel BUNDLE holds must have a build that runs on it
    (its arch; a cubin's CUDA major release, PTX's release, no newer than the driver's;
    any compiler) whose blob
    matches its sha256, and every tune a measured pick on it. A servable entry's builds
    for other architectures only are counted as such, never failing; the
    entries of a backend with no device here (CUDA without a GPU or --arch) are not
    checked, and said so, never failing.
    --driver states the fleet's driver for an --arch device, which has none here.

    Exit 0 when every entry checked here is servable (or none could be), 1 when not.
    """
    unused_nvcc(nvcc, compiler)
    stated, driver = driver is not None, driver or ""  # (`--driver ""` stated none: refused)
    if DRIVER_VERSION.fullmatch(driver):
        fail(
            f"--driver {driver}: that is an NVIDIA driver's version, not a CUDA release: give "
            "the CUDA release it supports (nvidia-smi's 'CUDA Version', such as 12.4)"
        )
    if stated and not DRIVER.fullmatch(driver):
        fail(f"--driver {driver!r}: give a CUDA release such as 13.0, with --arch")
    if driver and not arch:
        fail(f"--driver {driver} needs --arch: it states the driver of a GPU-less --arch device")
    from warmcli.bundle.served import renamed, trusted  # as production opens it

    keys = guarded(lambda: trusted(None))
    path = readable_bundle(bundle, keys)  # a download they refuse: the last good copy
    name = shown_name(bundle, path)

    def opened_bundle() -> Bundle:
        try:
            return Bundle.open(path, trusted_keys=keys)
        except BundleError as exc:  # a URL's: said of the URL, never of its local copy
            raise renamed(exc, path, name) from None

    def action() -> CheckReport:
        with opened_bundle() as opened:
            devices = machine_devices(device, arch, nvcc, compiler)
            try:
                return check_servable(opened, devices, driver)
            finally:
                for d in devices:
                    d.close()

    report = guarded(action)
    kernels, tunes = _checked(report)
    if as_json:
        emit_json(
            {
                "bundle": name,
                "servable": None if _nothing_checked(report) else report.servable,
                "kernels": report.kernels,
                "builds": report.builds,
                "tunes": report.tunes,
                "checked": {"kernels": kernels, "tunes": tunes},
                "not_for_this_machine": report.other,
                "other_builds": report.other_builds,
                "devices": [vars(o) for o in report.offers],
                "unservable": [_entry(m, report) for m in report.unservable],
                "ptx_jit": [_entry(m, report) for m in report.jit],
                "ptx_jit_count": report.jit_count,
                "unservable_count": report.unservable_count,
                "not_checked": {
                    b: {"kernels": k, "tunes": t} for b, (k, t) in report.unchecked.items()
                },
                "not_checked_archs": report.unchecked_archs,
            }
        )
    else:
        _print(report, name, driver)
    if not report.servable:
        raise typer.Exit(1)


def _print(report: CheckReport, name: str, driver: str) -> None:
    for o in report.offers:
        compiler = o.toolchain or f"no compiler ({o.problem})"
        # a compile-only device answers for the driver --driver stated (`check_servable`)
        stated = f"  driver {driver} (--driver)" if driver and o.name == COMPILE_ONLY else ""
        out.print(
            printable(f"here: {o.id}  {o.fingerprint}{stated}  {compiler}"),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if o.name == COMPILE_ONLY and o.arch[-1:] in ("a", "f"):  # `--arch sm_90a`
            from warmcli.backends.cuda.arch import no_gpu_keys  # (a CUDA device's, loaded)

            why = f"{o.id}: {no_gpu_keys(o.arch)}"
            out.print(why, style="yellow", markup=False, soft_wrap=True)
    held = printable(f"bundle {name}: {_held(report)}")
    if report.jit:
        jit = f"{report.jit_count} kernel(s) served by PTX JIT here"
        _table(report.jit, report, jit, "yellow")
        if len(report.jit) < report.jit_count:
            listed = f"{len(report.jit):,} of {report.jit_count:,}"
            out.print(
                f"the first {listed} served by PTX JIT are grouped above (warm check --json: "
                "ptx_jit_count)",
                style="dim",
                markup=False,
            )
    if _nothing_checked(report):  # no pass to claim
        out.print(
            f"{held}: nothing could be checked here", style="yellow", markup=False, soft_wrap=True
        )
        _unchecked(report)
        return
    if report.servable:
        every = "every entry checked" if report.unchecked else "every entry"
        out.print(f"{held}: {every} is servable here", style="green", markup=False, soft_wrap=True)
        _unchecked(report)
        return
    out.print(
        f"{held}: {report.unservable_count} not servable here",
        style="red",
        markup=False,
        soft_wrap=True,
    )
    _unchecked(report)
    groups = _table(report.unservable, report)
    if len(report.unservable) < report.unservable_count:
        shown = f"{len(report.unservable):,}"  # --json holds no more of them: it counts them
        out.print(
            f"the first {shown} of {report.unservable_count:,} are grouped above (warm check "
            f"--json names the same {shown}: unservable_count counts them all)",
            style="dim",
            markup=False,
        )
    elif groups < len(report.unservable):
        out.print("every entry: warm check --json", style="dim", markup=False)


def _held(report: CheckReport) -> str:
    """What the bundle holds: its kernels (their builds, where more: as `warm stats` lists
    them), its tunes, and the builds and tune records only other architectures use."""
    builds = f" in {report.builds} build(s)" if report.builds != report.kernels else ""
    held = f"{report.kernels} kernel(s){builds}, {report.tunes} tune(s)"
    records = report.other - report.other_builds
    other = [f"{report.other_builds} build(s)"] if report.other_builds else []
    other += [f"{records} tune record(s)"] if records else []
    return held + (f" ({' and '.join(other)} only other architectures use)" if other else "")


def _entry(m: MissExplanation, report: CheckReport) -> dict[str, object]:
    """One entry of `--json`: a kernel's with the digest of its source (`source_sha256`, as
    `warm stats` gives it), which tells apart kernels of one label (a string template's)."""
    if m.kind != "kernel":
        return m.as_dict()
    return {**m.as_dict(), "source_sha256": report.sources.get(m.key, "")}


def _checked(report: CheckReport) -> tuple[int, int]:
    """The kernels and tunes judged here: all but those of a backend with no device here."""
    skipped = report.unchecked.values()
    return report.kernels - sum(k for k, _ in skipped), report.tunes - sum(t for _, t in skipped)


def _nothing_checked(report: CheckReport) -> bool:
    """Whether every entry was of a backend with no device here: none judged, no pass."""
    return bool(report.unchecked) and report.servable and _checked(report) == (0, 0)


def _unchecked(report: CheckReport) -> None:
    """What was not checked: the entries of a backend with no device here, never failing."""
    for backend, (kernels, tunes) in report.unchecked.items():
        how = " (--arch sm_XX checks them for a GPU of that arch)" if backend == "cuda" else ""
        if backend == "cuda" and report.unchecked_archs:  # what the bundle's cubins are for
            named = " ".join(f"--arch {a}" for a in report.unchecked_archs)
            how = f": its cubins are for {', '.join(report.unchecked_archs)} ({named} checks them)"
        out.print(
            printable(
                f"not checked: {kernels} {backend} kernel(s), {tunes} {backend} tune(s): "
                f"no {backend} device here{how}"
            ),
            style="yellow",
            markup=False,
            soft_wrap=True,
        )


def _table(
    entries: list[MissExplanation], report: CheckReport, title: str = "", style: str = ""
) -> int:
    """One row per reason (a whole arch missing is one row), and per source where one
    label stands for several on one device and arch (`sources_apart`, as `warm stats`
    shows a `source` column: a kernel's digest, its head); returns the rows printed."""
    if title:
        out.print(title, style=style, markup=False, soft_wrap=True)
    sources, places = report.sources, report.places
    kernels = [m for m in entries if m.kind == "kernel"]
    apart = sources_apart(
        (*places.get(m.key, ("", "")), m.label, sources.get(m.key, "")) for m in kernels
    )
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for m in entries:
        source = sources.get(m.key, "")[:SOURCE_SHOWN] if apart and m.kind == "kernel" else ""
        reason = REASONS.get(m.reason, m.reason)
        groups.setdefault((m.kind, source, reason, m.detail), []).append(m.label)
    table = listing()
    for col in ("kind", "entries", *(("source",) if apart else ()), "reason", "why"):
        table.add_column(col, overflow="fold")
    for (kind, source, reason, detail), labels in groups.items():
        add_row(table, kind, _entries(labels), *((source or "-",) if apart else ()), reason, detail)
    out.print(table)
    return len(groups)


def _entries(labels: list[str]) -> str:
    """One label whole; several as their count and names (a kernel's entry, a tune's
    operation), without the defines and shapes."""
    if len(labels) == 1:
        return labels[0]
    names = dict.fromkeys(label.split("[", 1)[0].split(" ", 1)[0] for label in labels)
    return f"{len(labels)}: {', '.join(names)}"
