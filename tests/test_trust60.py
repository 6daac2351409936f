"""Trial of signing and trust (stop 60), from the README's "Trust: a bundle is native code":
faults found as a user and as an attacker, each shown by a test that failed before its fix.
Real bundles signed by `warm keygen`'s keys, production processes in subprocesses, the system
C compiler; no timings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm

# A production process given its trusted keys as `use_bundle(trusted_keys=...)`, in the folder
# `cwd`: it prints the one line its SignatureError says, else that the bundle was served.
_GIVEN_KEYS = """
import sys, warmcli
try:
    warmcli.use_bundle(sys.argv[1], trusted_keys=sys.argv[2:])
    warmcli.runtime("host")
    print("served")
except warmcli.SignatureError as exc:
    print(exc)
"""


def test_an_empty_trusted_key_path_trusts_no_key_of_the_working_folder(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`use_bundle(path, trusted_keys=[""])` (a key path read from a variable left unset, say)
    was taken as `Path("")`, which is `.`: a folder, so every `*.pub` in the working folder was
    trusted, and a bundle signed by the key whose `.pub` an attacker left beside it was served.
    An empty path names no key file: it is refused in one line, and nothing is served."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    assert warm("keygen", tmp_path / "attacker.key").returncode == 0
    signed = warm("sign", bundle, "--key", tmp_path / "attacker.key")
    assert signed.returncode == 0, signed.stderr
    env = {k: v for k, v in warm.env.items() if k != "WARM_TRUSTED_KEYS"}
    done = subprocess.run(
        [sys.executable, "-c", _GIVEN_KEYS, str(bundle), ""],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,  # attacker.key.pub lies here
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("trusted_keys=: an empty path names no key file"), done.stdout


def test_a_key_file_holding_two_keys_is_refused_not_read_in_part(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A trusted key file holding two PEM public keys (two `.pub` files concatenated, as an
    `authorized_keys` file lists several) was read up to its first key: the second was
    silently not trusted, and a bundle it signed was refused as `signed only by untrusted or
    invalid key(s)` of a key its owner had listed. A key file holds one key: one holding more
    is refused in one line naming it, exit 2."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    for name in ("old", "new"):
        assert warm("keygen", tmp_path / name).returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "new").returncode == 0
    both = tmp_path / "both.pub"
    both.write_bytes((tmp_path / "old.pub").read_bytes() + (tmp_path / "new.pub").read_bytes())
    warm.env["WARM_TRUSTED_KEYS"] = str(both)
    try:
        done = warm("verify", bundle)
    finally:
        del warm.env["WARM_TRUSTED_KEYS"]
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"WARM_TRUSTED_KEYS: {both}: 2 PEM blocks" in done.stderr, done.stderr
