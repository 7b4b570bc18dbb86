"""Release requests (``train``, ``query.release``) and their replies: one part per privacy tier and host."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.fed.protocol.content import Arrays, Config, Content, Readable, value
from ldpfed.fed.runtime.hosts import MAX_PARTS
from ldpfed.fed.runtime.node import NodeReply
from ldpfed.fed.runtime.requests import RequestRefused


def release_request(
    users: list[int], randomizer: Mapping[str, Any], records: int, sampling: str, summarise: bool = False
) -> Content:
    """Ask the listed users to release through ``randomizer`` (its params); ``summarise``: send report sums."""
    request = {"users": [int(u) for u in users], "randomizer": json.dumps(dict(randomizer)), "records": int(records), "sampling": sampling}
    if summarise:
        request["summarise"] = True
    return Content({"request": Config(request)})


def release_parts(parts: Sequence[Readable]) -> Content:
    """Several release requests in one message (one per privacy tier): records "request", "request-1", ..."""
    return Content({_part("request", i): Config(part.config_records["request"]) for i, part in enumerate(parts)})


def read_release_request(content: Readable) -> list[dict[str, Any]]:
    """The raw fields of each request part (validated against each user's limits by fed.runtime.requests)."""
    names = [name for name in content.config_records if name == "request" or name.startswith("request-")]
    if not names:
        raise RequestRefused("a release request needs a 'request' config record")
    if len(names) > MAX_PARTS:
        raise RequestRefused(f"a release message carries at most {MAX_PARTS} requests, got {len(names)}")
    expected = [_part("request", i) for i in range(len(names))]
    if sorted(names) != sorted(expected):
        raise RequestRefused(f"request parts must be named {', '.join(expected)}; got {', '.join(sorted(names))[:300]}")
    return [dict(content.config_records[name]) for name in expected]


def release_reply(replies: NodeReply | Sequence[NodeReply]) -> Content:
    """A node's release reply: one part per reply, each with the report sums in place of reports when summarised."""
    parts = [replies] if isinstance(replies, NodeReply) else list(replies)
    content = Content()
    for i, reply in enumerate(parts):
        content[_part("reports", i)], content[_part("meta", i)] = _reply_part(reply)
    return content


def _part(name: str, index: int) -> str:
    return name if index == 0 else f"{name}-{index}"


def _reply_part(reply: NodeReply) -> tuple[Arrays, Config]:
    arrays = Arrays(
        reports=np.ascontiguousarray(reply.reports, dtype=np.float32), labels=reply.labels, users=reply.users, slots=reply.slots
    )
    if reply.sums is not None:
        arrays.update(
            {
                "class-sums": np.ascontiguousarray(reply.sums.class_sums, dtype=np.float64),
                "label-counts": np.ascontiguousarray(reply.sums.label_counts, dtype=np.float64),
                "second-moment": np.ascontiguousarray(reply.sums.second_moment, dtype=np.float64),
            }
        )
    meta = Config(
        {
            "status": "ok",
            "randomizer": json.dumps(reply.randomizer),
            "label-channel": json.dumps(reply.label_channel),
            "refusals": json.dumps({str(k): list(v) for k, v in reply.refusals.items()}),
            "ledgers": json.dumps({str(k): v for k, v in reply.ledgers.items()}),
            "host": reply.host,
            "ledger-seconds": float(reply.ledger_seconds),
            "summed-reports": -1 if reply.sums is None else int(reply.sums.count),
        }
    )
    return arrays, meta


def read_release_replies(content: Readable) -> list[NodeReply]:
    """Inverse of :func:`release_reply`: each part (a reply without "host", e.g. from an older node, reads as "")."""
    parts = []
    while _part("meta", len(parts)) in content.config_records:
        i = len(parts)
        parts.append(_read_reply_part(content[_part("reports", i)], content[_part("meta", i)]))
    return parts


def read_release_reply(content: Readable) -> NodeReply:
    """The one part of a single-part release reply (ValueError if it has several)."""
    parts = read_release_replies(content)
    if len(parts) != 1:
        raise ValueError(f"expected a release reply of one part, got {len(parts)}")
    return parts[0]


def _read_reply_part(arrays: Mapping[str, Any], meta: Mapping[str, Any]) -> NodeReply:
    count = int(meta.get("summed-reports", -1))
    sums = None
    if count >= 0:
        sums = ReportSums(value(arrays["class-sums"]), value(arrays["label-counts"]), value(arrays["second-moment"]), count)
    return NodeReply(
        reports=value(arrays["reports"]),
        labels=value(arrays["labels"]),
        users=value(arrays["users"]),
        slots=value(arrays["slots"]),
        randomizer=json.loads(str(meta["randomizer"])),
        label_channel=json.loads(str(meta["label-channel"])),
        refusals={int(k): (str(v[0]), str(v[1])) for k, v in json.loads(str(meta["refusals"])).items()},
        ledgers={int(k): v for k, v in json.loads(str(meta["ledgers"])).items()},
        host=str(meta.get("host", "")),
        ledger_seconds=float(meta.get("ledger-seconds", 0.0)),
        sums=sums,
    )
