"""Every field a device reads from a server's message is in the inventory (issue 39, item 11).

A device (the real ClientApp, ``engine=False``) gets a seeded slice of the fuzz's hostile messages, every
type, whose records log each field the node reads. A field outside fed.protocol.inventory.INVENTORY fails
the test; docs/device.md lists every inventory row.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from ldpfed.fed import protocol
from ldpfed.fed.protocol.inventory import INVENTORY, unlisted
from ldpfed.simulations.checks import fuzz_benchmark

MESSAGES = 300
DOCS = Path(__file__).resolve().parents[1] / "docs" / "device.md"


class _Reads:
    """The fields read, as (message type, '<record>.<key>'); '<record>.*' for a read of the whole record."""

    seen: set[tuple[str, str]] = set()
    message_type = ""


def _logging(base: type) -> type:
    class Logged(base):  # type: ignore[misc, valid-type]
        def _read(self, key: str) -> None:
            _Reads.seen.add((_Reads.message_type, f"{self._record}.{key}"))

        def __getitem__(self, key: str) -> Any:
            self._read(key)
            return super().__getitem__(key)

        def __contains__(self, key: object) -> bool:
            self._read(str(key))
            return super().__contains__(key)

        def __iter__(self) -> Any:
            self._read("*")
            return super().__iter__()

        def keys(self) -> Any:
            self._read("*")
            return super().keys()

    return Logged


_CLASSES = {cls: _logging(cls) for cls in (ArrayRecord, ConfigRecord, MetricRecord)}


def _recording(content: RecordDict) -> RecordDict:
    """The same records, each logging the fields read from it."""
    out = RecordDict()
    for name, record in content.items():
        logged = _CLASSES[type(record)].__new__(_CLASSES[type(record)])
        logged.__dict__.update(record.__dict__)
        logged._record = name
        out[name] = logged
    return out


def test_a_device_reads_only_the_fields_in_the_inventory(tmp_path: Path) -> None:
    grid = fuzz_benchmark.node(tmp_path, memoize=False)
    rng = np.random.default_rng(3)
    hostile = fuzz_benchmark.Hostile(rng, fuzz_benchmark.bundle(tmp_path / "bundle"), 384, 4)
    types = [*protocol.MESSAGE_TYPES, *fuzz_benchmark.UNKNOWN_TYPES]
    _Reads.seen = set()
    for _ in range(MESSAGES):
        message_type = types[int(rng.integers(len(types)))]
        content = hostile.content(message_type if message_type in fuzz_benchmark.MESSAGE_TYPES else protocol.SETUP)
        _Reads.message_type = message_type
        (reply,) = grid.send_and_receive([Message(_recording(content), dst_node_id=fuzz_benchmark.NODE, message_type=message_type)])
        assert not reply.has_error(), reply.error.reason
        if message_type == protocol.RELEASE and protocol.read_refusal(reply.content) is None:
            hostile.released_slots(len(protocol.read_release_reply(reply.content).slots))
    outside = sorted((t, f) for t, f in _Reads.seen if unlisted(t, f))
    assert outside == [], f"fields read outside the inventory: {outside}"
    read_types = {t for t, _ in _Reads.seen}
    assert {protocol.SETUP, protocol.TRAIN, protocol.RELEASE, protocol.ANSWER, protocol.EVALUATE} <= read_types  # the recorder sees reads


@pytest.mark.parametrize("field", ["request.users", "answers.extra", "models.m0.weights"])
def test_the_inventory_check_itself(field: str) -> None:
    """A field of the wrong message type is outside; a listed pattern covers its fields."""
    assert unlisted(protocol.SETUP, field)
    assert not unlisted(protocol.TRAIN, "request.users") and not unlisted(protocol.EVALUATE, "models.m0.weights")
    assert unlisted(protocol.ANSWER, "answers.extra")


def test_docs_list_every_inventory_row() -> None:
    text = DOCS.read_text()
    section = text[text.index("## What a device reads from the server"):]
    for message_type, fields in INVENTORY.items():
        for pattern in fields:
            assert re.search(rf"`{re.escape(message_type)}`.*`{re.escape(pattern)}`", section), (message_type, pattern)
