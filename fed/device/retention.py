"""How much a device keeps: its folders stay bounded whatever bundles the server sends.

Each setup bundle a device accepts leaves three things behind: its unpacked folder (``<cache>/assets/<digest>/``,
fed.runtime.assets), the hosted users' record set (``<state-dir>/records/<key>.npz``, fed.device.records) and, for
an encoder of its own (shipped BiLSTM weights, tuned layers, a projection does not count), its encodings
(``<cache>/encodings/<fingerprint>/``, fed.encoders.cache). Nothing removed them, so a server that sent new
bundles (another projection each time) grew the device's disk without bound (issue 39, finding 7).

After each setup a device keeps, of each of the three, the ``max_stored_bundles`` (policy) most recently used and
removes the rest, least recently used first. "Used" is the modification time: a record set is touched whenever a
message reads it, an encodings folder whenever an encoding reads it, and the bundle's folder by its setup. What this
setup uses is always kept. A message of an older run whose records were removed is refused ``not-set-up``, so its
server sets the node up again (the records are encoded anew; nothing spent is forgotten: the ledger is apart).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ldpfed.fed.device.records import RECORDS_FOLDER
from ldpfed.fed.runtime.assets import default_cache_dir

if TYPE_CHECKING:
    from ldpfed.fed.device.site import Site

ASSETS_FOLDER = "assets"
ENCODINGS_FOLDER = "encodings"


def touch(path: Path) -> None:
    """Mark ``path`` used now (its modification time); nothing when it is gone."""
    try:
        os.utime(path)
    except OSError:
        pass


def keep_recent(folder: Path, keep: int, current: Path | None = None) -> list[Path]:
    """Remove all but the ``keep`` most recently modified entries of ``folder`` (``current`` always kept; names
    starting with '.', files being written, left alone); return what was removed."""
    if not folder.is_dir():
        return []
    entries = []
    for entry in folder.iterdir():
        if entry.name.startswith("."):
            continue
        try:
            entries.append((entry.lstat().st_mtime_ns, entry))
        except OSError:  # removed meanwhile (another process)
            continue
    entries.sort(key=lambda item: item[0], reverse=True)
    kept = {current.resolve()} if current is not None else set()
    removed = []
    for _, entry in entries:
        if entry.resolve() in kept or len(kept) < keep:
            kept.add(entry.resolve())
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def bound_device_folders(site: Site, bundle_folder: Path | str) -> list[Path]:
    """After a device's setup with the unpacked ``bundle_folder``: keep the policy's ``max_stored_bundles`` most
    recently used record sets, unpacked bundles and encodings (this setup's among them); return what was removed.
    Nothing inside the simulation engine (the experimenter's caches)."""
    if site.simulation or site.device_policy is None:
        return []
    keep, cache = site.device_policy.max_stored_bundles, default_cache_dir(site.config)
    touch(Path(bundle_folder))
    removed = keep_recent(site.state_dir / RECORDS_FOLDER, keep)  # this setup's set was just read or written
    removed += keep_recent(cache / ASSETS_FOLDER, keep, Path(bundle_folder))
    removed += keep_recent(cache / ENCODINGS_FOLDER, keep)  # this setup's encodings were just read or written
    return removed
