"""Producing a bundle: loading a workload (`workload`), running it under the passes
(`passes`), isolating measurement in a worker (`isolation`; what ended one: `crashes`;
what the workload left as it ends: `leftovers`) and fanning shards out to a cluster
(`fanout`). It returns reports; the CLI prints them.
"""
