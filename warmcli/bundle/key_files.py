"""Signing key files: a new key pair (`warm keygen`), whether a private key's file is open
to other users (`open_to_others`: the CLI warns of it where it signs), where any user may
replace a trusted public key (`open_to_writers`: warned of once per process), whether a key
file holds more than one key (`pem_blocks`: refused, never read in part), why a file is no
key at all (`not_pem`: in a few words, not `cryptography`'s), and whether
what was given for a key file's path is a key's own text (`key_text`, from
`warmcli.bundle.unshown`: never shown).

`warmcli.bundle.signing` reads keys and signs with them; both reach the `cryptography`
package (extra `sign`) through `crypto`, which imports it on first use only. It owns no
state and never prints.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from warmcli.bundle.unshown import key_text
from warmcli.errors import SignatureError
from warmcli.home import write_new


def crypto() -> Any:
    """The `cryptography` modules signing uses (`serialization`, `ed25519`), imported on
    first use; not installed, a one-line `SignatureError` naming the extra to install."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SignatureError(
            "signing needs the 'cryptography' package: pip install 'warmcli[sign]'"
        ) from None
    return serialization, ed25519


def open_to_others(path: str | os.PathLike[str]) -> int | None:
    """The permission bits of the key file at `path` where users but its owner may read or
    write it (a private key should be `chmod 600`, as ssh asks), else None (or unknown)."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except (OSError, ValueError):
        return None
    return mode if mode & 0o077 and os.name != "nt" else None


def pem_blocks(data: bytes) -> int:
    """How many PEM blocks a key file's `data` holds where that is more than one (two `.pub`
    files concatenated: only the first key would be read, the other silently not), else 0."""
    blocks = data.count(b"-----BEGIN ")
    return blocks if blocks > 1 else 0


def not_pem(data: bytes, error: Exception) -> str:
    """Why a key file's `data` is no key `cryptography` loads, in a few words: empty, an
    OpenSSH key (`ssh-keygen`'s, not PEM), no PEM block at all (DER), else its own words."""
    if not data.strip():
        return "the file is empty"
    if data.lstrip().startswith(b"ssh-") or b"OPENSSH PRIVATE KEY-----" in data:
        return "an OpenSSH key, not PEM: make a key pair with warm keygen"
    if b"-----BEGIN " not in data:
        return "no PEM block (-----BEGIN ...)"
    said = str(error)  # cryptography's "Unable to load PEM file. See <FAQ> for more details. X"
    cut = said.rsplit("for more details. ", 1)
    return f"a malformed PEM block: {cut[1]}" if len(cut) == 2 else said


def open_to_writers(path: str | os.PathLike[str]) -> tuple[Path, int] | None:
    """Where a trusted public key named by `path` (a key file, or its folder) may be replaced
    by any user: the file or a folder above it, as named or as its links resolve, writable
    by all (that place and its permission bits), a sticky folder (`/tmp`) and a read-only mount (a
    Kubernetes ConfigMap's, whatever its mode) excepted; else None (or unknown)."""
    if os.name == "nt":
        return None
    named, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    for place in dict.fromkeys([named, *named.parents, real, *real.parents]):
        try:
            mode = os.stat(place).st_mode
            if not mode & 0o002 or (stat.S_ISDIR(mode) and mode & stat.S_ISVTX):
                continue
            if os.statvfs(place).f_flag & os.ST_RDONLY:
                continue
        except (OSError, ValueError):
            continue
        return place, stat.S_IMODE(mode)
    return None


def generate_key_pair(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """A new Ed25519 key pair: the private key at `path` (mode 0600; never named .pub), the
    public at `path`.pub; no file is overwritten. Its own folder is made (mode 0700) where
    missing, as `--bundle` makes a bundle's (`warm keygen ~/.warm/ci.key`), none above."""
    if key_text(path):  # a key's text for the new key's path: named on every line said
        raise SignatureError(
            "key text given where the new key file's path belongs (not shown): name a file"
        )
    serialization, ed25519 = crypto()
    private, public = Path(path), Path(f"{path}.pub")
    if private.name.endswith(".pub"):  # shared, or put in WARM_TRUSTED_KEYS, as public keys are
        raise SignatureError(
            f"{private}: a private key named .pub passes for a public one: name it without .pub"
        )
    for target in (private, public):
        if os.path.lexists(target):
            raise SignatureError(f"{target}: exists; keygen never overwrites a key")
    folder = private.parent
    if not os.path.lexists(folder):
        if not folder.parent.is_dir():
            raise SignatureError(
                f"{private}: no directory {folder.parent} (warm creates only the key's own "
                f"directory, {folder.name})"
            )
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made meanwhile
        except OSError as exc:
            raise SignatureError(f"{folder}: cannot make its folder: {exc.strerror}") from None
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:  # a pair the disk cannot hold whole leaves neither file (a retry is refused)
        write_new([(private, pem, 0o600), (public, pub, 0o644)])
    except FileExistsError as exc:
        raise SignatureError(f"{exc.filename}: exists; keygen never overwrites a key") from None
    except OSError as exc:
        raise SignatureError(f"{exc.filename}: cannot write key: {exc.strerror}") from None
    return private, public
