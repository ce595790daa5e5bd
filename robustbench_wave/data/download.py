"""Where data files live and how they are fetched and verified: the cache folder, mirrors and checksums.

Every source goes through here, so there is one cache rule (``root=``, else ``$RBW_DATA_DIR``, else the user
cache), one download routine (mirrors tried in turn, written atomically so a failed or corrupt download
leaves nothing behind) and one place that compares md5/sha256 sums and says what to do when they differ.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from robustbench_wave.core.io import atomic_write
from robustbench_wave.data.base import ChecksumError

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "RBW_DATA_DIR"
_BLOCK = 1 << 20


def data_dir(root: str | os.PathLike | None = None) -> Path:
    """Where downloads and decoded caches live: ``root``, else ``$RBW_DATA_DIR``, else the user cache.

    A file in that place is refused here, before a download or a decode would fail half-way."""
    env = os.environ.get(DATA_DIR_ENV)
    if root is not None:
        path, origin = Path(root).expanduser(), "--data-dir"
    elif env:
        path, origin = Path(env).expanduser(), f"${DATA_DIR_ENV}"
    else:
        path, origin = Path.home() / ".cache" / "robustbench_wave" / "data", "the default data folder"
    for place in (path, *path.parents):
        if place.exists():
            if not place.is_dir():
                raise ValueError(f"{origin} {path}: {place} is a file, not a folder; give a data folder")
            break
    return path


def md5_file(path: Path) -> str:
    """md5 of a file, read in blocks (archives are hundreds of MB)."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def verify_md5_file(path: Path, expected: str, what: str) -> None:
    """Raise :class:`ChecksumError` when a local file is not the canonical ``what``."""
    got = md5_file(path)
    if got != expected:
        raise ChecksumError(
            f"{path}: md5 is {got}, expected {expected}; the archive is corrupt or not the "
            f"canonical {what}: delete it (it will be downloaded again)"
        )


def verify_sha256(payload: bytes, expected: str, source: str | Path) -> None:
    """Raise :class:`ChecksumError` when decompressed content differs from the canonical one."""
    got = hashlib.sha256(payload).hexdigest()
    if got != expected:
        raise ChecksumError(
            f"{source}: sha256 of the decompressed content is {got}, expected {expected}; the file is "
            "corrupt or not the canonical one: delete it (it will be downloaded again) or reinstall "
            "the package"
        )


def _fetch(url: str, tmp: Path, md5: str | None, verify: Callable[[Path], None] | None) -> None:
    """Stream ``url`` into ``tmp`` and check it; an exception makes atomic_write delete the file."""
    digest = hashlib.md5(usedforsecurity=False)
    with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as fh:
        total = int(resp.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=Path(url).name, disable=None) as bar:
            while chunk := resp.read(_BLOCK):
                fh.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
    if md5 is not None and digest.hexdigest() != md5:
        raise ChecksumError(
            f"download of {url} is corrupt: md5 {digest.hexdigest()}, expected {md5}; "
            "the partial file was deleted, try again"
        )
    if verify is not None:
        verify(tmp)


def download(
    urls: Sequence[str], dest: Path, *, md5: str | None, verify: Callable[[Path], None] | None = None
) -> tuple[Path | None, list[str]]:
    """Try each mirror; return (dest, []) on success, (None, errors) otherwise. Bad checksums raise.

    ``verify`` checks the downloaded file further (e.g. the sha256 of its decompressed payload).
    """
    errors = []
    for url in urls:
        logger.info("downloading %s -> %s", url, dest)
        try:
            atomic_write(dest, lambda tmp, url=url: _fetch(url, tmp, md5, verify))
            return dest, []
        except ChecksumError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            errors.append(f"{url}: {exc}")
    return None, errors


def missing_reason(errors: list[str]) -> str:
    """Why a file is missing after the download step, for the error message."""
    return "download failed: " + "; ".join(errors) if errors else "downloading is disabled (download=False)"


def where_to_put(what: str, folder: Path) -> str:
    """The remedy sentence of a missing-data error, in the words of every door: the command lines read the
    folder from $RBW_DATA_DIR (train also from --data-dir), Python from ``root=``."""
    return (
        f"Put {what} in {folder}/ (choose the folder with ${DATA_DIR_ENV}, train's --data-dir or Python's "
        "root=), or run with network access: the files are then downloaded and checked against their "
        "published checksums"
    )
