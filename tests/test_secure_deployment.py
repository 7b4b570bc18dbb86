"""The documented deployment on loopback: TLS with the SuperLink's own CA, SuperNode
authentication, and nodes that run only app bundles their owners signed.

One cluster (SuperLink, two authorised devices, one device whose key was never registered,
one with no key) made with `ldpfed superlink init` / `ldpfed device init`; four runs: the
approved app (served), the same app with a ClientApp module of its own added carrying the
approved signatures, the approved app unsigned, and the approved app signed wrongly (all
refused by both nodes)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import device_node_configs
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.simulations.commands.device import DeviceFiles, build_fab, init_device, sign_fab
from ldpfed.simulations.commands.superlink import SuperLinkFiles, publish_app
from ldpfed.simulations.flower_runner import APP_DIR, Secure, cluster, run_status, start_run

SMALL = dict(data="generated:240", public="generated:120", users=2, nodes=2, rounds=1, epsilon=8.0, users_per_round=0)
REFUSED = "FAB verification failed"


def ldpfed(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ldpfed.simulations.cli", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def approved_and_modified_fab() -> tuple[bytes, bytes]:
    """The app's FAB (pyproject.toml alone: nodes import ldpfed's code from the installed package), and the FAB
    whose ClientApp is a module it adds (what a server could slip in: the app's folder goes first on sys.path)."""
    from flwr.cli.build import build_fab_from_files

    approved = build_fab(APP_DIR)
    with zipfile.ZipFile(io.BytesIO(approved)) as fab:
        files = {name: fab.read(name) for name in fab.namelist() if not name.startswith(".info/")}
    assert set(files) == {"pyproject.toml"}
    pyproject = files["pyproject.toml"]
    for old, new in [
        (b'fab-include = [\n    "pyproject.toml",\n]', b'fab-include = [\n    "pyproject.toml",\n    "exfiltrate.py",\n]'),
        (b'clientapp = "ldpfed.clients.app:app"', b'clientapp = "exfiltrate:app"'),
    ]:
        assert old in pyproject, old
        pyproject = pyproject.replace(old, new)
    files.update({"pyproject.toml": pyproject, "exfiltrate.py": b"from ldpfed.clients.app import app\nEXFILTRATE = True\n"})
    modified = build_fab_from_files(files)[0]
    assert "exfiltrate.py" in zipfile.ZipFile(io.BytesIO(modified)).namelist()
    return approved, modified


def test_secure_deployment_serves_only_the_approved_app_to_authenticated_nodes(tmp_path: Path) -> None:
    names = ["device0", "device1", "unregistered", "keyless"]
    printed = ldpfed("device", "init", str(tmp_path / names[0]), "--data", "generated:240")
    assert "--trusted-entities" in printed and "--root-certificates" in printed and "--auth-supernode-private-key" in printed
    devices = [DeviceFiles(tmp_path / names[0])] + [init_device(tmp_path / name) for name in names[1:]]
    devices[3].node_key.unlink()
    printed = ldpfed(
        "superlink", "init", str(tmp_path / "superlink"), "--host", "superlink.example",
        "--node-key", str(devices[0].node_public_key), "--node-key", str(devices[1].node_public_key),
    )
    assert "--enable-supernode-auth" in printed and "--ssl-certfile" in printed and "flwr supernode register" in printed
    link = SuperLinkFiles(tmp_path / "superlink")
    assert len(link.node_keys()) == 2

    nodes = device_node_configs(tmp_path, [device.state for device in devices])  # the run must be able to spend

    approved, modified = approved_and_modified_fab()
    (tmp_path / "app.fab").write_bytes(approved)
    ldpfed("device", "approve", str(devices[0].root), "--fab", str(tmp_path / "app.fab"), "--out", str(tmp_path / "sig.json"))
    signatures = [json.loads((tmp_path / "sig.json").read_text()), sign_fab(approved, devices[1].signing_key)]
    stranger = init_device(tmp_path / "stranger")
    tampered = {**signatures[0], "signed_at": int(signatures[0]["signed_at"]) + 1}
    releases = {
        "approved": (approved, signatures),
        "modified": (modified, signatures),
        "unsigned": (approved, []),
        "wrongly-signed": (approved, [sign_fab(approved, stranger.signing_key), tampered]),
    }

    results = {}
    with cluster(tmp_path / "flower", simulation=False, node_configs=nodes, secure=Secure(link, devices)) as running:
        for i, (name, (fab, sigs)) in enumerate(releases.items()):
            spec = publish_app(link, fab, sigs)
            out = tmp_path / name
            config = RunSpec.from_mapping({**SMALL, "clip": 3.0 - i / 10, "out": str(out), "nonprivate_baseline": False})
            log = tmp_path / f"flwr-{name}.log"
            start_run(running, config.to_mapping(), None, log, app=spec).wait(timeout=600)
            results[name] = (run_status(running, log), out, log.read_text(errors="replace"))
            refusals = [(running.logs / f"supernode{n}.log").read_text(errors="replace").count(REFUSED) for n in range(2)]
            assert refusals == [0, 0] if name == "approved" else refusals[0] == refusals[1] == i, (name, refusals)
        logs = {name: (running.logs / f"supernode{n}.log").read_text(errors="replace") for n, name in enumerate(names)}
        superlink_log = (running.logs / "superlink.log").read_text(errors="replace")

    status, out, text = results["approved"]
    assert status == "finished:completed", text[-3000:]
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert first["reports_received"] == 240  # both authenticated devices (one user, 120 records each) served the approved app
    for name in ("modified", "unsigned", "wrongly-signed"):  # both nodes refused before running anything
        status, out, text = results[name]
        assert status != "finished:completed" and text.count("The FAB could not be verified") >= 2, (name, text[-2000:])
        assert not (out / "metrics.jsonl").exists() or all(
            json.loads(line)["reports_received"] == 0 for line in (out / "metrics.jsonl").read_text().splitlines()
        ), name
    for name in ("unregistered", "keyless"):
        assert "Receiving:" not in logs[name], logs[name][-2000:]
    assert "Failed to activate SuperNode" in logs["unregistered"]  # its key was never registered
    assert "No SuperNode found with the given public key" in superlink_log
    assert "All SuperNodes must be registered via the CLI" in logs["keyless"]
