"""A device asked for a plugin's randomizer and encoder, under owner policies that do and do not name them.

Run by tests/test_plugins.py as ``python -m tests.plugin_device FOLDER`` in a process whose path holds
the example plugin (simulations/examples/plugin), so that its entry points are what the node discovers; prints
one JSON object: per policy, the setup's and the training request's refusal and the releases charged.
The node is a device (an in-process LocalGrid with ``engine=False``), as in tests/test_adversarial_server.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from flwr.app import Message

from ldpfed.fed import protocol
from ldpfed.clients.app import FLOWER, app as client_app, owner_ledgers
from ldpfed.fed.device.policy import DevicePolicy, default_mechanisms
from ldpfed.fed.device.state import init_state
from ldpfed.fed.randomizers import RANDOMIZERS
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.simulations.local_grid import LocalGrid
from tests.conftest import write_review_folder

NODE = 1000
TRAIN = 24
RANDOMIZER = "sphere-gaussian"
ENCODER = "hashed-words:32"
POLICIES = {
    "encoder not listed": {"mechanisms": ["gaussian", RANDOMIZER]},
    "randomizer not named": {"encoders": [ENCODER]},
    "both named": {"encoders": [ENCODER], "mechanisms": ["gaussian", RANDOMIZER]},
}
"""What each owner's policy adds to a budget of epsilon 3 per record with public labels."""


def answers(folder: Path) -> dict[str, object]:
    """Each policy's setup refusal, training refusal and releases charged, and what the class claims."""
    (folder / "data").mkdir()
    data = write_review_folder(folder / "data", {"train": TRAIN, "dev": 8}, "record ", seed=1)
    (folder / "bundle").mkdir()
    (folder / "bundle" / "encoder.txt").write_text(ENCODER)
    bundle = pack(folder / "bundle")
    randomizer = RANDOMIZERS[RANDOMIZER].calibrated(3.0, 1e-5, 1, {"clip": 1.0}).params()
    run = RunSpec.from_mapping(dict(data="generated:400", public="none", dim=0, clip=1.0, users=1, nodes=1, rounds=1,
                                    epsilon=3.0, labels="public", encoder=ENCODER, mechanism=RANDOMIZER)).to_mapping()
    out: dict[str, object] = {
        "claims device default": RANDOMIZERS[RANDOMIZER].device_default(),
        "default mechanisms": list(default_mechanisms()),
    }
    for name, extra in POLICIES.items():
        case = folder / name.replace(" ", "-")
        init_state(case / "state")
        policy = DevicePolicy.from_mapping({"epsilon_sentence": 3.0, "epsilon_user": "inf", "labels": "public", **extra})
        (case / "policy.toml").write_text(policy.to_toml())
        node = {"data": str(data), "state-dir": str(case / "state"), "policy": str(case / "policy.toml")}
        grid = LocalGrid(client_app, 1, run, engine=False, node_configs=[node])
        setup = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle)).content)
        train, releases = None, 0
        if setup is None:
            train = protocol.read_refusal(_send(grid, protocol.TRAIN, protocol.release_request([0], randomizer, 0, "all")).content)
            releases = owner_ledgers(grid.node_ctx[NODE])[0].releases()
        out[name] = {"setup": setup, "train": train, "releases": releases}
    return out


def _send(grid: LocalGrid, message_type: str, content: protocol.Content) -> Message:
    (reply,) = grid.send_and_receive([Message(FLOWER(content), dst_node_id=NODE, message_type=message_type)])
    if reply.has_error():
        raise RuntimeError(reply.error.reason)
    return reply


if __name__ == "__main__":
    print(json.dumps(answers(Path(sys.argv[1]))))
