"""A hostile review of trial43c's signing keys and key rotation (a URL's keyed copy seeded
from another set of trusted keys' copy): what a seeded copy holds is judged by the current
keys, row by row (an attacker's key trusted once, an unsigned keyless copy, a copy partly
signed), and is never taken from another user's folder, a link, or a copy changed since it
was kept; a private key's text is never shown, not even as its bare base64 body, given for
the bundle, or to `warm keygen`, whose parser took it for an option; a trusted key any user
may replace is warned of once per process (a sticky folder, a read-only mount such as a
Kubernetes ConfigMap's, are not); a private key trusted, or a public one signing, is named so.
The CLI and production processes are forks of processes that imported the CLI, or numpy and
warmcli, once (`tests/forked_cli.py`): each fork warns as a process of its own.

Tests: `test_seeding_judges_by_the_current_keys`, `test_key_body_is_never_shown`,
`test_keygen_never_shows_key_text`, `test_trusted_key_others_may_write_is_warned`,
`test_a_key_of_the_other_kind_is_named_so`.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_remote import Store, http_store  # noqa: F401 (a fixture: an HTTP store with ETags)
from test_trial43c import COLD, Setup, _body


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Setup:
    from forked_cli import ForkedWarm

    return Setup(tmp_path_factory.mktemp("review43f"), lambda w: ForkedWarm(w, forking_servers))


def test_seeding_judges_by_the_current_keys(
    setup: Setup,
    http_store: tuple[Store, str, Any],  # noqa: F811
) -> None:
    store, endpoint, server = http_store
    attacker = setup.base / "attacker"
    if not attacker.exists():
        assert setup.warm("keygen", attacker).returncode == 0
    evil = setup.copy("evil.warm")  # signed by old, and by the attacker's key
    assert setup.warm("sign", evil, "--key", attacker).returncode == 0
    partly = setup.copy("partly.warm")  # signed by new, then one kernel row edited
    assert setup.warm("sign", partly, "--key", setup.new).returncode == 0
    with sqlite3.connect(partly) as conn:
        conn.execute("UPDATE kernels SET compile_log = 'edited'")
    old_pub, new_pub, bad_pub = (f"{k}.pub" for k in (setup.old, setup.new, attacker))
    store.files["/evil.warm"] = evil.read_bytes()
    store.files["/partly.warm"] = partly.read_bytes()
    evil_url, partly_url = f"{endpoint}/evil.warm", f"{endpoint}/partly.warm"
    # a run that trusted the attacker's key once, and a keyless one, kept their copies
    assert setup.serve(evil_url, bad_pub) == {"compiled": 0, "y": COLD}
    assert setup.warm("verify", evil_url).returncode == 0
    # the partly signed copy, kept by a wider set: its edited row never served
    assert setup.serve(partly_url, f"{old_pub}:{new_pub}") == {"compiled": 1, "y": COLD}
    server.shutdown()
    server.server_close()
    refused = setup.serve(evil_url, new_pub)["refused"]  # neither copy is the new key's
    assert "store unreachable" in refused and "\n" not in refused, refused
    remote = Path(setup.env["WARM_HOME"]) / "remote"
    wider = next(f for f in remote.iterdir() if (f / "bundle.warm").exists() and _same(f, partly))
    if os.geteuid() == 0:  # another user's folder of copies: never taken
        os.chown(wider, 12345, -1)
        assert "store unreachable" in setup.serve(partly_url, new_pub)["refused"]
        os.chown(wider, 0, -1)
    copy = wider / "bundle.warm"  # changed since it was kept (its time): not taken
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert "store unreachable" in setup.serve(partly_url, new_pub)["refused"]
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    moved = wider.rename(setup.base / "moved")  # a link in the kept copies' folder: not taken
    wider.symlink_to(moved)
    assert "store unreachable" in setup.serve(partly_url, new_pub)["refused"]
    wider.unlink()
    moved.rename(wider)
    assert setup.serve(partly_url, new_pub) == {"compiled": 1, "y": COLD}  # seeded, row by row


def _same(folder: Path, bundle: Path) -> bool:
    return (folder / "bundle.warm").read_bytes() == bundle.read_bytes()


def test_key_body_is_never_shown(setup: Setup, tmp_path: Path) -> None:
    secret = _body(setup.old.read_text())  # a CI secret kept without its PEM lines
    target = setup.copy("body.warm")
    before = target.read_bytes()
    runs = {
        "sign": setup.warm("sign", target, "--key", secret),
        "run": setup.warm("run", setup.workload, "--bundle", target, "--key", secret),
        "verify": setup.with_env(WARM_TRUSTED_KEYS=secret)("verify", target),
        "keygen": setup.warm("keygen", secret),
        "as the bundle": setup.warm("sign", secret, "--key", setup.old),  # arguments swapped
        "as the bundle, json": setup.warm("verify", "--json", secret),
    }
    for what, proc in runs.items():
        said = proc.stdout + proc.stderr
        assert proc.returncode == 2, (what, said)
        assert secret not in said and "key text" in said, (what, said)
        assert said.count("\n") == (1 if "json" not in what else 5), (what, said)
    assert target.read_bytes() == before
    assert not Path(secret).exists()
    digest = "3fa2b5c9e1d04a7f8b6c2e9d1a0f4b7c3e8d2a1f5b9c6e0d7a4f1b8c2e5d9a3f"  # no key: shown
    assert setup.warm("verify", digest).stderr == f"warm: error: {digest}: no such bundle\n"
    served = setup.serve(target, secret)
    assert secret not in served["refused"] and "key text" in served["refused"]


def test_keygen_never_shows_key_text(setup: Setup) -> None:
    private = setup.old.read_text()
    for given in (private, private.replace("\n", "\\n")):  # as given, as a secret escapes it
        proc = setup.warm("keygen", given)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 2, said
        assert _body(private) not in said and "not shown" in said, said
        assert said.count("\n") == 1, said


# A production process that trusts WARM_TRUSTED_KEYS: the warnings it was given.
WARNED = """
import json, runpy, sys, warnings
import warmcli
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("default")
    for _ in range(2):  # twice: one warning per process
        rt = warmcli.runtime("host")
        rt.read(runpy.run_path(sys.argv[1])["workload"](rt))
print(json.dumps([str(w.message) for w in caught if "trusted key" in str(w.message)]))
"""


def _trusting(setup: Setup, keys: Path, make: Any) -> tuple[list[str], list[str]]:
    """What `warm verify` and a production process say of trusting `keys`, as `make` left
    them: the CLI's warning lines, and the production process's warnings."""
    signed = setup.copy("writable.warm")
    trusting = setup.with_env(WARM_TRUSTED_KEYS=str(keys))  # (each process forked)
    proc = trusting("verify", signed)
    assert proc.returncode == 0, proc.stderr
    cli = [line for line in proc.stderr.splitlines() if "warning" in line]
    production = trusting.production(WARNED, setup.workload, bundle=signed)
    return cli, production


@pytest.mark.parametrize(
    "layout", ["file 0666", "folder 0777", "folder 1777", "configmap", "configmap ro 0777"]
)
def test_trusted_key_others_may_write_is_warned(setup: Setup, tmp_path: Path, layout: str) -> None:
    import os
    import shutil
    import subprocess

    folder = tmp_path / "keys"
    folder.mkdir()
    folder.chmod(0o755)
    pub = Path(f"{setup.old}.pub")
    keys, open_to = folder / "ci.pub", None
    if layout.startswith("configmap"):  # Kubernetes: ..data -> ..<time>/, ci.pub -> ..data/ci.pub
        stamped = folder / "..2026_12_06_00_00_00.1"
        stamped.mkdir()
        shutil.copyfile(pub, stamped / "ci.pub")
        (folder / "..data").symlink_to(stamped.name)
        (folder / "ci.pub").symlink_to("..data/ci.pub")
        if layout.endswith("ro 0777"):  # its mount: read-only, whatever its mode says
            folder.chmod(0o777)
            if subprocess.run(["mount", "--bind", folder, folder], capture_output=True).returncode:
                pytest.skip("no bind mount here (not root)")
            subprocess.run(["mount", "-o", "remount,bind,ro", folder, folder], check=True)
    else:
        shutil.copyfile(pub, keys)
        keys.chmod(0o644)
        if layout == "file 0666":
            keys.chmod(0o666)
            open_to = f"{keys} (mode 0666)"
        else:
            folder.chmod(int(layout.split()[1], 8))
            open_to = None if layout.endswith("1777") else f"{folder} (mode 0777)"
    try:
        for named in (keys, folder):
            cli, production = _trusting(setup, named, None)
            if open_to is None:
                assert cli == [] and production == [], (named, cli, production)
                continue
            said = (
                f"{named}: trusted key others may replace: {open_to} is writable by all, so "
                f"anyone may choose what is trusted: chmod o-w"
            )
            assert len(cli) == 1 and cli[0].startswith(f"warm: warning: {said}"), cli
            assert len(production) == 1 and production[0].startswith(said), production
    finally:
        if layout.endswith("ro 0777"):
            subprocess.run(["umount", folder], check=True)
    os.chmod(folder, 0o755)


def test_a_key_of_the_other_kind_is_named_so(setup: Setup) -> None:
    target = setup.copy("kinds.warm")
    before = target.read_bytes()
    private, public = setup.old, Path(f"{setup.old}.pub")
    trusting = setup.with_env(WARM_TRUSTED_KEYS=str(private))("verify", target)
    signing = setup.warm("sign", target, "--key", public)
    assert trusting.returncode == signing.returncode == 2
    assert trusting.stderr == (
        f"warm: error: WARM_TRUSTED_KEYS: {private}: a private key where a public key belongs: "
        f"trust its public "
        f"key ({private}.pub), and keep the private key off machines that serve bundles\n"
    )
    assert signing.stderr == (
        f"warm: error: {public}: a public key where a private key belongs: sign with the "
        "private key it was made from\n"
    )
    assert _body(private.read_text()) not in trusting.stdout + trusting.stderr
    assert target.read_bytes() == before
