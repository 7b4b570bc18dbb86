"""Reading device traces in FedScale's published format, without running code from the file.

FedScale ships its traces as pickles (``client_device_capacity``: client id -> {'computation': ms
per sample, 'communication': kbps}; ``client_behave_trace``: client id -> {'active': [s],
'inactive': [s], 'finish_time': s, ...}). A pickle may name any importable callable, so a trace is
read with an unpickler that refuses every global: plain dicts, lists, numbers and strings only.
The same structure as JSON (keys as strings) is read too. Hand-written because pickle has no
data-only mode and FedScale publishes no other format.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any


class _DataOnly(pickle.Unpickler):
    """An unpickler that builds containers and numbers but imports nothing."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}; a trace holds plain dicts, lists and numbers only")


def read_trace(path: str | Path) -> dict[Any, dict[str, Any]]:
    """A FedScale trace (pickle, or the same structure as JSON): client id -> that client's entry.

    Raises
    ------
    ValueError
        Naming the file and what is wrong with it (missing, unreadable, not a mapping of mappings).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ValueError(f"trace {path}: {error.strerror or error}") from None
    try:
        data = json.loads(raw) if path.suffix == ".json" else _DataOnly(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, json.JSONDecodeError, EOFError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"trace {path} cannot be read: {error}") from None
    if not isinstance(data, dict) or not data or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"trace {path} must map client ids to entries (dicts), as FedScale's traces do")
    return data
