"""The users of one Flower node, grouped by the policy that governs them.

A device has one owner and one policy, so one :class:`~fed.runtime.node.NodeHost`. A simulated node may
host users of several privacy tiers (fed.heterogeneity.tiers), each tier with its own policy, budget and
calibrated noise: one NodeHost per tier, over the same ledger store. :class:`NodeHosts` sends each
user's part of a message to its host and pools the answers, so the ClientApp serves both alike.

A message is all or nothing. It is checked by every host it concerns before any host releases or
changes anything, so a request refused for one tier's users (e.g. asked with another tier's smaller
noise) releases nothing and spends nothing for anyone; then every part is served in one transaction
of the node's store (the hosts share it), so a part that still fails while it is served rolls back
what the parts before it charged, and the reply is a refusal with nothing spent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldpfed.fed.learning.server_classifier import Model
from ldpfed.fed.learning.evaluation import Outcomes, UserOutcomes
from ldpfed.fed.runtime.node import NodeHost, NodeReply
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.runtime.requests import RequestRefused
from ldpfed.fed.runtime.user import Kind

MAX_PARTS = 64
"""Most release requests one message may carry (one per privacy tier in practice)."""


class NodeHosts:
    """The hosts of one node (each user in exactly one), answering as one node.

    Parameters
    ----------
    hosts:
        One host per policy; their users must not overlap.
    """

    def __init__(self, hosts: Sequence[NodeHost]) -> None:
        if not hosts:
            raise ValueError("a node needs at least one host")
        if any(host.store is not hosts[0].store for host in hosts):
            raise ValueError("a node's hosts share one ledger store (a message is one transaction)")
        self.hosts = list(hosts)
        self.host_of: dict[int, NodeHost] = {}
        for host in self.hosts:
            for uid in host.records:
                if uid in self.host_of:
                    raise ValueError(f"user {uid} is hosted twice")
                self.host_of[uid] = host

    def release(self, kind: Kind, parts: Sequence[Mapping[str, Any]]) -> list[NodeReply]:
        """Serve every request part, all in one transaction: if any part is refused or fails, nothing is
        released and nothing spent (RequestRefused, or the error, for the whole message).

        A part naming users of several hosts is split among them; one reply per host and part.
        """
        if not parts or len(parts) > MAX_PARTS:
            raise RequestRefused(f"a release message carries 1 to {MAX_PARTS} requests, got {len(parts)}")
        checked = [(host, host.check(kind, raw)) for part in parts for host, raw in self._split(part)]
        with self.hosts[0].store.transaction() as tx:
            return [host.serve(kind, request, tx) for host, request in checked]

    def _split(self, part: Mapping[str, Any]) -> list[tuple[NodeHost, Mapping[str, Any]]]:
        """The part's users by host (a part the first host must refuse, e.g. malformed users, goes to it whole)."""
        users = part.get("users")
        if len(self.hosts) == 1 or not isinstance(users, list) or not all(
            isinstance(u, int) and not isinstance(u, bool) and u in self.host_of for u in users
        ):
            return [(self.hosts[0], part)]
        by_host: dict[int, list[int]] = {}
        for uid in users:
            by_host.setdefault(id(self.host_of[uid]), []).append(uid)
        return [(host, {**part, "users": by_host[id(host)]}) for host in self.hosts if id(host) in by_host]

    def evaluate(self, models: Mapping[str, Model]) -> Outcomes:
        """Local-inference outcomes of every host's users (see :meth:`NodeHost.evaluate`)."""
        return _pooled([host.evaluate(models) for host in self.hosts])

    def score(self) -> Outcomes:
        """Remote-inference outcomes of every host's users (see :meth:`NodeHost.score`)."""
        parts = [host.score() for host in self.hosts]
        if len(parts) == 1:
            return parts[0]
        totals: dict[str, int] = {}
        for part in parts:
            for key, value in part.correct.items():
                totals[key] = max(totals.get(key, 0), value) if key == "steps_max" else totals.get(key, 0) + value
        return Outcomes(totals, {}, exact=True)

    def answer(self, users: np.ndarray, slots: np.ndarray, scores: np.ndarray) -> list[int]:
        """Take the server's answers (see :meth:`NodeHost.answer`), checked by every host before any takes them."""
        users = np.asarray(users)
        if len(self.hosts) == 1 or users.ndim != 1 or not np.issubdtype(users.dtype, np.integer):
            return self.hosts[0].answer(users, slots, scores)
        slots, scores = np.asarray(slots), np.asarray(scores)
        unknown = sorted(set(np.unique(users).tolist()) - set(self.host_of))
        if unknown:
            raise RequestRefused(f"users {unknown[:5]} are not hosted on this node")
        if len(slots) != len(users) or len(scores) != len(users):
            raise RequestRefused(f"answer arrays must align: {len(users)} users, {len(slots)} slots, {len(scores)} score rows")
        owned = [(host, np.isin(users, list(host.records))) for host in self.hosts]
        owned = [(host, mask) for host, mask in owned if mask.any()]
        for host, mask in owned:
            host.answer(users[mask], slots[mask], scores[mask], apply=False)
        return [uid for host, mask in owned for uid in host.answer(users[mask], slots[mask], scores[mask])]

    def ledgers(self) -> dict[int, dict[str, Any]]:
        """Every hosted user's ledger answer (see :meth:`NodeHost.ledgers`)."""
        return dict(sorted((uid, ledger) for host in self.hosts for uid, ledger in host.ledgers().items()))

    def full_ledgers(self) -> dict[int, Ledger]:
        """Every hosted user's full ledger (see :meth:`NodeHost.full_ledgers`)."""
        return dict(sorted((uid, ledger) for host in self.hosts for uid, ledger in host.full_ledgers().items()))

    def sessions_json(self) -> str:
        """Every hosted user's counter and session (each from its own host) as one JSON string."""
        sessions = dict(self.hosts[0].sessions)
        for host in self.hosts:
            sessions.update({uid: s for uid, s in host.sessions.items() if uid in host.records})
        return json.dumps({str(k): v for k, v in sessions.items()})

    @property
    def model_dim(self) -> int:
        """Dimension of the classifier's input (the same for every host: see :attr:`NodeHost.model_dim`)."""
        return self.hosts[0].model_dim

    @property
    def num_labels(self) -> int:
        """Number of classes of the run."""
        return int(self.hosts[0].plan.labels.num_values)


def _pooled(parts: list[Outcomes]) -> Outcomes:
    """One node's outcomes from its hosts' (exact counts only when there are several: simulation)."""
    if len(parts) == 1:
        return parts[0]
    if not all(part.exact for part in parts):
        raise ValueError("outcomes of several hosts pool exact counts only (a simulation)")
    correct = {name: sum(part.correct[name] for part in parts) for name in parts[0].correct}
    total = {name: sum(part.total[name] for part in parts) for name in parts[0].total}
    per_user = [part.per_user for part in parts if part.per_user is not None]
    pooled = None
    if per_user:
        pooled = UserOutcomes(
            np.concatenate([p.users for p in per_user]),
            np.concatenate([p.queries for p in per_user]),
            {name: np.concatenate([p.correct[name] for p in per_user]) for name in per_user[0].correct},
        )
    return Outcomes(correct, total, exact=True, per_user=pooled)
