"""A security engineer's trial of bundle signing, through the real CLI and real production
processes (each a fork of a process that imported the CLI, or numpy and warmcli, once:
`tests/forked_cli.py`; none here is of how a process starts): a private key's text given
where a key file's path belongs (`--key "$(cat ci.key)"`, `WARM_TRUSTED_KEYS="$KEY"`, as a
CI secret is handed over) is never shown in an error; a private key others may read or write
is warned of where it signs; and the README's key rotation recipe (sign again with the new
key while both are trusted, then drop the old) serves the re-signed bundle hot and refuses,
in one line, one only the old key signed.

Tests: `test_key_text_is_never_shown` (each command and production),
`test_key_open_to_others_is_warned` (`warm sign`, `merge --key`, `run --key`; 0600 is not),
`test_rotation_recipe`, `test_rotation_keeps_the_last_good_copy_of_a_url` (a keyed copy is
kept per set of trusted keys: the set a rotation narrowed started with none, so a store
down then failed every start, though the copy the wider set kept is signed by the new key).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from test_remote import Store, http_store  # noqa: F401 (a fixture: an HTTP store with ETags)

NEG = """
import numpy as np
from warmcli import Kernel
K = Kernel("void neg(float *x, int n) { for (int i = 0; i < n; i++) x[i] = -x[i]; }", "neg", "Pi")
def workload(rt):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(K, x, 8)
    return x
"""
# A production process running NEG: what it compiled, and its result.
SERVE = """
import json, runpy, sys
import warmcli
try:
    rt = warmcli.runtime("host")
    y = rt.read(runpy.run_path(sys.argv[1])["workload"](rt))
except warmcli.WarmError as exc:  # a SignatureError, or a RemoteError
    print(json.dumps({"refused": str(exc)}))
else:
    print(json.dumps({"compiled": len(warmcli.report().kernels), "y": [float(v) for v in y]}))
"""
COLD = [-float(i) for i in range(8)]


class Setup:
    """Two key pairs (`old`, `new`), NEG's workload and its bundle signed by `old`."""

    def __init__(self, base: Path, forked: Any) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        self.env = dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")
        self.forked = forked
        self.warm = forked(Warm(self.env))
        self.base, self.workload = base, base / "neg.py"
        self.workload.write_text(NEG)
        for name in ("old", "new"):
            assert self.warm("keygen", base / name).returncode == 0
        self.old, self.new = base / "old", base / "new"
        self.bundle = base / "old-signed.warm"
        made = self.warm("run", self.workload, "--bundle", self.bundle, "--key", self.old)
        assert made.returncode == 0, made.stderr

    def with_env(self, **env: str) -> Any:
        return self.forked(Warm(dict(self.env, **env)))

    def copy(self, name: str) -> Path:
        path = self.base / name
        shutil.copyfile(self.bundle, path)
        return path

    def serve(self, bundle: Path | str, keys: str) -> Any:
        return self.with_env(WARM_TRUSTED_KEYS=keys).production(SERVE, self.workload, bundle=bundle)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Setup:
    from forked_cli import ForkedWarm

    return Setup(tmp_path_factory.mktemp("trial43c"), lambda w: ForkedWarm(w, forking_servers))


def _body(pem: str) -> str:
    """The base64 body of a PEM key: what must never be shown."""
    return "".join(line for line in pem.splitlines() if not line.startswith("-----"))


def test_key_text_is_never_shown(setup: Setup, tmp_path: Path) -> None:
    private = setup.old.read_text()
    secret = _body(private)
    public = Path(f"{setup.new}.pub").read_text()
    target = setup.copy("text.warm")
    before = target.read_bytes()
    runs = {
        "sign": setup.warm("sign", target, "--key", private),
        "merge": setup.warm("merge", target, "-o", tmp_path / "m.warm", "--key", private),
        "run": setup.warm("run", setup.workload, "--bundle", target, "--key", private),
        "verify": setup.with_env(WARM_TRUSTED_KEYS=private)("verify", target),
        "check": setup.with_env(WARM_TRUSTED_KEYS=private)("check", target),
        "public text": setup.with_env(WARM_TRUSTED_KEYS=public)("verify", target),
    }
    for what, proc in runs.items():
        said = proc.stdout + proc.stderr
        assert proc.returncode == 2, (what, said)
        assert secret not in said and _body(public) not in said, (what, said)
        assert said.count("\n") == 1 and "key text" in said, (what, said)
        assert ("chmod 600" in said) == (what in ("sign", "merge", "run")), (what, said)
    assert target.read_bytes() == before  # nothing lost, nothing signed
    served = setup.serve(target, private)
    assert secret not in served["refused"] and "key text" in served["refused"]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o620, 0o600, 0o400])
def test_key_open_to_others_is_warned(setup: Setup, tmp_path: Path, mode: int) -> None:
    key = tmp_path / "ci.key"
    shutil.copyfile(setup.old, key)
    key.chmod(mode)
    target = setup.copy(f"mode{mode:o}.warm")
    runs = [
        setup.warm("sign", target, "--key", key),
        setup.warm("merge", target, "-o", tmp_path / "m.warm", "--key", key),
        setup.warm("run", setup.workload, "--bundle", target, "--key", key),
    ]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
        warned = [line for line in proc.stderr.splitlines() if "warning" in line]
        if mode & 0o077:
            assert warned == [
                f"warm: warning: {key}: private key open to other users (mode 0{mode:o}): "
                f"chmod 600 {key}"
            ], proc.stderr
        else:
            assert warned == [], proc.stderr
        assert _body(setup.old.read_text()) not in proc.stderr


def test_rotation_recipe(setup: Setup) -> None:
    old_pub, new_pub = f"{setup.old}.pub", f"{setup.new}.pub"
    rotated = setup.copy("rotated.warm")
    # 1. trust both (production restarted with the new list), 2. re-sign with the new key
    assert setup.serve(rotated, f"{old_pub}:{new_pub}") == {"compiled": 0, "y": COLD}
    signed = setup.warm("sign", rotated, "--key", setup.new)
    assert signed.returncode == 0, signed.stderr
    assert setup.serve(rotated, f"{old_pub}:{new_pub}") == {"compiled": 0, "y": COLD}
    # 3. drop the old key: the re-signed bundle is served hot, one only `old` signed refused
    assert setup.serve(rotated, new_pub) == {"compiled": 0, "y": COLD}
    refused = setup.serve(setup.bundle, new_pub)["refused"]
    assert "signed only by untrusted or invalid key(s)" in refused and "\n" not in refused
    # a compromised `old` is revoked by dropping it: what it signs since is not served
    with sqlite3.connect(rotated) as conn:
        conn.execute("UPDATE kernels SET compile_log = 'edited'")
    assert setup.warm("sign", rotated, "--key", setup.old).returncode == 0
    assert setup.serve(rotated, f"{old_pub}:{new_pub}") == {"compiled": 0, "y": COLD}
    assert setup.serve(rotated, new_pub) == {"compiled": 1, "y": COLD}


def test_rotation_keeps_the_last_good_copy_of_a_url(
    setup: Setup,
    http_store: tuple[Store, str, Any],  # noqa: F811
) -> None:
    store, endpoint, server = http_store
    rotated = setup.copy("published.warm")
    assert setup.warm("sign", rotated, "--key", setup.new).returncode == 0  # old and new
    store.files["/b.warm"] = rotated.read_bytes()
    store.files["/old.warm"] = setup.bundle.read_bytes()  # signed by the old key alone
    url, old_url = (f"{endpoint}/{name}" for name in ("b.warm", "old.warm"))
    old_pub, new_pub = f"{setup.old}.pub", f"{setup.new}.pub"
    assert setup.serve(url, f"{old_pub}:{new_pub}") == {"compiled": 0, "y": COLD}
    assert setup.serve(old_url, old_pub) == {"compiled": 0, "y": COLD}
    server.shutdown()  # the store down as the old key is dropped: the last good copy
    server.server_close()
    assert setup.serve(url, new_pub) == {"compiled": 0, "y": COLD}
    # a copy only the old key signed is never the narrowed set's last good copy
    refused = setup.serve(old_url, new_pub)["refused"]
    assert "store unreachable" in refused and "\n" not in refused, refused
