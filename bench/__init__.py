"""warm's benchmarks: the speed warm exists for, measured side by side with what users do today.

`python -m bench` (`make bench`) runs every family in one process and prints one
Rich table of ratios, each beside its target, and writes them to
`bench/results.json` as rows `{"name", "ratio", "target", "met", "detail"}`. One
module per family: `compile` (warm's batch against one compiler process per
kernel, two at a time), `start` (whole fresh processes: cold against hot, hot
against the floor, and `import warmcli` against `import numpy`), `serve` (µs per
kernel served from the bundle at several sizes), `dispatch` (launch overhead),
`scale` (a 10,000-kernel bundle: open, `stats`, `stats --json`, `verify`),
`overhead` (the whole `warm run` against its own compile and measurement time).
Figures on a shared machine are noisy: both sides of a ratio are measured in the
same run, and medians are reported unless a row says otherwise.
Benchmarks are not tests: they never run in `make test`; a smoke test runs each
at a tiny size.
"""
