"""`warm sign BUNDLE --key KEY` and `warm keygen KEY`: vouch for a bundle's entries with Ed25519.

A bundle's binaries are native code that production loads; `sign` records which
rows the key's owner vouches for (see `warmcli.bundle.signing`), and processes given
`WARM_TRUSTED_KEYS` serve only those. `keygen` makes a key pair (openssl's
`genpkey -algorithm ed25519` makes the same). `verify` reports signatures. Under
`WARM_TRUSTED_KEYS` a signing key must be one of them (`refuse_untrusted`: `run --key` and
`merge --key` alike) and `sign` vouches only for a bundle they signed whole. An interrupt
once the signature was committed (its lock let go, the report not yet shown) says what was
signed (kept), exit 130: never a bare "interrupted" of a bundle that is signed. The
signature is handed back as it is committed, an interrupt held meanwhile
(`warmcli.interrupted.held_interrupts`, as merge, clean and pull hold theirs).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer

from warmcli.bundle.consistency import require_consistent, require_well_formed
from warmcli.bundle.file import check_header
from warmcli.bundle.key_files import generate_key_pair, open_to_others
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import (
    SignatureError,
    StoredSignature,
    is_trusted,
    key_id,
    load_private_key,
    sign,
    trusted_keys,
)
from warmcli.bundle.store import Bundle, BundleError
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import default_bundle
from warmcli.cli.common import (
    EXIT_INTERRUPTED,
    BundleArg,
    JsonOpt,
    emit_json,
    err,
    fail,
    guarded,
    out,
)
from warmcli.printable import printable


def warn_if_open(key: Path) -> None:
    """A warning line where the private key file `key` is open to other users (as ssh
    refuses such a key, but what it signed stands: a warning, not a refusal)."""
    mode = open_to_others(key)
    if mode is not None:
        said = f"{key}: private key open to other users (mode 0{mode:o}): chmod 600 {key}"
        err.print(f"warm: warning: {printable(said)}", markup=False, highlight=False)


def private_key_of(key: Path) -> Any:
    """The private key at `key` (a one-line error, exit 2, where none), warned of where
    its file is open to other users (`warn_if_open`): `run --key` and `merge --key`."""
    private = guarded(lambda: load_private_key(key))
    warn_if_open(key)
    return private


def refuse_untrusted(key: Path, private: Any, trusted: Sequence[bytes] | None) -> None:
    """Under `trusted` keys (`WARM_TRUSTED_KEYS`), a signing `key` not among them refused in
    one line, exit 2, before anything is written: what it signs would be refused here. The
    one rule of `run --key`, `merge --key` and `sign`."""
    if trusted is not None and not is_trusted(private, trusted):
        fail(
            f"--key {key}: its public key is not one of WARM_TRUSTED_KEYS, so the bundle it "
            "signs would be refused here: sign with a trusted key, or trust its .pub"
        )


def sign_path(
    path: Path, private: Any, stored: list[StoredSignature], trusted: Sequence[bytes] | None
) -> None:
    """Sign every row of the bundle at `path` with `private`, its signature appended to
    `stored` as it is committed (an interrupt held until it is there: the caller reads
    `stored` to say what was kept, however late an interrupt lands). Under `trusted` keys,
    only a bundle they signed whole, as `merge --key` takes an input (`run --key` builds
    again what they did not sign): no row they did not vouch for is vouched for here."""
    check_header(path, BundleError)  # an empty file is no bundle to sign (a writer makes one)
    with Bundle.open(path, write=True) as bundle:
        require_consistent(bundle)  # what its indexes say is what its rows say
        require_well_formed(bundle)  # no malformed row is vouched for (stats, merge refuse it)
        if trusted is not None and (problems := signature_report(bundle, trusted).problems):
            raise SignatureError(
                f"{path}: {'; '.join(problems)}: under WARM_TRUSTED_KEYS, warm sign vouches "
                "only for what trusted keys signed whole (warm run --key builds and signs the "
                "rest; unset WARM_TRUSTED_KEYS to vouch for all of it)"
            )
        sign(bundle, private, stored=stored)


def _interrupted(path: Path, rows: int, signer: str) -> NoReturn:
    """An interrupt once the signature was committed: what was signed (kept), exit 130."""
    said = f"signed {path}: {rows} row(s) by key {signer}"
    fail(f"interrupted: {said} (kept)", EXIT_INTERRUPTED, label="")


@app.command("sign")
def sign_command(
    bundle: str | None = BundleArg,
    key: Path = typer.Option(..., "--key", "-k", help="Ed25519 private key (PEM)."),
    as_json: bool = JsonOpt,
) -> None:
    """Sign every entry of BUNDLE with KEY: processes that trust the key serve them.

    Trust is by content: a VACUUM or a copy stays signed; an entry changed or added
    later is not covered until the bundle is signed again. Under WARM_TRUSTED_KEYS, KEY
    must be one of them, and the bundle signed whole by them (as merge --key's inputs).
    """
    path = default_bundle(bundle)
    trusted = guarded(trusted_keys)
    private = guarded(lambda: load_private_key(key))
    refuse_untrusted(key, private, trusted)
    stored: list[StoredSignature] = []  # once committed: from then on, an interrupt says so
    try:
        guarded(lambda: sign_path(path, private, stored, trusted))
        warn_if_open(key)
        rows, signer = stored[0].count, stored[0].key_id
        if as_json:
            emit_json({"bundle": str(path), "key_id": signer, "rows": rows})
        else:
            out.print(printable(f"signed {path}: {rows} row(s) by key {signer}"))
    except KeyboardInterrupt:  # before it was said: a committed signature is kept, said so
        if not stored:
            raise
        _interrupted(path, stored[0].count, key_id(stored[0].public_key))


@app.command()
def keygen(
    key: Path = typer.Argument(..., help="Where to write the private key (KEY.pub: public)."),
    as_json: bool = JsonOpt,
) -> None:
    """Make an Ed25519 key pair: KEY (private, mode 0600) and KEY.pub (public).

    Sign with KEY; list KEY.pub in WARM_TRUSTED_KEYS where bundles are served.
    """
    private, public = guarded(lambda: generate_key_pair(key))
    if as_json:
        emit_json({"private": str(private), "public": str(public)})
    else:
        out.print(printable(f"private key {private}, public key {public}"))
