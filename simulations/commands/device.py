"""``ldpfed device``: set up a device (a Flower SuperNode) and approve the app bundles it runs.

A device owner needs four things besides data: a policy file, a state folder, a node key
pair that authenticates the node to the SuperLink (ECDSA P-384, OpenSSH format, as
``flower-supernode --auth-supernode-private-key`` loads it), and the public keys of the app
signers the node trusts (``--trusted-entities``: a YAML map from key id to an Ed25519
OpenSSH public key). Flower's SuperNode runs a FAB only if one of its signatures, over
``signed_at (8 bytes big-endian) + sha256(FAB)``, verifies under a trusted key.

The SuperLink side (CA, server certificate, authorised node keys, the app registry that
attaches signatures to a FAB) is ``ldpfed superlink`` (simulations/commands/superlink.py).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from ldpfed.fed.device.state import write_owner_only

HELP = (
    "Set up a device for deployment (policy, node key, trusted app signers, state folder), encode its data once "
    "before any run, or approve an app bundle."
)

NODE_KEY = "node-key"  # ECDSA P-384 private key (OpenSSH); node-key.pub is what the SuperLink registers
SIGNING_KEY = "app-signing-key"  # Ed25519 private key (OpenSSH) with which the owner approves FABs
TRUSTED = "trusted-entities.yaml"
POLICY = "policy.toml"
STATE = "state"
CA_CERT = "ca.crt"  # the SuperLink's CA certificate, copied here by the owner
SUPERNODE_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1", "HF_HUB_OFFLINE": "1"}
"""Settings a device runs ``flower-supernode`` with (docs/device.md, "What it costs"): Flower's telemetry
is off (a privacy tool does not phone home by default, and telemetry holds each process up to 4 s at
exit); its SuperExec starts a message's ClientApp process within 0.1 s of its arrival, not Flower's
default 1 s; and the Hugging Face Hub stays offline for every process (the app also sets it on a
device: fed.device.site)."""


@dataclass(frozen=True)
class DeviceFiles:
    """What ``ldpfed device init`` made in a device folder."""

    root: Path

    @property
    def policy(self) -> Path:
        return self.root / POLICY

    @property
    def state(self) -> Path:
        return self.root / STATE

    @property
    def node_key(self) -> Path:
        return self.root / NODE_KEY

    @property
    def node_public_key(self) -> Path:
        return self.root / f"{NODE_KEY}.pub"

    @property
    def signing_key(self) -> Path:
        return self.root / SIGNING_KEY

    @property
    def signing_public_key(self) -> Path:
        return self.root / f"{SIGNING_KEY}.pub"

    @property
    def trusted_entities(self) -> Path:
        return self.root / TRUSTED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``init DIR`` and ``approve DIR``."""
    actions = parser.add_subparsers(dest="action", required=True)
    init = actions.add_parser("init", help="create a device folder: policy, keys, trusted signers, state folder")
    init.add_argument("dir", type=Path, help="the device folder (created; existing keys are never overwritten)")
    init.add_argument("--superlink", default="SUPERLINK_HOST:8000", help="SuperLink Fleet API address host:port")
    init.add_argument("--root-cert", type=Path, help=f"the SuperLink's CA certificate (default: DIR/{CA_CERT})")
    init.add_argument("--data", default="/srv/my-data", help="the device's data: a folder of train/dev TSV, or generated:N")
    init.add_argument("--partition-id", type=int, default=0, help="the id of the one user this device hosts, holding all of --data (default 0)")
    init.add_argument("--num-partitions", type=int, default=1, help="number of devices in the federation; --partition-id lies below it (default 1)")
    init.add_argument(
        "--trust", type=Path, action="append", default=[],
        help="an Ed25519 OpenSSH public key of another app signer to trust (repeatable); trusted-entities.yaml is "
        "rewritten with the owner's own key and these",
    )
    init.add_argument(
        "--rebind", action="store_true",
        help="this copied, restored or moved state folder is the device's only one from now on (its node refuses until "
        "then: a copy that serves spends every budget again; a restored backup forgets what was spent since)",
    )
    encode = actions.add_parser(
        "encode", help="encode the device's data once, before any run, into the node's encoding cache (setup then runs no encoder)"
    )
    encode.add_argument("dir", type=Path, help="the device folder made by `ldpfed device init`")
    encode.add_argument("--data", required=True, help="the device's data, as the node config names it")
    encode.add_argument("--encoder", default="minilm", help="the sentence encoder the device's policy allows and the runs use")
    encode.add_argument(
        "--cache-dir", type=Path, default=None, help=f"the node config's cache-dir, if it names one (default: DIR/{STATE}/cache, the node's own)"
    )
    approve = actions.add_parser("approve", help="sign an app bundle (FAB) with the device's app-signing key")
    approve.add_argument("dir", type=Path, help="the device folder made by `ldpfed device init`")
    source = approve.add_mutually_exclusive_group(required=True)
    source.add_argument("--app", type=Path, help="build the FAB from this reviewed app folder (builds are reproducible)")
    source.add_argument("--fab", type=Path, help="a FAB file to sign")
    approve.add_argument("--out", type=Path, help="signature file (default: DIR/approved-<sha256 prefix>.json)")


def run(args: argparse.Namespace) -> int:
    """Dispatch ``init`` or ``approve``."""
    if args.action == "init":
        files = init_device(args.dir, trust=args.trust, rebind=args.rebind)
        root_cert = (args.root_cert or files.root / CA_CERT).resolve()
        node_config = node_config_string(files, args.data, args.partition_id, args.num_partitions)
        print(f"Device folder {files.root}: {POLICY} (strict defaults; edit it), {STATE}/ (record-id key and the ledger "
              f"bound to it), {NODE_KEY}(.pub), {SIGNING_KEY}(.pub), {TRUSTED}; all readable by this user only.")
        print(f"Give the SuperLink operator {files.node_public_key}; copy its CA certificate to {root_cert}.")
        print("Approve an app after reviewing it: ldpfed device approve", shlex.quote(str(files.root)), "--app APP_DIR")
        print("Encode the data once, before the first run (setup then runs no encoder):", shlex.join(
            ["ldpfed", "device", "encode", str(files.root), "--data", args.data]))
        print("Start the node:")
        settings = [f"{name}={value}" for name, value in SUPERNODE_ENV.items()]
        print(shlex.join([*settings, *supernode_command(files, args.superlink, root_cert, node_config)]))
        return 0
    if args.action == "encode":
        started = time.perf_counter()
        records = encode_data(DeviceFiles(args.dir.resolve()), args.data, args.encoder, args.cache_dir)
        print(f"Encoded {records} records of {args.data} with {args.encoder} in {time.perf_counter() - started:.1f} s "
              "into the node's encoding cache; a setup with this encoder reads them from there.")
        return 0
    fab = build_fab(args.app) if args.app else args.fab.read_bytes()
    signature = sign_fab(fab, DeviceFiles(args.dir.resolve()).signing_key)
    out = args.out or args.dir / f"approved-{signature['fab_sha256'][:12]}.json"
    write_owner_only(out, (json.dumps(signature, indent=1) + "\n").encode())
    print(f"Approved FAB sha256={signature['fab_sha256']}; signature in {out} (give it to the SuperLink operator).")
    return 0


def init_device(root: Path, trust: list[Path] | tuple[Path, ...] = (), rebind: bool = False) -> DeviceFiles:
    """Create a device folder; keys, a policy and a state folder already there are kept, never overwritten.

    Everything in it is the owner's only (folders 700, files 600), whatever the umask. The state
    folder (record-id key and the ledger bound to it) is made by :func:`fed.device.state.init_state`:
    after the owner deletes it, this is how the node starts over. ``rebind``: the state folder was copied, restored or
    moved to another file system, and the owner makes it the device's only one (fed.device.state.init_state).
    """
    from ldpfed.fed.device.state import init_state, owner_only_dir, restrict
    from ldpfed.fed.device.policy import DevicePolicy

    files = DeviceFiles(root.resolve())
    owner_only_dir(files.root)
    init_state(files.state, rebind=rebind)
    if not files.policy.exists():
        write_owner_only(files.policy, DevicePolicy().to_toml().encode())
    if not files.node_key.exists():
        write_ssh_key_pair(ec.generate_private_key(ec.SECP384R1()), files.node_key)
    if not files.signing_key.exists():
        write_ssh_key_pair(ed25519.Ed25519PrivateKey.generate(), files.signing_key)
    trusted = [files.signing_public_key.read_text().strip()]
    for path in trust:
        key = path.read_text().strip()
        if not isinstance(serialization.load_ssh_public_key(key.encode()), ed25519.Ed25519PublicKey):
            raise ValueError(f"{path} is not an Ed25519 OpenSSH public key (Flower verifies app signatures with Ed25519)")
        trusted.append(key)
    write_owner_only(files.trusted_entities, "".join(f"{key_id(key)}: {json.dumps(key)}\n" for key in trusted).encode())
    restrict(files.root)  # what an earlier version or another umask left readable
    return files


def encode_data(files: DeviceFiles, data: str, spec: str = "minilm", cache_dir: Path | None = None) -> int:
    """Encode the device's data (train and dev splits) with ``spec`` into the node's encoding cache; the number of records.

    What a setup would do on receiving a bundle with this encoder, done by the owner before any
    run (fed.encoders.cache keys each encoding by the encoder's files and the record's text, so a
    setup finds them, whatever the run's partition or --train-limit). ValueError, encoding nothing,
    for an encoder the device's policy refuses or whose weights a server ships (bilstm).
    """
    from ldpfed.fed.device.state import DEVICE_UMASK, owner_only_dir
    from ldpfed.fed.encoders.cache import encode_cached
    from ldpfed.fed.encoders.resolver import load_encoder
    from ldpfed.fed.data.loaders import load_dataset
    from ldpfed.fed.device.policy import DevicePolicy
    from ldpfed.fed.device.site import hub_offline

    policy = DevicePolicy.load(files.policy) if files.policy.exists() else DevicePolicy()
    refused = policy.encoder_refusal(spec)
    if refused:
        raise ValueError(refused)
    if spec == "bilstm":
        raise ValueError("bilstm's weights come with the server's bundle: its setup encodes them, not the owner beforehand")
    os.umask(DEVICE_UMASK)  # as the node's own processes: the cache is the owner's only
    hub_offline()
    cache = owner_only_dir(cache_dir or files.state / "cache")
    encoder = load_encoder(spec, policy)  # as the node resolves it: the owner's policy, nothing from the working directory
    splits = [load_dataset(data, split) for split in ("train", "dev")]
    for dataset in splits:
        encode_cached(encoder, dataset, cache)
    return sum(len(dataset) for dataset in splits)


def write_ssh_key_pair(key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey, path: Path) -> None:
    """``path`` (OpenSSH private key) and ``path.pub`` (OpenSSH public key), both mode 600."""
    path.touch(mode=0o600, exist_ok=False)
    write_owner_only(
        path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    write_owner_only(path.with_name(path.name + ".pub"), public + b"\n")


def key_id(public_key: str) -> str:
    """The trusted-entity id of an OpenSSH public key: ``fpk_`` and a digest of the key."""
    return "fpk_" + hashlib.sha256(public_key.split()[1].encode()).hexdigest()[:32]


def build_fab(app: Path) -> bytes:
    """The FAB that ``flwr run APP`` would submit (reproducible: fixed dates, filtered files)."""
    from flwr.cli.build import build_fab_from_disk

    with tempfile.TemporaryDirectory(prefix="ldpfed-app-") as folder:
        return build_fab_from_disk(staged_app(app, Path(folder)))


def staged_app(app: Path, folder: Path) -> Path:
    """A folder holding only the files of ``app``'s bundle (its ``fab-include`` list), from which `flwr run` builds the
    same bundle; ``app`` itself where that list names anything but plain files.

    `flwr run` lists every file under the app folder before it applies ``fab-include``: in a checkout, whose .venv
    and .git it walks (600,000 stat calls), that cost 4 CPU seconds per run, more than the app's own setup.
    """
    import tomllib

    names = tomllib.loads((app / "pyproject.toml").read_text()).get("tool", {}).get("flwr", {}).get("app", {}).get("fab-include")
    if not names or any(set(name) & set("*?[]!") or not (app / name).is_file() for name in names):
        return app
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes((app / name).read_bytes())
    return folder


def sign_fab(fab: bytes, private_key: Path, signed_at: int | None = None) -> dict[str, str | int]:
    """A signature record as Flower Hub returns it: key id, base64url Ed25519 signature, time."""
    key = serialization.load_ssh_private_key(private_key.read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{private_key} is not an Ed25519 OpenSSH private key")
    digest = hashlib.sha256(fab).digest()
    signed_at = int(time.time()) if signed_at is None else signed_at
    signature = key.sign(signed_at.to_bytes(8, "big") + digest)  # flwr's create_message_to_sign
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return {
        "public_key_id": key_id(public),
        "signature": base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii"),
        "signed_at": signed_at,
        "fab_sha256": digest.hex(),
    }


def node_config_string(files: DeviceFiles, data: str, partition_id: int = 0, num_partitions: int = 1) -> str:
    """``--node-config`` naming the device's policy, state folder and data."""
    for name, value in (("data", data), ("state-dir", str(files.state)), ("policy", str(files.policy))):
        if "'" in value or " " in value:
            raise ValueError(f"node-config {name}={value!r} may not contain quotes or spaces")
    return (
        f"partition-id={partition_id} num-partitions={num_partitions} data='{data}' "
        f"state-dir='{files.state}' policy='{files.policy}'"
    )


def supernode_command(files: DeviceFiles, superlink: str, root_cert: Path, node_config: str) -> list[str]:
    """The ``flower-supernode`` command line: TLS, node authentication, trusted app signers, node config."""
    command = ["flower-supernode", "--superlink", superlink, "--root-certificates", str(root_cert)]
    if files.node_key.exists():
        command += ["--auth-supernode-private-key", str(files.node_key)]
    return command + ["--trusted-entities", str(files.trusted_entities), "--node-config", node_config]
