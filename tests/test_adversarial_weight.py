"""The weight of a message on a real SuperNode (issue 24, finding 10).

Flower starts a new ``flwr-clientapp`` process for every message. Only setup may load the data
and run the encoder (torch, transformers): it encodes the device's records once into the
device's record store (fed.device.records), and every other message reads them from there in a
process that imports neither torch nor transformers, without rebuilding anything. A message
whose records are not stored is refused as not set up.
"""

from __future__ import annotations

import gc
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ldpfed.clients.app as client_module
from ldpfed.fed import protocol
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.device.records import RECORDS_FOLDER
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.configuration.plan import make_plan
from ldpfed.fed.data.population import Population
from ldpfed.fed.runtime.requests import Refusal
from tests.test_adversarial_server import DEV, NODE, SIGMA_AT_3, TRAIN, _device, _gaussian, _policy, _send, _train, bundle, data  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers")
RUN = {"labels": "public"}


def _fresh(code: str, stdin: str = "") -> object:
    """Run ``code`` in a new interpreter on this checkout; what it prints last, as JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    done = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_clientapp_imports_neither_torch_nor_transformers() -> None:
    loaded = _fresh(f"import json, sys, clients.app; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert loaded == [], f"importing clients.app imports {loaded}"


def test_importing_the_clientapp_takes_what_it_loaded_out_of_the_collectors_walks() -> None:
    # A full collection triggered by a message's handler walked Flower's runtime and this app again (gc.freeze).
    assert not any(obj is client_module.NodeApp or obj is client_module.app for obj in gc.get_objects())


def test_importing_the_clientapp_imports_neither_dp_accounting_nor_scipy_stats_or_optimize() -> None:
    # Only amplified plans, calibrations and PLD compositions need them; every message's fresh process paid for them.
    lazy = ("dp_accounting", "scipy.stats", "scipy.optimize")
    loaded = _fresh(f"import json, sys, clients.app; print(json.dumps([m for m in {lazy!r} if m in sys.modules]))")
    assert loaded == [], f"importing clients.app imports {loaded}"


# A device's later messages, each as a fresh flwr-clientapp process serves them: the node's context
# (run config, node config, node state) and nothing else; rebuilding the records would raise.
SERVE = """
import json, sys
import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from ldpfed.fed import protocol
from ldpfed.clients.app import FLOWER, app
from ldpfed.fed.runtime.assets import Assets
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.data.population import Population

def rebuilt(*args, **kwargs):
    raise AssertionError("a message rebuilt the records")

Population.build = rebuilt
Assets.features = rebuilt
args = json.loads(sys.stdin.read())
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, args["run_id"], args["node"]
context = Context(run_id=args["run_id"], node_id=args["node"], node_config=args["node_config"],
                  state=RecordDict({"node": ConfigRecord(args["state"])}), run_config=args["run_config"])
models = {f"m{i}": LinearModel(np.random.default_rng(i).normal(size=(args["dim"], 2)), np.zeros(2)) for i in range(2)}
requests = [
    (protocol.TRAIN, FLOWER(protocol.release_request([0], args["train"], 0, "all"))),
    (protocol.EVALUATE, FLOWER(protocol.evaluate_request(models))),
    (protocol.RELEASE, FLOWER(protocol.release_request([0], args["query"], 0, args["upsampling"]))),
    (protocol.SCORE, RecordDict()),
    (protocol.LEDGER, RecordDict()),
]
served = {}
for message_type, content in requests:
    message = Message(content, dst_node_id=args["node"], message_type=message_type)
    message.metadata.__dict__["_message_id"] = message_type
    reply = app(message, context)
    assert not reply.has_error(), reply.error.reason
    refused = protocol.read_refusal(reply.content)
    if refused is not None:
        served[message_type] = list(refused)
    elif message_type == protocol.TRAIN:
        served[message_type] = len(protocol.read_release_reply(reply.content).reports)
    elif message_type == protocol.RELEASE:
        slots = protocol.read_release_reply(reply.content)
        served[message_type] = len(slots.reports)
        answer = FLOWER(protocol.answer_request(slots.users, slots.slots, np.zeros((len(slots.slots), 2))))
        message = Message(answer, dst_node_id=args["node"], message_type=protocol.ANSWER)
        message.metadata.__dict__["_message_id"] = protocol.ANSWER
        reply = app(message, context)
        served[protocol.ANSWER] = protocol.read_refusal(reply.content) or "served"
    elif message_type == protocol.EVALUATE:
        served[message_type] = protocol.read_outcomes_reply(reply.content).total
    else:
        served[message_type] = "served"
print(json.dumps({"served": served, "loaded": [m for m in args["heavy"] if m in sys.modules]}))
"""


def _serve_fresh(grid: object, heavy: tuple[str, ...] = HEAVY) -> dict:
    """The device's messages after setup, served in a new interpreter; what each gave and what it imported."""
    context = grid.node_ctx[NODE]
    config = RunSpec.from_mapping(context.run_config)
    plan = make_plan(config, 2, DEV)
    args = {
        "run_id": context.run_id, "node": NODE, "node_config": dict(context.node_config), "run_config": dict(context.run_config),
        "state": dict(context.state["node"]), "train": _gaussian(SIGMA_AT_3), "query": plan.query.params(),
        "upsampling": plan.upsampling.spec, "dim": 384, "heavy": list(heavy),
    }
    return _fresh(SERVE, json.dumps(args))


def test_messages_after_setup_import_neither_torch_nor_transformers_and_rebuild_nothing(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", evaluation="rr:1.0")
    grid = _device(data, bundle, tmp_path / "state", policy, **RUN)  # setup encodes with MiniLM, in this process
    result = _serve_fresh(grid)
    served = result["served"]
    assert served[protocol.TRAIN] == TRAIN, served  # every record released, from the stored records
    assert served[protocol.EVALUATE] == {"m0": DEV, "m1": DEV}, served
    assert all(not isinstance(value, list) for value in served.values()), served  # nothing refused
    assert result["loaded"] == [], f"a message imported {result['loaded']}"


def test_a_message_whose_records_are_not_stored_is_refused_not_rebuilt(
    data: Path, bundle: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")
    state = tmp_path / "state"
    grid = _device(data, bundle, state, policy, **RUN)
    (stored,) = (state / RECORDS_FOLDER).iterdir()
    stored.unlink()  # the owner cleared the store (or the message names a bundle never set up)
    monkeypatch.setattr(client_module, "_RECORDS", {})  # a new process
    monkeypatch.setattr(Population, "build", lambda *a, **k: pytest.fail("a message rebuilt the records"))
    refused = protocol.read_refusal(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert refused is not None and refused[0] == Refusal.NOT_SET_UP and "setup" in refused[1], refused
    monkeypatch.undo()
    assert protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle)).content) is None
    released = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert len(released.reports) == TRAIN  # a new setup encodes them again; nothing was spent before


def test_a_setup_with_a_new_bundle_encodes_anew(data: Path, bundle: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    state = tmp_path / "state"
    grid = _device(data, bundle, state, policy, **RUN)
    folder = tmp_path / "projected"
    folder.mkdir()
    (folder / "encoder.txt").write_text("minilm")
    PCAProjection.fit(np.random.default_rng(0).normal(size=(64, 384)), 8).save(folder / "projection.npz")
    projected = pack(folder)
    reply = _send(grid, protocol.SETUP, protocol.setup_request(projected))
    assert protocol.read_refusal(reply.content) is None and protocol.read_setup_reply(reply.content).dim == 8
    assert len(list((state / RECORDS_FOLDER).iterdir())) == 2  # one stored set per bundle
    monkeypatch.setattr(client_module, "_RECORDS", {})  # a new process reads the new bundle's records
    monkeypatch.setattr(Population, "build", lambda *a, **k: pytest.fail("a message rebuilt the records"))
    released = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert released.reports.shape == (TRAIN, 8)


def test_the_record_store_is_owner_only_whatever_the_umask(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")
    previous = os.umask(0)
    try:
        _device(data, bundle, tmp_path / "state", policy, **RUN)
    finally:
        os.umask(previous)
    folder = tmp_path / "state" / RECORDS_FOLDER
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()] == [0o600]


def test_device_init_prints_the_flower_settings_a_device_runs_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shlex

    from ldpfed.simulations.cli import main

    assert main(["device", "init", str(tmp_path / "device"), "--data", "generated:10"]) == 0
    (command,) = [line for line in capsys.readouterr().out.splitlines() if "flower-supernode" in line]
    words = shlex.split(command)
    settings = dict(word.split("=", 1) for word in words[: words.index("flower-supernode")])
    assert 0.01 <= float(settings["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"]) <= 0.1  # Flower's default is 1 s
    # Flower's telemetry off: a privacy tool does not phone home by default (and telemetry holds each process up to 4 s at exit)
    assert settings["FLWR_TELEMETRY_ENABLED"] == "0"


# One message in a new interpreter, as flwr-clientapp serves it: the node's context and the message, nothing else.
ONE = """
import json, sys
import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from ldpfed.fed import protocol
from ldpfed.clients.app import FLOWER, app

args = json.loads(sys.stdin.read())
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, args["run_id"], args["node"]
state = RecordDict({"node": ConfigRecord(args["state"])}) if args["state"] else RecordDict()
context = Context(run_id=args["run_id"], node_id=args["node"], node_config=args["node_config"], state=state,
                  run_config=args["run_config"])
if args["type"] == protocol.SETUP:
    content = FLOWER(protocol.setup_request(np.asarray(args["bundle"], dtype=np.uint8)))
else:
    content = FLOWER(protocol.release_request([0], args["train"], 1, "all"))
message = Message(content, dst_node_id=args["node"], message_type=args["type"])
message.metadata.__dict__["_message_id"] = args["type"]
reply = app(message, context)
assert not reply.has_error(), reply.error.reason
refused = protocol.read_refusal(reply.content)
served = list(refused) if refused else len(protocol.read_release_reply(reply.content).reports) if args["type"] == protocol.TRAIN else "served"
print(json.dumps({"served": served, "loaded": [m for m in args["heavy"] if m in sys.modules]}))
"""


def test_after_device_encode_setup_imports_neither_torch_nor_transformers(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    # The owner encodes the data once before any run (`ldpfed device encode`); setup then reads the encodings.
    from ldpfed.simulations.commands.device import encode_data, init_device

    files = init_device(tmp_path / "device")
    _policy(files.policy, epsilon_sentence=3.0, labels="public")
    assert encode_data(files, str(data)) == TRAIN + DEV
    run_config = RunSpec.from_mapping(dict(data="generated:400", public="none", dim=0, clip=1.0, users=1, nodes=1, rounds=1, epsilon=3.0, **RUN))
    args = {
        "run_id": 7, "node": NODE, "node_config": {"data": str(data), "state-dir": str(files.state), "policy": str(files.policy)},
        "run_config": run_config.to_mapping(), "state": None, "type": protocol.SETUP, "bundle": bundle.tolist(), "heavy": list(HEAVY),
    }
    result = _fresh(ONE, json.dumps(args))
    assert result["served"] == "served", result
    assert result["loaded"] == [], f"setup imported {result['loaded']} although the data was encoded beforehand"


def test_a_later_message_reads_its_accounting_figures_from_the_state_folder(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    # Calibrating the plan and composing the ledger's figures loaded SciPy in every message's process.
    from ldpfed.fed.privacy.figure_cache import FIGURES_FILE

    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")
    grid = _device(data, bundle, tmp_path / "state", policy, **RUN)
    context = grid.node_ctx[NODE]
    args = {
        "run_id": context.run_id, "node": NODE, "node_config": dict(context.node_config), "run_config": dict(context.run_config),
        "state": dict(context.state["node"]), "type": protocol.TRAIN, "train": _gaussian(SIGMA_AT_3), "heavy": ["scipy", "dp_accounting"],
    }
    first = _fresh(ONE, json.dumps(args))
    assert first["served"] == 1 and "scipy" in first["loaded"], first  # computed here, and stored
    assert (tmp_path / "state" / FIGURES_FILE).is_file()
    later = _fresh(ONE, json.dumps(args))
    assert later["served"] == 1, later
    assert later["loaded"] == [], f"a later message imported {later['loaded']}: its figures were computed again"
