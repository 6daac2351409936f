"""What a workload talks to, one device at a time: `Runtime` (buffers, launches,
tunes), its kernel cache (`kernel_cache`; its bundle reads in `lookup`, a CUDA device's
PTX and cubin reads in `lookup_ptx`, what it stored and served in `persist`), its tune
cache and measurement, the explanation of every miss (`explain`) and the one policy for
kernel and tune misses (`misses`). It reaches storage only through what it is handed; it
never prints.

`warmcli.runtime`, read as an attribute of the package `warmcli`, is the production
function `runtime()`; this package is `warmcli.runtime.runtime` and its siblings.
"""
