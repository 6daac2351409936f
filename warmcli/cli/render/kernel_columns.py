"""How a listing of kernels names them (`warm stats`, `warm diff`): each kernel's label,
and the columns that tell apart kernels of one label (their compile options; their source
text's digest, where one label stands for several sources on one device and arch, as a
string template formatted with different values makes: `sources_apart`, the rule `warm
check`'s table follows too; the digest of the headers it read, where one kernel has builds
of several: `kernel_headers`; the compiler that built each, where one kernel has builds by
several: `kernel_toolchains`). Pure presentation over `kernel_json` documents
(`warmcli.cli.render.stats`); it owns no state and never prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from warmcli.cli.render import add_row, listing, when
from warmcli.cli.render.shown import compile_time
from warmcli.kernel_parts import cuda_release
from warmcli.records import where

if TYPE_CHECKING:  # (Rich: imported when a table is built)
    from rich.table import Table

SOURCE_SHOWN = 8  # hex digits a table shows of a source's digest (`source_sha256`)


def kernel_name(k: dict[str, Any]) -> str:
    """How every command names a kernel (its `kernel_json`): its label (`Kernel.label`, the
    entry and its defines), as `warm clean`, `warm check` and a process's misses name it,
    whatever tune it is a candidate of (a PTX twin is none)."""
    return str(k["label"])


def kernel_options(kernels: list[dict[str, Any]]) -> list[str] | None:
    """The compile options of each kernel (`kernel_json`), shown in a column of their own
    so that two kernels of one name read differently; None when none has any."""
    shown = [" ".join(map(str, k.get("options") or ())) for k in kernels]
    return shown if any(shown) else None


def kernel_sources(kernels: list[dict[str, Any]]) -> list[str] | None:
    """Each kernel's source digest (`source_sha256`, its first `SOURCE_SHOWN` digits: the
    same for a source's cubin and its PTX), shown in a column of their own where one label
    of `kernels` stands for more than one source text on one device and arch (a PyCUDA
    program's template, formatted with several block sizes); None where none does (a host
    and a CUDA kernel of one name are told apart by their device already)."""
    named = ((k["device"], k["arch"], k["label"], k.get("source_sha256")) for k in kernels)
    if not sources_apart(named):
        return None
    return [str(k.get("source_sha256") or "-")[:SOURCE_SHOWN] for k in kernels]


def kernel_headers(kernels: list[dict[str, Any]]) -> list[str] | None:
    """Each kernel's headers digest (`headers_sha256`, its first `SOURCE_SHOWN` digits; `-`
    for none), shown in a column of their own where one kernel of `kernels` (one device,
    arch, label, source, options and toolchain) has builds of several (a header it
    includes edited, then warmed again: rows that would read alike); None where none has."""
    made = _builds(kernels, (*_ONE_KERNEL, "toolchain"), "headers_sha256")
    if all(len(headers) < 2 for headers in made.values()):
        return None
    return [str(k.get("headers_sha256") or "-")[:SOURCE_SHOWN] for k in kernels]


# The fields of a `kernel_json` that one kernel's builds share (its device, arch, name,
# source and options): `_builds` groups by them.
_ONE_KERNEL = ("device", "arch", "label", "source_sha256", "options")


def _builds(
    kernels: list[dict[str, Any]], alike: tuple[str, ...], field: str
) -> dict[tuple[str, ...], set[str]]:
    """The values of `field` (a blank one as `-`) the kernels of `kernels` alike in the
    fields `alike` hold, by those fields' values."""
    held: dict[tuple[str, ...], set[str]] = {}
    for k in kernels:
        held.setdefault(tuple(str(k.get(f)) for f in alike), set()).add(str(k.get(field) or "-"))
    return held


def sources_apart(kernels: Iterable[tuple[object, object, object, object]]) -> bool:
    """Whether one label stands for more than one source text on one device and arch, of
    `kernels` given as (device, arch, label, source digest): where a listing of them shows
    a `source` column (`warm stats`' and `warm diff`'s, `kernel_sources`; `warm check`'s
    table): one rule for every listing. A host and a CUDA kernel of one name, or one source
    built for two archs, are told apart by their device and arch: no column."""
    sources: dict[tuple[str, str, str], set[str]] = {}
    for device, arch, label, digest in kernels:
        sources.setdefault((str(device), str(arch), str(label)), set()).add(str(digest or ""))
    return any(len(s) > 1 for s in sources.values())


def kernel_toolchains(kernels: list[dict[str, Any]]) -> list[str] | None:
    """Each kernel's toolchain, shown in a `built by` column where one kernel of `kernels`
    (one device, arch, label, source and options) has builds by several (nvcc's and NVRTC's,
    warmed with each): a CUDA compiler by its name and release (`nvcc 13.0`), any other, or
    two that would read alike so, whole; None where no kernel has two."""
    made = _builds(kernels, _ONE_KERNEL, "toolchain")
    if all(len(toolchains) < 2 for toolchains in made.values()):
        return None
    shown: dict[str, str] = {}
    for toolchains in made.values():
        release = {t: cuda_release(t) for t in toolchains}
        short = {t: f"{t.partition(':')[0]} {r[0]}.{r[1]}" if r else t for t, r in release.items()}
        alike = len(set(short.values())) < len(toolchains)  # (two builds by one release)
        shown.update({t: t if alike else short[t] for t in toolchains})
    return [shown[str(k.get("toolchain") or "-")] for k in kernels]


def kernels_table(title: str, kernels: list[dict[str, Any]]) -> Table:
    """One row per kernel (its `kernel_json`): where, what (with its options, source and
    headers where they tell kernels of one label apart, and the compiler that built it where one
    kernel has builds by several), its share of its binary's size (a batch's
    kernels share one binary) and its part of the compile time (`seconds`: each compile
    counted once), its key, its last use."""
    table = listing(title)
    options, sources = kernel_options(kernels), kernel_sources(kernels)
    headers, built = kernel_headers(kernels), kernel_toolchains(kernels)
    table.add_column("device", no_wrap=True)
    table.add_column("kernel", overflow="fold")
    if options is not None:
        table.add_column("options", overflow="fold")
    if sources is not None:
        table.add_column("source", no_wrap=True)
    if headers is not None:
        table.add_column("headers", no_wrap=True)
    if built is not None:
        table.add_column("built by", overflow="fold")
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("compile", justify="right", no_wrap=True)
    table.add_column("key", no_wrap=True)
    table.add_column("last used", no_wrap=True)
    for i, k in enumerate(kernels):
        used = when(k.get("last_used"), "minutes").replace("T", " ") if k.get("last_used") else "-"
        add_row(
            table,
            where(k["device"], k["arch"]),
            kernel_name(k),
            *([] if options is None else [options[i]]),
            *([] if sources is None else [sources[i]]),
            *([] if headers is None else [headers[i]]),
            *([] if built is None else [built[i]]),
            f"{k['bytes']:,}",
            compile_time(k["seconds"]),
            k["key"][:8],
            used,
        )
    return table
