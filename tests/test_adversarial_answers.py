"""Remote-inference answers cannot tell the server which slot held the true query (issue 39, finding 2).

The attack: with up-sampling, a user releases its true query among fictitious ones, shuffled into
slots. The server answered one slot per message; the slot after which the reply listed the user as
finished was the true query (127 of 127 over 128 runs, epsilon 7.63 unamplified against an enforced
2.0). Now a step's answers come in one message covering every slot it released; anything else is
refused and changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed import protocol
from ldpfed.fed.privacy.sampling import UpSampling
from ldpfed.fed.runtime.requests import Refusal
from tests.test_adversarial_server import _device, _ledger, _policy, _send, bundle, data  # noqa: F401 (fixtures)

UP = UpSampling(q=0.5, p=1.0, k=1)
RUN = dict(labels="public", upsampling_q=UP.q, p_query=UP.p, answers=UP.k)
RANDOMIZER = {"mechanism": "gaussian", "clip": 1.0, "sigma": 8.0}


def _query(grid: object) -> protocol.NodeReply:
    reply = _send(grid, protocol.RELEASE, protocol.release_request([0], RANDOMIZER, 0, UP.spec))
    assert protocol.read_refusal(reply.content) is None, protocol.read_refusal(reply.content)
    return protocol.read_release_reply(reply.content)


def _answer(grid: object, slots: np.ndarray, num_labels: int = 2) -> object:
    scores = np.tile(np.eye(num_labels)[0], (len(slots), 1))
    return _send(grid, protocol.ANSWER, protocol.answer_request(np.zeros(len(slots), np.int64), slots.astype(np.int64), scores))


@pytest.mark.parametrize("enforce", ["amplified", "worst-case"])
def test_answers_one_slot_at_a_time_are_refused_and_change_nothing(data: Path, bundle: np.ndarray, tmp_path: Path, enforce: str) -> None:  # noqa: F811
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=2.0, labels="public", enforce=enforce, memoize=False)
    grid = _device(data, bundle, tmp_path / "state", policy, **RUN)
    released = _query(grid)
    slots = released.slots
    assert len(slots) > 1
    spent = _ledger(grid).releases()
    for slot in slots:  # the attack: one slot per message, watching for the user to be finished
        reply = _answer(grid, np.array([slot]))
        code, reason = protocol.read_refusal(reply.content)
        assert code == Refusal.MALFORMED and f"all {len(slots)} slots" in reason
    assert protocol.read_refusal(_answer(grid, slots[:-1]).content)[0] == Refusal.MALFORMED  # all but one: refused too
    assert _ledger(grid).releases() == spent
    # The whole step in one message is taken (in any order), once.
    reply = _answer(grid, slots[::-1].copy())
    assert protocol.read_refusal(reply.content) is None
    assert protocol.read_answer_reply(reply.content) == [0]  # p = 1, k = 1: every true query has its answer
    again = _answer(grid, slots)
    assert protocol.read_refusal(again.content)[0] == Refusal.MALFORMED
