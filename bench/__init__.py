"""warm's benchmarks: the speed warm exists for, measured side by side with what users do today.

`python -m bench` (`make bench`) runs every family in one process and prints one
Rich table of ratios, each beside its target, and writes them to
`bench/results.json` as rows `{"name", "ratio", "target", "met", "detail"}`. One
module per family: `compile` (batch against one compiler per kernel), `start`
(cold against hot start), `dispatch` (launch overhead), `scale` (a 10,000-kernel
bundle), `overhead` (a pass against its own compile and measurement time).
Benchmarks are not tests: they never run in `make test`; a smoke test runs each
at a tiny size.
"""
