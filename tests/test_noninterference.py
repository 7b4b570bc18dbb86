"""Non-interference: devices that differ only in private content answer the server alike outside charged releases.

A seeded slice of ``simulations.checks.noninterference`` (issue 39, item 10): 200 hostile messages of
every type to a base device and to one device per private respect (one label, one duplicated record,
one sentence's text, the label histogram, the number of distinct sentences, and the secret coins),
with memoization on and off. ``python -m ldpfed.simulations.checks.noninterference --messages 5000`` runs the
long campaign. The privacy mutations put findings 1 and 2 of issue 39 back, and a device's own per-user
summary in its release replies; each fails this test (simulations/checks/mutations.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from ldpfed.simulations.checks import noninterference

MESSAGES = 200
"""Hostile messages per pair in CI (each goes to every device)."""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One encoding cache for every device of the module (the data differ; their encodings are cached by content)."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("memoize", [True, False], ids=["memoize", "no-memo"])
def test_devices_that_differ_in_private_content_answer_alike(tmp_path: Path, cache: Path, memoize: bool) -> None:
    grids = noninterference.devices(tmp_path, memoize, cache)
    result = noninterference.campaign(grids, MESSAGES, seed=int(memoize))
    report = noninterference.report(result)
    assert set(result.sent) == {*noninterference.PAIRS, noninterference.COINS}
    assert all(n == MESSAGES for n in result.sent.values()), report
    assert result.served >= MESSAGES // 10, report  # the stream holds requests a device serves, not only refusals
    assert result.count == 0, report


def _reply(records: dict) -> Message:
    from flwr.supercore.task_identity import TaskIdentity

    # The run identity Flower stamps on a new message, as an in-process grid sets it (alone, no grid has run yet).
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    message = Message(RecordDict(), dst_node_id=1, message_type="train")
    return Message(RecordDict(records), reply_to=message)


def test_a_reply_field_no_device_sends_is_named() -> None:
    """The outbound check: a per-user summary in a release reply (the same on both nodes of a pair when the
    coins are the same, so only this check sees it), a record no device sends, and exact outcomes."""
    summary = {"0": {"epsilon_sentence": 1.0, "epsilon_user": 1.0, "releases": 3.0, "train_records_left": 5.0}}
    problems = noninterference.outbound_problems(_reply({"meta": ConfigRecord({"status": "ok", "ledgers": json.dumps(summary), "host": ""})}))
    assert problems == ["meta.ledgers of user 0 carries ['epsilon_sentence', 'epsilon_user', 'releases', 'train_records_left'], not the served figures ['epsilon_sentence', 'epsilon_user']"]
    assert noninterference.outbound_problems(_reply({"debug": ConfigRecord({"x": 1})})) == ["record 'debug' is not one a device sends"]
    served = {"0": {"epsilon_sentence": 1.0, "epsilon_user": 1.0}}
    assert noninterference.outbound_problems(_reply({"meta-1": ConfigRecord({"status": "ok", "ledgers": json.dumps(served)})})) == []


def test_the_campaign_runs_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert noninterference.main(["--messages", "3", "--memoize", "off"]) == 0
    out = capsys.readouterr().out
    assert "memoize off: 3 messages to 7 devices" in out and "findings: 0" in out
