"""A device's cache of accounting figures on disk: each figure computed once, never trusted unchecked.

Flower starts a new process for every message (docs/device.md, "What it costs"), so an
in-process cache forgets everything between messages. A ledger that mixes a Gaussian with
randomized-response labels composes through dp_accounting's privacy loss distributions, and
a device's plan calibrates its noise against that composition by bisection: tens of seconds
per message on a busy core, the same figures every time. Each figure is a pure function of
public parameters (the events, their counts, delta), so a device keeps them in its state
folder, ``<state-dir>/figures.json``, and a later message reads them back.

A cached figure must never let a ledger answer less than the true composition:

- The entry's key is a digest of the figure's kind and parameters (canonical JSON, every
  float exact) and of the accounting code: the source of the modules that compute figures
  and the versions of dp_accounting, SciPy and numpy (:func:`accounting_fingerprint`). Other
  code or libraries mean other keys; their old figures are never read.
- Every entry carries an HMAC-SHA256 of its key and value under a key derived from the
  device's record-id key (fed.device.record_ids). An entry edited, copied from another device, or
  torn is not trusted: its figure is computed again. The server cannot write the state
  folder; this guards against everything else (a crash mid-write, a damaged disk, a file from
  elsewhere).
- The file is owner-only (mode 600) and replaced atomically. It is not fsynced: a lost entry
  costs a recomputation, never a wrong figure.

Only a device uses it (fed.device.site turns it on with the device's state folder); elsewhere, and
for any figure not in the file, figures are computed as before.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FIGURES_FILE = "figures.json"
"""The cache's file inside a device's state folder."""
MAX_ENTRIES = 4096
"""Most entries the file keeps (the oldest go first); a few hundred bytes each."""
ACCOUNTING_SOURCES = (
    "composition.py", "events.py", "gdp.py", "calibration.py", "solver.py", "validators.py", "figure_cache.py",
)
"""The modules of fed/privacy whose code a figure depends on: part of every key."""
ACCOUNTING_LIBRARIES = ("dp-accounting", "scipy", "numpy")
_MAC_LABEL = b"ldpfed accounting figure cache v1"


def accounting_fingerprint() -> str:
    """Digest of the accounting code: the source of :data:`ACCOUNTING_SOURCES` and the versions of
    :data:`ACCOUNTING_LIBRARIES` (read from their metadata, without importing them)."""
    digest = hashlib.sha256()
    folder = Path(__file__).parent
    for name in ACCOUNTING_SOURCES:
        data = (folder / name).read_bytes()
        digest.update(len(data).to_bytes(8, "little") + data)
    for library in ACCOUNTING_LIBRARIES:
        digest.update(f"{library}=={importlib.metadata.version(library)}\n".encode())
    return digest.hexdigest()


class FigureStore:
    """Figures on disk, each entry authenticated under a key derived from ``secret``.

    Parameters
    ----------
    path:
        The cache file (its folder must exist: a device's state folder).
    secret:
        The device's record-id key; the MAC key is derived from it, apart from its other uses.
    """

    def __init__(self, path: Path, secret: bytes) -> None:
        self.path = Path(path)
        self._mac_key = hmac.new(secret, _MAC_LABEL, hashlib.sha256).digest()
        self._fingerprint: str | None = None
        self._entries: dict[str, list[str]] | None = None
        self._dirty = False

    def figure(self, kind: str, params: Any, compute: Callable[[], float]) -> float:
        """The figure ``kind`` of ``params`` (JSON-ready): from the file when its entry verifies, else computed and stored."""
        key = self._key(kind, params)
        entries = self._load()
        value = self._verified(key, entries.get(key))
        if value is not None:
            return value
        value = float(compute())
        if not math.isnan(value):
            entries.pop(key, None)
            entries[key] = [value.hex(), self._mac(key, value.hex())]
            while len(entries) > MAX_ENTRIES:
                del entries[next(iter(entries))]
            self._dirty = True
            if not _DEFERRED:
                self.flush()
        return value

    def flush(self) -> None:
        """Write the figures stored since the last write, if any."""
        if self._dirty:
            self._write(self._load())

    def _key(self, kind: str, params: Any) -> str:
        if self._fingerprint is None:
            self._fingerprint = accounting_fingerprint()
        text = json.dumps([self._fingerprint, kind, params], sort_keys=True, separators=(",", ":"), allow_nan=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def _mac(self, key: str, value: str) -> str:
        return hmac.new(self._mac_key, f"{key}\n{value}".encode(), hashlib.sha256).hexdigest()

    def _verified(self, key: str, entry: Any) -> float | None:
        """The entry's figure if its MAC verifies and it is a number >= 0 (inf allowed); None otherwise."""
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) for part in entry)):
            return None
        text, mac = entry
        if not hmac.compare_digest(mac, self._mac(key, text)):
            return None
        try:
            value = float.fromhex(text)
        except (ValueError, OverflowError):
            return None
        return value if value >= 0 else None

    def _load(self) -> dict[str, list[str]]:
        """The file's entries, read once per process; an unreadable or damaged file counts as empty."""
        if self._entries is None:
            try:
                data = json.loads(self.path.read_text())
                entries = data.get("entries") if isinstance(data, dict) else None
            except (OSError, ValueError, UnicodeDecodeError):
                entries = None
            self._entries = dict(entries) if isinstance(entries, dict) else {}
        return self._entries

    def _write(self, entries: dict[str, list[str]]) -> None:
        """Replace the file (mode 600) with ``entries``; a cache that cannot be written is only slower."""
        self._dirty = False
        try:
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".figures-", suffix=".json")
        except OSError:
            return
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump({"entries": entries}, handle, separators=(",", ":"))
            os.replace(temp, self.path)
        except OSError:
            pass
        finally:
            if os.path.exists(temp):
                os.unlink(temp)


_STORE: FigureStore | None = None
"""This process's store: set on a device (fed.device.site), None elsewhere."""
_DEFERRED = 0
"""How many :func:`batch` blocks are open: while any is, new figures wait for the last one's end."""


def use_store(path: Path, secret: bytes) -> None:
    """Keep this process's figures in ``path``, authenticated under ``secret`` (a device's state folder and key)."""
    global _STORE
    path = Path(path)
    if _STORE is None or _STORE.path != path or not hmac.compare_digest(_STORE._mac_key, FigureStore(path, secret)._mac_key):
        if _STORE is not None:
            _STORE.flush()
        _STORE = FigureStore(path, secret)


def stop_store() -> None:
    """Compute every figure afresh from now on (no store)."""
    global _STORE
    _STORE = None


def cached_figure(kind: str, params: Any, compute: Callable[[], float]) -> float:
    """``compute()``, or its figure from this process's store (when a device set one and its entry verifies)."""
    return compute() if _STORE is None else _STORE.figure(kind, params, compute)


def storing() -> bool:
    """Whether this process keeps its figures in a store (a device)."""
    return _STORE is not None


@contextmanager
def batch() -> Iterator[None]:
    """Figures stored in this block (a whole message, fed.device.site's store set in it or not) reach the file once, at its end."""
    global _DEFERRED
    _DEFERRED += 1
    try:
        yield
    finally:
        _DEFERRED -= 1
        if not _DEFERRED and _STORE is not None:
            _STORE.flush()
