"""What a workload talks to, one device at a time: `Runtime` (buffers, launches,
tunes), its kernel cache, its tune cache and measurement, and the explanation of
every miss. It reaches storage only through what it is handed; it never prints.

`warmcli.runtime`, read as an attribute of the package `warmcli`, is the production
function `runtime()`; this package is `warmcli.runtime.runtime` and its siblings.
"""
