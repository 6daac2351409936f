"""Whether a text holds a signing key's text (`holds_key`, `key_text`: a private key given
where a key file's path belongs, `--key "$(cat ci.key)"`), and a message with every such
text taken out (`unshown_keys`: each error line the CLI says passes through it).

It stands apart from `warmcli.bundle.key_files` so that the CLI's last-chance error path
imports it once, at the CLI's start, never while failing (out of memory or descriptors,
an import there could fail too). It owns no state, reads no file and never prints.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

# A PEM key's base64 body alone (a CI secret kept without its BEGIN and END lines): a long
# run of base64 naming no file, mixing cases and digits (a sha256 in hex is none), or the
# start every Ed25519 key's DER has (PKCS8, SPKI).
_BODY = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")
_DER = ("MC4CAQAwBQYDK2Vw", "MCowBQYDK2Vw")


def key_text(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a key's text given in a key file's place (`--key "$(cat ci.key)"`,
    a CI secret handed over in a variable, with or without its PEM lines, or any text of
    lines): never shown, a private key would reach a log."""
    text = os.fspath(path)
    return "\n" in text or holds_key(text)


def holds_key(text: str) -> bool:
    """Whether `text` holds a key's text: a PEM line, an Ed25519 key's DER start, or a line
    that is a key's base64 body (see `_BODY`); a path with a newline alone holds none."""
    if any(mark in text for mark in ("-----BEGIN", "KEY-----", *_DER)):
        return True
    mixed = ("[a-z]", "[A-Z]", "[0-9]")  # a key's base64 mixes them all; hex never does
    return any(
        _BODY.fullmatch(line)
        and all(re.search(chars, line) for chars in mixed)
        and not os.path.lexists(line)
        for line in text.replace("\\n", "\n").splitlines()
    )


def unshown_keys(message: str, texts: Iterable[str | None]) -> str:
    """`message` with each of `texts` (a command's arguments, `WARM_TRUSTED_KEYS`' entries)
    that holds a key's text (`holds_key`) not shown; where any line of it is left (a parser's
    message cut or escaped it), the whole message is one saying only that key text was given."""
    for text in texts:
        if text and holds_key(text):
            message = message.replace(text, "(key text, not shown)")
            for line in text.replace("\\n", "\n").splitlines():
                if len(line.strip()) >= 16 and line.strip() in message:
                    return "key text given where a path belongs (not shown)"
    return message
