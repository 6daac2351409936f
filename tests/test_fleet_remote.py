"""Fleet review: a URL's local copy in WARM_HOME/remote/ is believed only when this
user alone could have written it, against a real HTTP server on 127.0.0.1 and the real
CLI.

A copy folder others may write (a shared or pre-made WARM_HOME), or a `bundle.warm` /
`meta.json` in it that is a link or another's, could hold a bundle someone planted with
the ETag the store answers "unchanged" to: that bundle's native code would be served
as the store's. Such a folder is refused in one line (no copy is kept where others
could swap it); such a file is not believed: the bundle is downloaded afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from http.server import ThreadingHTTPServer
from pathlib import Path

from conftest import Warm
from test_remote import Store, built, http_store  # noqa: F401  (fixtures)

from warmcli.bundle.remote import cache_dir


def _plant(home: Path, url: str, planted: bytes, etag_of: bytes, *, link: bool) -> Path:
    """What another user leaves in `url`'s copy folder: a bundle of theirs, remembered
    under the ETag of what the store holds; the folder returned."""
    env_home = os.environ.get("WARM_HOME")
    os.environ["WARM_HOME"] = str(home)
    try:
        folder = cache_dir(url)
    finally:
        if env_home is not None:
            os.environ["WARM_HOME"] = env_home
    folder.mkdir(parents=True)
    evil = home / "evil.warm"
    evil.write_bytes(planted)
    if link:
        (folder / "bundle.warm").symlink_to(evil)
    else:
        (folder / "bundle.warm").write_bytes(planted)
    etag = '"' + hashlib.sha256(etag_of).hexdigest() + '"'
    (folder / "meta.json").write_text(json.dumps({"etag": etag, "sha256": "0" * 64}))
    return folder


def test_a_copy_folder_others_may_write_is_refused_not_served(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    url, home = f"{base}/b.warm", tmp_path / "home"
    folder = _plant(home, url, built[1], built[0], link=False)
    folder.chmod(0o777)  # as a pre-made shared folder is
    out = tmp_path / "out.warm"
    proc = Warm(dict(warm.env, WARM_HOME=str(home)))("pull", url, out)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "others may write" in proc.stderr and not out.exists()


def test_a_linked_copy_is_not_believed_but_downloaded_afresh(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    url, home = f"{base}/b.warm", tmp_path / "home"
    folder = _plant(home, url, built[1], built[0], link=True)
    folder.chmod(0o700)
    out = tmp_path / "out.warm"
    proc = Warm(dict(warm.env, WARM_HOME=str(home)))("pull", url, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_bytes() == built[0] and store.downloads == 1
    assert not (folder / "bundle.warm").is_symlink()
    assert (home / "evil.warm").read_bytes() == built[1]  # the link's target untouched
