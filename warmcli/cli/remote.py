"""`warm push BUNDLE URL` and `warm pull URL [PATH]`: bundles in an object store.

Both are thin: `warmcli.bundle.remote` uploads, downloads, checks and caches; these
commands name what they did in one line (or one JSON object). `pull` copies only what
the URL holds now, checked (under `WARM_TRUSTED_KEYS`, one they did not sign is refused,
a last good copy standing in or not): never the last good copy a reader falls back to; an interrupt
once PATH is in place (`PullInterrupted`), or as that is said, says it was pulled (kept),
and what the bundle it replaced held that is gone, exit 130; `push` (of a bundle merged from
its URL, only over the version merged or one it holds all of, but with `--force`)
interrupted once the store answered its upload (`PushInterrupted`) says it was pushed
(kept), exit 130. Under `WARM_TRUSTED_KEYS`, a push of a bundle none of those keys signed
says so in a warning line (production processes trusting only them would serve none of
it); pushed all the same.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn
from urllib.parse import unquote, urlsplit

import typer

from warmcli import config
from warmcli.bundle.location import SCHEMES, is_url, not_a_file, shown, url_text
from warmcli.bundle.remote import fetch
from warmcli.bundle.remote import push as push_bundle
from warmcli.bundle.remote_seed import untrusted
from warmcli.bundle.replacing import copy_into
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import BESIDE_BYTES, NAME_BYTES, new_file_path
from warmcli.cli.committed import kept_on_interrupt
from warmcli.cli.common import EXIT_INTERRUPTED, JsonOpt, emit_json, err, fail, guarded, out
from warmcli.errors import PushInterrupted, RemoteError, WarmError
from warmcli.printable import cut, printable, visible


@app.command()
def push(
    bundle: Path = typer.Argument(..., help="The local bundle to publish."),
    url: str = typer.Argument(
        ...,
        help="Where: s3://bucket/key (endpoint from AWS_ENDPOINT_URL), or an https:// URL "
        "that takes a PUT (such as a presigned one).",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Push even where URL changed since BUNDLE was merged from it (what it holds is lost).",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Upload BUNDLE to URL whole: a reader sees the old bundle or the new one, never a torn one.

    To an https:// URL it is one HTTP PUT, conditional (If-Match) on what the store
    held when the push began, where the store says: a concurrent push is refused, not lost.
    A bundle `warm merge` made of URL is pushed only while URL holds the very version
    merged, or another whose kernels and tunes it holds, each the same (a copy pulled, run
    and pushed back: compared once downloaded); another job's push since is refused, not
    lost (merge again; --force pushes).
    Where the store says it holds this very bundle already (its sha256), nothing is sent.
    """
    if not bundle.is_file():  # a FIFO or a folder is said as one: it exists
        scheme, _, rest = str(bundle).partition(":/")  # a URL, as `Path` spells it
        if scheme.lower() in SCHEMES and rest:
            url_given = shown(f"{scheme}://{rest}")
            fail(f"{url_given} is a URL: push publishes a local bundle (warm pull fetches one)")
        kind = not_a_file(bundle) or ("a folder" if bundle.is_dir() else None)
        fail(f"{bundle}: {kind}, not a bundle file" if kind else f"{bundle}: no such bundle")
    name = shown(url)  # its password, token and query never shown
    pushed = f"interrupted: pushed {bundle} to {name} (kept)"
    done: list[tuple[str, bool]] = []  # once the store answered: from then on, said so
    try:
        digest, sent = guarded(lambda: push_bundle(bundle, url, done, force))
        if as_json:
            emit_json({"bundle": str(bundle), "url": name, "sha256": digest, "sent": sent})
        elif sent:
            said = f"pushed {bundle} to {name} (sha256 {digest[:16]})"
            out.print(printable(said), markup=False, highlight=False)
        else:  # as `aws s3 sync` or rsync: the store holds these very bytes
            said = f"unchanged: {name} already holds {bundle} (sha256 {digest[:16]}): nothing sent"
            out.print(printable(said), markup=False, highlight=False)
        _warn_untrusted(bundle)
    except PushInterrupted:  # the store answered the upload: it holds the bundle
        fail(pushed, EXIT_INTERRUPTED, label="")
    except KeyboardInterrupt:  # before it was said, however late
        if not (done and done[0][1]):
            raise
        fail(pushed, EXIT_INTERRUPTED, label="")


def _warn_untrusted(bundle: Path) -> None:
    """Under `WARM_TRUSTED_KEYS` (never read otherwise), one warning line where none of those
    keys signed `bundle`: production processes trusting only them would serve none of it.
    Pushed all the same (another fleet may trust its signer); a bundle or key that cannot be
    read is said by the push, or by `warm verify`, not here."""
    if config.trusted_keys() is None:
        return
    from warmcli.bundle.signing import trusted_keys  # (imported only under trusted keys)
    from warmcli.ops.verify import trusted_signed

    try:
        keys = trusted_keys()
        if keys is None or trusted_signed(bundle, keys):
            return
    except (WarmError, OSError):
        return
    said = (
        f"{bundle} is not signed by a trusted key (WARM_TRUSTED_KEYS): production processes "
        "trusting only those keys will not serve it"
    )
    err.print(f"warm: warning: {printable(said)}", markup=False, highlight=False)


@app.command()
def pull(
    url: str = typer.Argument(..., help="The bundle's https:// or s3:// URL."),
    path: str | None = typer.Argument(None, help="Where to put it [default: its file name]."),
    force: bool = typer.Option(False, "--force", help="Replace PATH even if it is no bundle."),
    as_json: bool = JsonOpt,
) -> None:
    """Download the bundle at URL (once: WARM_HOME keeps it) and copy it to PATH.

    A download refused (no sound bundle) or a store unreachable copies nothing: PATH
    keeps what it held (the last good copy, if any, is named). What a bundle replaced held
    that the pulled one lacks is said (it is gone). A PATH that is no warm
    bundle is replaced only with --force; through a link, the file it leads to is. A
    PATH that is (or leads to) a FIFO or a device is never replaced.
    """
    if not is_url(url):
        fail(f"{visible(shown(url))}: not an https:// or s3:// URL")  # (an empty one: `""`)
    try:  # first: a URL no store is sent is said so, not named by its file name
        url_text(url)
    except RemoteError as exc:
        fail(str(exc))
    if path is not None and not path.strip():
        fail("PATH is empty: name the bundle file to write, or leave it out for its own")
    if path is not None and is_url(path):  # as `merge -o URL`: never a folder `https:` made
        fail(f"{shown(path)} is a URL: pull writes a local bundle (PATH); warm push publishes one")
    # as `merge -o`: its own folder is made (`copy_into`), none above it
    target = new_file_path(path) if path is not None else _named_by(url)
    kind = not_a_file(target)  # --force replaces a file, never a pipe or a device
    if kind is not None:
        fail(f"{target}: {kind}, not a regular file: a pull writes only a bundle file")
    if target.is_dir():  # nor a folder: the file in it is named, never guessed
        fail(f"{target}: a folder, not a bundle file: name the file to write in it")
    from warmcli.bundle.served import trusted  # a download they refuse keeps the last good

    keys = guarded(lambda: trusted(None))
    got = guarded(lambda: fetch(url, keys))
    if got.reason:  # the last good copy is no pull of what the URL holds now
        fail(f"{got.reason}; nothing pulled ({target} is as it was)")
    # With no last good copy, a download they refuse is kept there (production refuses it
    # as it opens it): a pull under them refuses it too, never putting it over PATH.
    refused = guarded(lambda: untrusted(got.path, keys))
    if refused:
        why = printable(refused.removeprefix(f"{got.path}: "))
        fail(f"{shown(url)}: download refused: {why}; nothing pulled ({target} is as it was)")
    # Once PATH is in place, an interrupt however late says it was pulled (kept).
    kept_on_interrupt(
        target,
        lambda done: guarded(lambda: copy_into(got.path, target, force, done)),
        lambda _, dropped: _said(shown(url), target, *dropped, as_json),
        lambda dropped: _interrupted(shown(url), target, *dropped),
    )


def _gone(url: str, target: Path, kernels: int, tunes: int) -> str:
    return f"{target} held {kernels} kernel(s) and {tunes} tune(s) that {url} lacks; they are gone"


def _said(url: str, target: Path, kernels: int, tunes: int, as_json: bool) -> None:
    if as_json:
        emit_json(
            {"url": url, "path": str(target), "dropped": {"kernels": kernels, "tunes": tunes}}
        )
        return
    out.print(printable(f"pulled {url} into {target}"), markup=False, highlight=False)
    if kernels or tunes:  # a production write-back's entries, say: gone with the old file
        said = (
            f"replaced: {_gone(url, target, kernels, tunes)} "
            "(to keep them, pull to another path and warm merge both)"
        )
        out.print(printable(said), markup=False, highlight=False)


def _interrupted(url: str, target: Path, kernels: int, tunes: int) -> NoReturn:
    """An interrupt once PATH was in place: it was pulled (kept), and what went, exit 130."""
    gone = f"; replaced: {_gone(url, target, kernels, tunes)}" if kernels or tunes else ""
    fail(f"interrupted: pulled {url} into {target} (kept){gone}", EXIT_INTERRUPTED, label="")


def _named_by(url: str) -> Path:
    """The file name a URL gives, an http(s) one's percent-decoded (its path is ASCII:
    `fleet%20%C3%A9.warm` names `fleet é.warm`; an s3:// key is its own text); refused
    where it is empty, `..` or a dot file (the URL's owner would choose which of the
    user's files, `.bashrc`, is replaced), or decodes to no UTF-8, a folder (`%2F`) or a
    control character, or is longer than a file's name may be with a writer's files beside it
    (`NAME_BYTES` less `BESIDE_BYTES`: said cut)."""
    parts, named = urlsplit(url), shown(url)
    name = os.path.basename(parts.path)
    if parts.scheme != "s3":
        try:
            name = unquote(name, errors="strict")
        except UnicodeDecodeError:  # named as the URL gives it, not as an empty name
            held = printable(repr(cut(name, 80)))
            fail(f"{cut(named, 200)}: its name {held} decodes to no UTF-8: name the file to write")
    if len(name.encode("utf-8", "surrogateescape")) > NAME_BYTES - BESIDE_BYTES:
        held = f"{printable(cut(repr(name), 80))}, longer than a file name may be"
        fail(f"{cut(named, 200)}: its name {held}: name the file to write")
    if not name or name.startswith(".") or "/" in name or printable(name) != name:
        held = printable(repr(name))
        said = "is no bundle file to write here: name the file to write"
        fail(f"{cut(named, 200)}: its name {held} {said}")
    return Path(name)
