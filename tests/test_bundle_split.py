"""The storage seam: the runtime's `Store` is what a `Bundle` is, errors live in errors.py,
and what a bundle holds from other toolchains or devices is data, not sentences."""

from __future__ import annotations

import inspect
import sqlite3
from pathlib import Path

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.host import HostDevice
from warmcli.bundle.store import Bundle
from warmcli.records import HeldElsewhere
from warmcli.runtime.store import Store

K = Kernel("void inc(float *x) { x[0] += 1.0f; }", "inc", "P")


def test_a_bundle_has_every_method_of_the_store_with_its_parameters() -> None:
    wanted = [n for n, v in vars(Store).items() if callable(v) and not n.startswith("_")]
    assert {"kernel", "blob", "tune", "put", "foreign"} <= set(wanted)
    for name in wanted:
        theirs = inspect.signature(getattr(Store, name)).parameters
        ours = inspect.signature(getattr(Bundle, name)).parameters
        assert list(theirs) == list(ours)[: len(theirs)], name


def test_bundle_errors_live_in_errors_and_keep_their_old_homes() -> None:
    from warmcli import errors
    from warmcli.bundle import signing, store
    from warmcli.ops import merge

    assert store.BundleError is errors.BundleError
    assert signing.SignatureError is errors.SignatureError
    assert merge.MergeError is errors.MergeError
    assert issubclass(errors.BundleError, errors.WarmError)
    assert issubclass(errors.SignatureError, errors.BundleError)
    assert issubclass(errors.MergeError, errors.BundleError)


def test_foreign_is_data_and_the_runtime_phrases_it(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        rt.launch(K, rt.buffer(1))
    with Bundle.open(path, write=True) as bundle:
        rt.persist(bundle)
    device = rt.device
    rt.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE kernels SET toolchain = 'host-cc other 1.0'")
    conn.commit()
    conn.close()
    with Bundle.open(path) as bundle:
        held = bundle.foreign(device.backend, device.arch, ["mine"], device.fingerprint.identity)
    assert held == [HeldElsewhere("kernel", "host-cc other 1.0", 1, device.arch)]
