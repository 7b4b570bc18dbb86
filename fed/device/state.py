"""A device's state folder: its record-id key and its ledger, bound together, readable by the owner only.

design.md section 2b: a deployed user's spending lives on the device and follows each record by
its id, a keyed hash under the device's own key (fed.device.record_ids). The two only mean something
together: a new key makes every record look unspent to the ledger, and a new ledger forgets
what the key's records spent. So the ledger stores the key's fingerprint
(:func:`fed.device.record_ids.key_fingerprint`), and a node serves only when both are there and belong
to each other (:func:`open_state`). Deleting local state stays the owner's right, but the node
never starts over by itself: the state is made by an explicit owner action, :func:`init_state`
(``ldpfed device init``), and after a deletion the node refuses until the owner runs it again.

Everything a device keeps is its owner's alone: folders mode 700, files mode 600, whatever the
umask (:func:`owner_only_dir`, :func:`write_owner_only`, :data:`DEVICE_UMASK`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ldpfed.fed.device.record_ids import KEY_FILE, create_secret, device_secret, key_fingerprint

LEDGER_FILE = "ledger.sqlite"
DEVICE_UMASK = 0o077
"""The umask of a device's node process (fed.device.site): files libraries make (SQLite's -wal/-shm, caches) are the owner's."""


def owner_only_dir(path: Path) -> Path:
    """Make ``path`` (and missing parents) a folder of mode 700, whatever the umask; return it."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_owner_only(path: Path, data: bytes) -> None:
    """Write ``path`` as a file of mode 600, whatever the umask or the mode of a file already there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(fd, 0o600)
        handle.write(data)


def restrict(folder: Path) -> None:
    """Make ``folder`` and everything under it the owner's only (folders 700, files 600; links left alone)."""
    folder.chmod(0o700)
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(root) / name
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                path.chmod(0o700 if stat.S_ISDIR(mode) else 0o600)


def start_over(state: Path) -> str:
    """How the owner starts over, forgetting what the device's records spent."""
    return (
        f"to start over (every record's spending forgotten), delete {state} and run `ldpfed device init` "
        "on the device folder (fed.device.state.init_state)"
    )


def copied(ledger: Path, recorded: int, inode: int) -> str:
    """The ledger is another file than the one it was made as: a copy of the state folder, or a restored backup."""
    return (
        f"the ledger {ledger} is not the file it was made as (inode {recorded}, now {inode}): the state folder was copied, "
        "restored from a backup or moved to another file system. Each copy that serves releases every record again with "
        "fresh noise, at its full budget. If this folder alone serves from now on (the original deleted, never started "
        "again), run `ldpfed device init DIR --rebind`; a restored backup forgets what was spent after it was made"
    )


def _inode(path: Path) -> int:
    """The file's identity on its file system (0 where the platform has none: nothing is checked then)."""
    return int(path.stat().st_ino)


def init_state(path: Path, rebind: bool = False) -> Path:
    """Make a device's state folder: a fresh key and a ledger bound to it (the owner's explicit action).

    A state folder already made is kept as it is (its modes set to the owner's only); a ledger
    written before keys were bound is bound to the key beside it. ValueError, changing nothing,
    when only one of key and ledger is there or they belong to different keys: that is a state
    to delete before starting over, never one to repair silently.

    The ledger records the file it is (its inode), so that a copy of the folder, which would spend
    every budget again, is refused (:func:`open_state`). A copied or restored folder raises ValueError
    unless ``rebind`` (``ldpfed device init DIR --rebind``): the owner's word that this folder alone serves.
    """
    from ldpfed.fed.privacy.store import LedgerStore  # here: `ldpfed device` stays light to import

    state = owner_only_dir(Path(path))
    key, ledger = state / KEY_FILE, state / LEDGER_FILE
    if key.exists() != ledger.exists():
        missing, present = (ledger, key) if key.exists() else (key, ledger)
        raise ValueError(f"{missing} is missing but {present} is there; {start_over(state)}")
    if not key.exists():
        secret = create_secret(state)
        write_owner_only(ledger, b"")  # an empty file is an empty SQLite database; SQLite keeps its mode
    else:
        secret = device_secret(state)
    store = LedgerStore(ledger, durable=True, create=False)
    if store.bound_key() not in (None, key_fingerprint(secret)):
        raise ValueError(f"{ledger} belongs to another record-id key than {key}; {start_over(state)}")
    recorded, inode = store.placement(), _inode(ledger)
    if recorded not in (None, inode) and inode and not rebind:
        raise ValueError(copied(ledger, recorded, inode))
    store.bind(key_fingerprint(secret))
    if inode and recorded != inode:
        store.place(inode)
    restrict(state)
    return state


def open_state(path: Path) -> bytes:
    """The device's record-id key, once its state folder is whole and its ledger bound to that key.

    ValueError naming what is missing or foreign, and how the owner starts over, otherwise.
    """
    from ldpfed.fed.privacy.store import LedgerStore

    state = Path(path)
    key, ledger = state / KEY_FILE, state / LEDGER_FILE
    if not state.is_dir():
        raise ValueError(f"the state folder {state} does not exist: the owner makes it with `ldpfed device init`")
    for file, what in ((key, "record-id key"), (ledger, "ledger")):
        if not file.is_file():
            raise ValueError(f"this device's {what} {file} is missing; {start_over(state)}")
    secret = device_secret(state)
    bound = LedgerStore(ledger, durable=True, create=False).bound_key()
    if bound is None:
        raise ValueError(
            f"the ledger {ledger} is bound to no record-id key (an empty or foreign database, or one written before "
            f"keys were bound, which `ldpfed device init` binds to the key beside it); {start_over(state)}"
        )
    if bound != key_fingerprint(secret):
        raise ValueError(f"the ledger {ledger} belongs to another record-id key than {key}; {start_over(state)}")
    store, inode = LedgerStore(ledger, durable=True, create=False), _inode(ledger)
    recorded = store.placement()
    if recorded is None and inode:  # a ledger made before it recorded its file: recorded now (a copy made before is not seen)
        store.place(inode)
    elif inode and recorded != inode:
        raise ValueError(copied(ledger, recorded, inode))
    return secret
