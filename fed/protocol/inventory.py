"""What a device reads from a server's message: every record field, by message type, with the check that governs it.

Issue 39, item 11. Patterns are ``fnmatch`` patterns over ``<record>.<field>`` (``<record>.*``: the whole
record is read, e.g. copied). docs/device.md lists the same rows, with the bundle files and run-config keys;
``tests/test_device_inventory.py`` records the fields a device actually reads during a fuzz and fails on any
field outside this table.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from ldpfed.fed.protocol.messages import ANSWER, EVALUATE, LEDGER, RELEASE, SCORE, SETUP, TRAIN

_RELEASE = {
    "request*.*": "copied whole; fed.runtime.requests.parse_release_request reads users, randomizer, records, sampling and "
    "summarise and ignores the rest; refused unless each user is hosted and named once, the randomizer is allowed by the "
    "policy (mechanisms, floors, max_dim, min_release_epsilon) and the sampling is the plan's",
}
INVENTORY: dict[str, dict[str, str]] = {
    SETUP: {
        "assets.bundle": "a 1-D uint8 tar of at most the policy's max_bundle_bytes; its files checked by name and digest "
        "(encoder resolver, tuned_encoders) before any is loaded; the plans it gives checked before the node changes",
    },
    TRAIN: _RELEASE,
    RELEASE: _RELEASE,
    ANSWER: {
        "answers.users": "1-D integers, hosted users",
        "answers.slots": "1-D integers: every slot of the user's last query step, once, in one message",
        "answers.scores": "a finite 2-D float matrix, one row per slot, a score per label",
    },
    EVALUATE: {
        "models.*": "at most the policy's max_models classifiers (<model>.weights and .bias, or .layer<j>.weights and "
        ".bias), each in shape, finite and within the MLP caps; outcomes leave only through the evaluation channel",
    },
    SCORE: {},
    LEDGER: {},
}
"""Message type -> field pattern -> the check that governs it. The central-DP types (``train.central``,
``train.central_adaptive``) are refused on a device before any field is read."""


def unlisted(message_type: str, field: str) -> bool:
    """Whether a device reading ``field`` (``<record>.<key>``) of a ``message_type`` message is outside :data:`INVENTORY`."""
    return not any(fnmatchcase(field, pattern) for pattern in INVENTORY.get(message_type, {}))
