"""Operations on a bundle without a workload: `check` (servability on this machine;
`served_builds` keeps its verdicts for tunes on disk), `verify` (integrity), `clean`,
`merge`, `diff` and `stats` (summaries). Data in, reports out: nothing here prints.
"""
