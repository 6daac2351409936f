"""Why a bundle missed: the nearest entry it does hold, and which part of the key differs.

A miss (a kernel or tune the loaded bundle lacks) is explained by reading the bundle's entries for
the same kernel entry or tunable operation (an indexed query, run only on a miss), taking the
nearest one (fewest differing key components) and naming the component that differs: `toolchain`,
`arch`, `options`, `defines`, `source`, `headers` (those it includes from its include folders; which
of them differ, by name, where the build kept their names: `warmcli.runtime.shown`, which shows
every component's value) for a kernel; `device` (fingerprint), `checksum` (candidate set, output
check), `shape` (shape/dtype key; of a form no held key has, a changed `key=`'s, it says so:
`nearest`), `toolchain` (its pick measured on a build of its kernel not served here as this
process's: measured again) and `launch` (its launch function refuses the bundle's pick, said by
`misses`: `warmcli.runtime.tune_served`) for a tune; `absent` when the bundle holds nothing of that
entry or operation, `pending` for a tune only recorded without a GPU, `binary` for a build whose
blob cannot be served, `corrupt` for an entry whose row is malformed (it is never served; a
malformed row of the same entry or operation is skipped when looking for the nearest; one SQLite
cannot hand back, which stops that listing, explains the miss as corrupt), `signature` when only the
parameter letters or language differ, `unsigned` when the bundle holds the entry but no trusted key
signed it (`warmcli.bundle.signing`), `no-bundle` when strict mode meets a compile or tune with no
bundle loaded at all, `removed` where the bundle's file was deleted and a process forked since finds
none to read, `locked` where another process kept the bundle locked past the wait for it and
`unread` where this process reads no bundle (forked while another thread read it for over 5 s:
`warmcli.forking.sqlite_unsafe`), an entry's row or a build's blob alike (`_not_read`). Held values
are shown cut, three at most (`_first`: the rest counted), options or defines not the JSON warm
writes as the bundle's text (never raised into the launch that missed). What a runtime does with an
explanation (count, log, refuse with `StrictMissError`) is the miss policy's,
`warmcli.runtime.misses`, which also keeps an entry's listing (`listed_kernels`,
`warmcli.runtime.tune_listing`'s `listed_tunes`: a `warmcli.runtime.nearest.Listed`) for its next
miss, so that many misses of one entry read its rows once (another process's rows written meanwhile
are not seen by the later ones). This module is pure: it only reads the bundle it is handed, owns no
state, counts nothing and never prints or logs; it is imported at the first miss (a process its
bundle serves wholly never loads it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from warmcli.backends.serving import NVCC_ENVIRONMENT
from warmcli.backends.toolchain import NATIVE
from warmcli.errors import FORKED_READING, LOCKED, REMOVED, BundleError
from warmcli.records import MissExplanation
from warmcli.runtime.nearest import (
    Listed,
    float_hint,
    key_form_hint,
    nearest,
    nearest_values,
    reordered_hint,
)
from warmcli.runtime.shown import changed_headers, held_text, memo_show, show
from warmcli.runtime.tune_listing import listed_tunes, names_text

if TYPE_CHECKING:
    from warmcli.kernel import Kernel
    from warmcli.records import TuneRecord
    from warmcli.runtime.store import Store


KERNEL_COMPONENTS = ("toolchain", "arch", "options", "defines", "source", "headers")
TUNE_COMPONENTS = ("device", "checksum", "shape")
DEVICE_FIELDS = ("backend", "name", "arch", "driver")
REASONS = {
    "toolchain": "toolchain (compiler and version)",
    "arch": "architecture",
    "options": "compile options",
    "defines": "defines",
    "source": "source",
    "headers": "included headers",
    "signature": "parameter letters or language",
    "device": "device fingerprint",
    "checksum": "candidate set or output check",
    "shape": "shape/dtype key",
    "launch": "launch function refuses the pick",
    "absent": "not in the bundle",
    "pending": "tune pending",
    "binary": "binary unusable",
    "unsigned": "not signed by a trusted key",
    "corrupt": "corrupt entry",
    "removed": "bundle file removed",
    "no-bundle": "no bundle loaded",
    "locked": "bundle locked by another process",
    "unread": "bundle not read in this process",
}
UNSIGNED = "bundle's entry is not signed by a trusted key (changed or added since it was signed)"
NO_BUNDLE = "no bundle is loaded (use_bundle, WARM_BUNDLE or the default bundle)"
REMOVED_DETAIL = "the bundle's file was deleted while its parent served it (a forked process \
opens it anew): replace a served bundle by a rename, as warm run does, never delete it"
PROCESS = "this process wants"
_SHOWN = 3
_Row = TypeVar("_Row")  # what `_held` lists: a kernel's components


# -- finding the nearest entry -----------------------------------------------------------------


def listed_kernels(bundle: Store, entry: str) -> Listed[Mapping[str, str]]:
    """The components of the bundle's builds of the entry name `entry`, for its misses:
    those an explanation compares, each text kept once however many builds name it."""
    rows = lambda: bundle.each_kernel(entry, _skip)  # noqa: E731
    return Listed(_held(lambda: [_compared(r.components) for r in rows() if r.components]))


def _compared(components: Mapping[str, str]) -> dict[str, str]:
    return {
        c: sys.intern(v) if type(v) is str else v
        for c, v in components.items()
        if c in KERNEL_COMPONENTS or c == "header_files"  # (which headers: `changed_headers`)
    }


def _values(
    component: str, held: Sequence[Mapping[str, str]], listed: Listed[Any] | None = None
) -> str:
    memo = listed.shown if listed is not None else {}

    def say() -> str:
        return _first(memo_show(component, h.get(component, ""), memo) for h in held)

    # The same nearest entries as an earlier miss's (`listed`'s index): said once.
    return listed.said(component, held, say) if listed is not None else say()


def _first(texts: Iterable[str]) -> str:
    """The first `_SHOWN` distinct of `texts` (held values, each cut), and how many more:
    held entries alike but in one field may be thousands (a fleet's device names)."""
    shown = list(dict.fromkeys(texts))
    more = f" (+{len(shown) - _SHOWN} more)" if len(shown) > _SHOWN else ""
    return " | ".join(shown[:_SHOWN]) + more


def describe(
    component: str,
    held: Sequence[Mapping[str, str]],
    wanted: Mapping[str, str],
    who: str = PROCESS,
    listed: Listed[Any] | None = None,
) -> str:
    """'bundle has X, <who> Y' for one differing component (a device's: which field);
    `listed` keeps what is shown of its held entries for the next miss."""
    if component == "device":
        ours = wanted["device"].split("|")
        theirs = [h["device"].split("|") for h in held]
        for i, name in enumerate(DEVICE_FIELDS):
            if any(t[i : i + 1] != ours[i : i + 1] for t in theirs):
                values = _first(held_text("|".join(t[i : i + 1])) for t in theirs)
                return f"{name}: bundle has {values}, {who} {'|'.join(ours[i : i + 1])}"
    if component == "checksum" and "candidates" in wanted:
        names = {h.get("candidates", "") for h in held}
        if names != {wanted["candidates"]}:
            said = _first(sorted(held_text(n) for n in names))
            return f"bundle has {said}, {who} {wanted['candidates']}"
        return (
            "same candidate names, a candidate's kernel (or a header it includes), the output check"
            f" or the launch function (with a check) differs: bundle has "
            f"{_values(component, held, listed)}, {who} {show(component, wanted[component])}"
        )
    if component == "shape":  # the nearest shapes first, not the alphabetically first
        memo = listed.shown if listed is not None else {}
        text = lambda h: memo_show(component, h.get(component, ""), memo)  # noqa: E731
        values = nearest_values(held, wanted["shape"], listed, text, _SHOWN)
        return f"bundle has {values}, {who} {show(component, wanted['shape'])}"
    ours = show(component, wanted.get(component, ""))  # headers: none keyed in this process
    which = changed_headers(held, wanted) if component == "headers" else ""  # (named)
    which += reordered_hint(held, wanted[component]) if component == "options" else ""
    return f"bundle has {_values(component, held, listed)}, {who} {ours}{which}"


def explained(
    kind: str,
    key: str,
    label: str,
    wanted: Mapping[str, str],
    held: Sequence[Mapping[str, str]],
    order: Sequence[str],
    who: str = PROCESS,
    listed: Listed[Any] | None = None,
) -> MissExplanation | None:
    """The explanation against the nearest of `held` (`listed`'s held, by its index, if
    given); None when one matches in every component."""
    if listed is None:
        differs, near = nearest(wanted, held, order)
    else:
        differs, near = listed.nearest(wanted, order)
    if not differs:
        return None
    detail = describe(differs[0], near, wanted, who, listed)
    return MissExplanation(kind, key, label, differs[0], detail, differs)


# -- the two kinds of miss ---------------------------------------------------------------------


def explain_kernel(
    bundle: Store,
    kernel: Kernel,
    key: str,
    wanted: Mapping[str, str],
    any_toolchain: bool = False,
    refused: Callable[[], tuple[str, str] | None] = lambda: None,
    listing: Callable[[], Listed[Mapping[str, str]]] | None = None,
) -> MissExplanation:
    """Why the bundle has no build `key` of `kernel`; `wanted` is its `key_components`.

    `any_toolchain` (serving, `warmcli.backends.serving`): the toolchain is no reason for a
    miss, but for a kernel tuned for this CPU (`-march=native`); a build that matches in
    every other part is then one the serving rule refuses here, and `refused` says why
    (component, reason: a CUDA release the driver does not support), if it does. `listing`:
    the entry's builds (`listed_kernels`, as an earlier miss may have listed them), else
    listed now."""
    if bundle.refused(key):
        return MissExplanation("kernel", key, kernel.label, "unsigned", UNSIGNED)
    listed = listing() if listing is not None else listed_kernels(bundle, kernel.entry)
    held = listed.rows
    if isinstance(held, str):
        return corrupt_entry("kernel", key, kernel.label, held)
    if not held:  # (one never served, `warmcli.unkeyed`, says so: `changed_headers`)
        absent = f"bundle holds no kernel {kernel.entry!r}" + changed_headers((), wanted)
        return MissExplanation("kernel", key, kernel.label, "absent", absent)
    # Serving takes any toolchain's build, but not one tuned for another CPU: its toolchain
    # names that CPU (`warmcli.backends.native`), so then it is a reason; nor one by an nvcc
    # that read options from the environment where the other did not.
    native = NATIVE in wanted.get("toolchain", "")
    environment = NVCC_ENVIRONMENT in wanted.get("toolchain", "") or listed.holds(
        lambda c: NVCC_ENVIRONMENT in c.get("toolchain", ""), "nvcc environment"
    )
    order = (
        KERNEL_COMPONENTS if native or environment or not any_toolchain else KERNEL_COMPONENTS[1:]
    )
    found = explained("kernel", key, kernel.label, wanted, held, order, listed=listed)
    if found is not None:
        return found
    why = refused() if any_toolchain else None
    if why is not None:
        return MissExplanation("kernel", key, kernel.label, why[0], why[1], (why[0],))
    said = (
        "bundle has a build with the same source, options, defines, arch and toolchain; "
        f"its parameter letters or language differ (this process: {kernel.params!r}, "
        f"{kernel.language})"
    )
    return MissExplanation("kernel", key, kernel.label, "signature", said)


def corrupt_entry(kind: str, key: str, label: str, error: str) -> MissExplanation:
    """The bundle holds a row under `key` that is malformed (or, `REMOVED`, no file to read:
    a process forked after it was deleted opens it anew): a miss, never served."""
    not_read = _not_read(kind, key, label, error)
    if not_read is not None:
        return not_read
    reason, detail = ("removed", REMOVED_DETAIL) if error == REMOVED else ("corrupt", None)
    return MissExplanation(kind, key, label, reason, detail or f"bundle's entry: {error}")


def _not_read(kind: str, key: str, label: str, error: str) -> MissExplanation | None:
    """The miss of an entry this process could not read (`error` a `BundleLocked`'s: another
    process kept the bundle locked, or this one forked while a thread read it), if it is one:
    `locked` or `unread`, never `corrupt` or `binary` (said from the lock's own words on)."""
    for reason, words in (("unread", FORKED_READING), ("locked", LOCKED)):
        at = error.find(words)
        if at >= 0:
            return MissExplanation(kind, key, label, reason, error[at:])
    return None


def _held(read: Callable[[], list[_Row]]) -> list[_Row] | str:
    """The components `read` lists of an entry's or operation's rows, or the problem that
    stopped the listing (a row SQLite cannot hand back: text that is not UTF-8, a value
    longer than warm reads), which explains the miss as corrupt."""
    try:
        return read()
    except BundleError as exc:
        return exc.problem


def _skip(key: str, problem: str) -> None:
    """A malformed row met while looking for the nearest entry: not a candidate."""


def unusable_binary(kernel: Kernel, key: str, error: str) -> MissExplanation:
    """The bundle holds the build but its blob cannot be served (missing or corrupt)."""
    not_read = _not_read("kernel", key, kernel.label, error)
    if not_read is not None:
        return not_read
    return MissExplanation("kernel", key, kernel.label, "binary", f"bundle's build: {error}")


def explain_tune(
    bundle: Store,
    operation: str,
    checksum: str,
    candidates: Iterable[str] | Mapping[str, Kernel],
    key: str,
    shape_key: str,
    device_identity: str,
    record: TuneRecord | None,
    listing: Callable[[], Listed[TuneRecord]] | None = None,
) -> MissExplanation:
    """Why the bundle has no measured pick under `key` for the tunable `operation` (its
    candidate set's `checksum` and candidates: names, or names to kernels, which tell a
    candidate's kernel that differs from a check or launch function that does) on these
    inputs. `listing`: the operation's tunes (`listed_tunes`, as an earlier miss may have
    listed them), else listed now."""
    label = f"{operation} {shape_key}"
    if bundle.refused(key):
        return MissExplanation("tune", key, label, "unsigned", UNSIGNED)
    if record is not None and record.status == "pending":
        detail = "bundle holds this tune only as pending (not measured)"
        return MissExplanation("tune", key, label, "pending", detail)
    if record is not None and record.pick in candidates:  # measured on another build of it
        detail = (
            f"bundle's pick {record.pick!r} was measured on another build of its kernel, one "
            "not served here as this process's (a wrapper's other flags, another CPU's, one "
            "the bundle no longer holds): measured again here"
        )
        return MissExplanation("tune", key, label, "toolchain", detail, ("toolchain",))
    if record is not None:
        detail = f"bundle's pick {record.pick!r} is not a candidate here"
        return MissExplanation("tune", key, label, "checksum", detail, ("checksum",))
    wanted = {
        "device": device_identity,
        "checksum": checksum,
        "shape": shape_key,
        "candidates": names_text(candidates),
    }
    listed = listing() if listing is not None else listed_tunes(bundle, operation)
    records = listed.rows
    if isinstance(records, str):
        return corrupt_entry("tune", key, label, records)
    if not records:
        return MissExplanation("tune", key, label, "absent", f"bundle holds no {operation!r}")
    found = explained("tune", key, label, wanted, listed.held, TUNE_COMPONENTS, listed=listed)
    if found is None:  # equal components, an equal key: another process wrote it since
        detail = "bundle holds it now: another process wrote it after this one looked"
        return MissExplanation("tune", key, label, "absent", detail)
    if found.reason == "checksum" and isinstance(candidates, Mapping):
        return _which_part(bundle, found, listed, wanted, candidates)
    hint = found.reason == "shape" and (
        key_form_hint(listed, shape_key) or float_hint(listed, shape_key)
    )
    if hint:
        return MissExplanation("tune", key, label, "shape", found.detail + hint, found.differs)
    return found


def _which_part(
    bundle: Store,
    found: MissExplanation,
    listed: Listed[TuneRecord],
    wanted: Mapping[str, str],
    kernels: Mapping[str, Kernel],
) -> MissExplanation:
    """A checksum miss among the same candidate names, told apart: a candidate whose kernel
    is not the bundle's build of it (its key recomputed), or, every kernel the bundle's, the
    output check or launch function (keyed by their code: a Python upgrade changes it)."""
    pairs = zip(listed.rows, listed.held, strict=True)
    same = [r for r, h in pairs if h["candidates"] == wanted["candidates"]]
    near = [r for r in same if r.device == wanted["device"]] or same
    record = next((r for r in near if r.shape_key == wanted["shape"]), near[0] if near else None)
    if record is None:
        return found
    try:  # listed without its candidates (`tune_listing`): read again (no sample made)
        whole = bundle.tune(record.key, samples=False)
        differs = None if whole is None else _differing_kernel(bundle, whole, kernels)
    except BundleError:  # a malformed kernel row: said as before
        return found
    if differs is None or whole is None:
        return found
    what = (
        f"same candidate names, the kernel of candidate {differs!r} (or a header it includes) "
        "is not the bundle's"
        if differs
        else "same candidates and kernels as the bundle's: the output check or the launch "
        "function differs (an edit, a value they read, or another Python version: their code "
        "is keyed as this Python compiles it)"
    )
    detail = (
        f"{what}: bundle has {show('checksum', record.checksum)}, "
        f"{PROCESS} {show('checksum', wanted['checksum'])}"
    )
    return MissExplanation(found.kind, found.key, found.label, "checksum", detail, found.differs)


def _differing_kernel(
    bundle: Store, record: TuneRecord, kernels: Mapping[str, Kernel]
) -> str | None:
    """The first of `record`'s candidates whose kernel here is not the build the bundle
    holds for it; "" when every one is; None when that cannot be told (a candidate that
    failed, a build the bundle does not serve)."""
    from warmcli.kernel import kernel_key

    for candidate in record.candidates:
        kernel = kernels.get(candidate.name)
        built = bundle.kernel(candidate.kernel_key)
        if kernel is None or built is None:
            return None
        if kernel_key(kernel, built.arch, built.toolchain) != candidate.kernel_key:
            return candidate.name
    return ""
