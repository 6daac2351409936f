"""A pickled `Kernel` carries its fields only: what its key read of the sending process's
machine (`keyed_options`: a `-ccbin` compiler's version line; `content_hash` over them) is read
again where it is unpickled, never taken from the sender (a kernel shipped to another machine
was keyed there by the sender's g++). Pure logic: the real `Kernel`, pickled."""

from __future__ import annotations

import pickle
import subprocess
import sys

from conftest import ROOT

from warmcli import Kernel

CHILD = """
import pickle, sys
kernel = pickle.loads(sys.stdin.buffer.read())
print(sorted(vars(kernel)))
print(kernel.keyed_options[1])
"""


def test_a_pickled_kernel_holds_its_fields_and_keys_alike() -> None:
    kernel = Kernel("void f(float *x) { x[0] = 1; }", "f", "P", options=["-O2"], defines={"A": 1})
    digest = kernel.content_hash
    again = pickle.loads(pickle.dumps(kernel))
    assert set(vars(again)) == set(Kernel._names)
    assert again == kernel and hash(again) == hash(kernel) and again.content_hash == digest


def test_a_ccbin_version_read_in_one_process_is_read_again_in_another() -> None:
    """Keyed where nothing could read the compiler's version (no backend imported: a mark of
    that process alone), then unpickled in another: the receiver reads its own, not the mark."""
    kernel = Kernel(
        'extern "C" __global__ void f(float *x) { x[0] = 1; }',
        "f",
        "P",
        language="cuda",
        options=["-ccbin", "/usr/bin/g++"],
    )
    here = kernel.keyed_options[1]
    sent = pickle.dumps(kernel)
    there = subprocess.run(
        [sys.executable, "-c", CHILD], input=sent, capture_output=True, cwd=ROOT, timeout=60
    )
    assert there.returncode == 0, there.stderr.decode()[-800:]
    fields, keyed = there.stdout.decode().splitlines()
    assert fields == str(sorted(Kernel._names))
    assert keyed != here  # read again there (its own process's reading), not carried
