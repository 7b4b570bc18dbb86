"""A device's users come from its own data and its owner's config, never from the run config (issue 39, finding 1).

The attack: a run config with ``users=2, partition="dirichlet:0.001", seed=5`` made the device split
its records by label, so the setup reply's train and query counts were the device's label histograms
and each training report's ``users`` entry gave its true label (12 of 12, against the 50% that
``labels = "rr:1.0"`` allows). Now a device hosts one user, id ``partition-id``, holding every
record: whatever population options the server sends, the setup reply is the same.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed import protocol
from ldpfed.fed.runtime.requests import Refusal
from tests.test_adversarial_server import _device, _policy, _send, bundle  # noqa: F401 (bundle: a fixture)

TRAIN, DEV = 12, 4
HOSTILE = dict(users=2, partition="dirichlet:0.001", seed=5)


def _folder(folder: Path, train_labels: list[int], dev_labels: list[int], labels_txt: bool = True) -> Path:
    """A two-class folder dataset with the given labels, one distinct sentence per row."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, labels in (("train", train_labels), ("dev", dev_labels)):
        rows = ["sentence\tlabel", *(f"{split} record {i} was {'fine' if y else 'dull'}\t{y}" for i, y in enumerate(labels))]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    if labels_txt:
        (folder / "labels.txt").write_text("0\tdull\n1\tfine\n")
    return folder


def _info(grid: object) -> protocol.NodeInfo:
    reply = _send(grid, protocol.SETUP, protocol.setup_request(grid.bundle))  # type: ignore[attr-defined]
    assert protocol.read_refusal(reply.content) is None, protocol.read_refusal(reply.content)
    return protocol.read_setup_reply(reply.content)


def _node(tmp_path: Path, name: str, data: Path, bundle: np.ndarray, policy: Path, **run: object) -> object:
    grid = _device(data, bundle, tmp_path / name, policy, **run)
    grid.bundle = bundle  # type: ignore[attr-defined]
    return grid


def test_a_hostile_partition_does_not_group_the_devices_records_by_label(tmp_path: Path, bundle: np.ndarray) -> None:  # noqa: F811
    data = _folder(tmp_path / "data", [0, 1, 1, 1] * 3, [0, 1, 1, 1])
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=8.0, labels="rr:1.0")
    hostile = _node(tmp_path, "hostile", data, bundle, policy, **HOSTILE)
    info = _info(hostile)
    assert (info.users, info.train_counts, info.query_counts, info.num_labels) == ([0], [TRAIN], [DEV], 2)
    # The same reply whatever population options the server sends.
    honest = _node(tmp_path, "honest", data, bundle, policy, users=1, partition="iid", seed=0, train_limit=0)
    assert _info(honest) == info
    limited = _node(tmp_path, "limited", data, bundle, policy, users=3, partition="dirichlet:0.01", seed=9, train_limit=6)
    assert _info(limited) == info
    # The second user the server's partition would have made does not exist: asking for it is refused.
    reply = _send(hostile, protocol.TRAIN, protocol.release_request([0, 1], {"mechanism": "gaussian", "clip": 1.0, "sigma": 3.0}, 0, "all"))
    code, reason = protocol.read_refusal(reply.content)
    assert code == Refusal.MALFORMED and "not hosted" in reason


def test_a_device_hosts_the_user_its_owner_names(tmp_path: Path, bundle: np.ndarray) -> None:  # noqa: F811
    from ldpfed.fed.device.state import init_state
    from ldpfed.clients.app import FLOWER, app as client_app
    from ldpfed.fed.configuration.run_spec import RunSpec
    from flwr.app import Message
    from ldpfed.simulations.local_grid import LocalGrid

    data = _folder(tmp_path / "data", [0, 1] * 6, [0, 1, 0, 1])
    node_config = {"data": str(data), "state-dir": str(init_state(tmp_path / "state")), "partition-id": 2, "num-partitions": 3}
    run = RunSpec.from_mapping(dict(data="generated:40", public="none", dim=0, users=3, nodes=1, rounds=1, epsilon=3.0)).to_mapping()
    grid = LocalGrid(client_app, 1, run, engine=False, node_configs=[node_config])
    (reply,) = grid.send_and_receive([Message(FLOWER(protocol.setup_request(bundle)), dst_node_id=1000, message_type=protocol.SETUP)])
    info = protocol.read_setup_reply(reply.content)
    assert (info.users, info.train_counts, info.query_counts) == ([2], [TRAIN], [DEV])


def test_the_label_set_comes_from_the_schema_or_the_policy_never_the_records(tmp_path: Path, bundle: np.ndarray) -> None:  # noqa: F811
    """A device whose records hold only label 0 still says 2 labels, and its training requests are served."""
    only_zero = [0] * TRAIN
    with_schema = _folder(tmp_path / "schema", only_zero, [0] * DEV)
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=8.0, labels="rr:1.0")
    grid = _node(tmp_path, "schema-node", with_schema, bundle, policy)
    assert _info(grid).num_labels == 2
    reply = _send(grid, protocol.TRAIN, protocol.release_request([0], {"mechanism": "gaussian", "clip": 1.0, "sigma": 3.0}, 0, "all"))
    assert protocol.read_refusal(reply.content) is None, protocol.read_refusal(reply.content)
    assert len(protocol.read_release_reply(reply.content).reports) == TRAIN

    # No labels.txt: the owner's policy names the label set; without it setup is refused, naming the fix.
    bare = _folder(tmp_path / "bare", only_zero, [0] * DEV, labels_txt=False)
    named = _policy(tmp_path / "named.toml", epsilon_sentence=8.0, labels="rr:1.0", num_labels=3)
    assert _info(_node(tmp_path, "named-node", bare, bundle, named)).num_labels == 3
    with pytest.raises(AssertionError, match="num_labels"):
        _node(tmp_path, "bare-node", bare, bundle, policy)


def test_an_error_in_the_devices_data_does_not_reach_the_server(tmp_path: Path, bundle: np.ndarray, capfd: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """A label outside the label set is refused with a text that names no line and no label (the owner's log has them)."""
    data = _folder(tmp_path / "data", [0, 1, 7] + [0] * (TRAIN - 3), [0] * DEV)
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=8.0)
    with pytest.raises(AssertionError) as refused:
        _node(tmp_path, "node", data, bundle, policy)
    assert "cannot be used" in str(refused.value) and "7" not in str(refused.value).split("cannot be used")[1]
    assert "7" in capfd.readouterr().err  # the owner reads the details in the node's log
