"""`python -m bench [--tiny] [--only NAME ...] [--out PATH]`: run, print the table, write JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from bench.rows import FULL, TINY, Row
from bench.suite import FAMILIES, run

RESULTS = Path(__file__).resolve().parent / "results.json"


def table(rows: list[Row], seconds: float) -> Table:
    title = f"warm benchmarks ({seconds:.0f} s)"
    out = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("benchmark", "ratio", "target", "met", "detail"):
        out.add_column(col, justify="right" if col == "ratio" else "left", overflow="fold")
    for row in rows:
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]-[/]"}[row.met]
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
        out.add_row(row.name, ratio, row.target, met, row.detail)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (the smoke test's)")
    parser.add_argument("--only", nargs="*", choices=sorted(FAMILIES), help="families to run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON rows go")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = run(TINY if args.tiny else FULL, args.only)
    args.out.write_text(json.dumps([r.as_dict() for r in rows], indent=2) + "\n")
    console = Console(width=max(160, Console().width))
    console.print(table(rows, time.perf_counter() - started))
    console.print(f"rows written to {args.out}")
    return 1 if any(r.detail.startswith("error:") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
