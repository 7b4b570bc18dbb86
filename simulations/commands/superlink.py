"""``ldpfed superlink``: the SuperLink side of a secure deployment.

``init`` makes a CA, a server certificate (localhost, 127.0.0.1 and the given host) and the
list of authorised node keys; ``publish`` puts a FAB and the device owners' signatures of it
in an app registry; ``apps`` serves that registry.

Why a registry: Flower 1.42 (as 1.41) attaches signatures to a FAB only when the SuperLink fetches it
as a Hub app (``flwr run @publisher/name==x.y.z``: ``control_handlers._get_remote_fab`` asks
``$FLWR_SUPERGRID_API_URL/hub/fetch-fab`` for a download URL and the signatures). A FAB
sent by ``flwr run APP_DIR`` carries none, and a SuperNode with ``--trusted-entities``
refuses it. ``ldpfed superlink apps`` answers that endpoint from a local folder, so the
SuperLink runs with ``FLWR_SUPERGRID_API_URL=http://127.0.0.1:PORT`` and needs no network.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import ipaddress
import json
import re
import shlex
import shutil
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ldpfed.simulations.commands.device import build_fab

HELP = "Set up a SuperLink for deployment (CA, TLS certificate, authorised node keys) and serve signed app bundles."

REGISTRY_PORT = 9099


@dataclass(frozen=True)
class SuperLinkFiles:
    """What ``ldpfed superlink init`` made in a SuperLink folder."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    @property
    def nodes(self) -> Path:
        """Authorised node public keys, one ``<n>.pub`` each, registered with `flwr supernode register`."""
        return self.root / "nodes"

    @property
    def apps(self) -> Path:
        """The app registry: ``<publisher>/<name>/<version>/app.fab`` and ``signatures.json``."""
        return self.root / "apps"

    def node_keys(self) -> list[Path]:
        return sorted(self.nodes.glob("*.pub"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``init DIR``, ``publish DIR`` and ``apps DIR``."""
    actions = parser.add_subparsers(dest="action", required=True)
    init = actions.add_parser("init", help="create a CA, a server certificate and the authorised node keys")
    init.add_argument("dir", type=Path, help="the SuperLink folder (an existing CA and keys are kept)")
    init.add_argument("--host", action="append", default=[], help="a host name or IP the nodes connect to (repeatable)")
    init.add_argument("--node-key", type=Path, action="append", default=[], help="a device's node-key.pub (repeatable)")
    init.add_argument("--port", type=int, default=8000, help="SuperLink port (default 8000)")
    publish = actions.add_parser("publish", help="put a FAB and its owners' signatures in the app registry")
    publish.add_argument("dir", type=Path, help="the SuperLink folder")
    source = publish.add_mutually_exclusive_group(required=True)
    source.add_argument("--app", type=Path, help="build the FAB from this app folder")
    source.add_argument("--fab", type=Path, help="a FAB file")
    publish.add_argument("--signature", type=Path, action="append", default=[], help="a signature from `ldpfed device approve`")
    apps = actions.add_parser("apps", help="serve the app registry to the SuperLink (Flower Hub's fetch-fab endpoint)")
    apps.add_argument("dir", type=Path, help="the SuperLink folder")
    apps.add_argument("--port", type=int, default=REGISTRY_PORT, help=f"port on 127.0.0.1 (default {REGISTRY_PORT})")


def run(args: argparse.Namespace) -> int:
    """Dispatch ``init``, ``publish`` or ``apps``."""
    if args.action == "init":
        files = init_superlink(args.dir, hosts=args.host, node_keys=args.node_key)
        print(f"SuperLink folder {files.root}: ca.crt (give it to every device), ca.key, server.crt, server.key, "
              f"{len(files.node_keys())} authorised node key(s) in nodes/.")
        print("Serve the app registry and start the SuperLink:")
        print(shlex.join(["ldpfed", "superlink", "apps", str(files.root), "--port", str(REGISTRY_PORT)]), "&")
        command = superlink_command(files, args.port, files.root / "superlink.db")
        print(f"FLWR_SUPERGRID_API_URL=http://127.0.0.1:{REGISTRY_PORT}", shlex.join(command))
        host = (args.host or ["127.0.0.1"])[0]
        print(f"Connection in $FLWR_HOME/config.toml:\n{connection_toml('mine', f'{host}:{args.port}', files.ca_cert)}")
        print("Register the nodes (once; the SuperLink's database keeps them):")
        for key in files.node_keys():
            print(shlex.join(["flwr", "supernode", "register", str(key), "mine"]))
        return 0
    files = SuperLinkFiles(args.dir.resolve())
    if args.action == "publish":
        fab = build_fab(args.app) if args.app else args.fab.read_bytes()
        spec = publish_app(files, fab, [json.loads(path.read_text()) for path in args.signature])
        print(f"Published {spec} (sha256={hashlib.sha256(fab).hexdigest()}); run it with: flwr run {spec} mine --stream")
        return 0
    server = serve_apps(files, port=args.port)
    print(f"Serving {files.apps} on http://127.0.0.1:{args.port} (FLWR_SUPERGRID_API_URL for the SuperLink)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.server_close()
    return 0


def init_superlink(root: Path, hosts: list[str] | tuple[str, ...] = (), node_keys: list[Path] | tuple[Path, ...] = ()) -> SuperLinkFiles:
    """The CA (made once), a server certificate for localhost, 127.0.0.1 and ``hosts`` (issued
    anew), and the authorised node keys (added to those already there)."""
    files = SuperLinkFiles(root.resolve())
    files.nodes.mkdir(parents=True, exist_ok=True)
    files.apps.mkdir(exist_ok=True)
    if not files.ca_key.exists():
        ca_key = ec.generate_private_key(ec.SECP384R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ldpfed SuperLink CA")])
        ca = (
            _builder(name, name, ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        _write_private(files.ca_key, ca_key)
        files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server_key = ec.generate_private_key(ec.SECP384R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "localhost")])
    server = (
        _builder(subject, ca.subject, server_key.public_key())
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(files.server_key, server_key)
    files.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    for path in node_keys:
        key = serialization.load_ssh_public_key(path.read_bytes())
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError(f"{path} is not an EC OpenSSH public key (made by `ldpfed device init`)")
        digest = hashlib.sha256(path.read_bytes().split()[1]).hexdigest()[:16]
        shutil.copyfile(path, files.nodes / f"{digest}.pub")
    return files


def superlink_command(files: SuperLinkFiles, port: int, database: Path | None = None) -> list[str]:
    """The ``flower-superlink`` command line: TLS and SuperNode authentication (node registrations
    persist only with a ``database``)."""
    return ["flower-superlink", "--port", str(port)] + (["--database", str(database)] if database else []) + [
        "--ssl-ca-certfile", str(files.ca_cert), "--ssl-certfile", str(files.server_cert),
        "--ssl-keyfile", str(files.server_key), "--enable-supernode-auth",
    ]


def connection_toml(name: str, address: str, ca_cert: Path) -> str:
    """A `flwr` connection over TLS to the SuperLink."""
    return f'[superlink.{name}]\naddress = "{address}"\nroot-certificates = "{ca_cert}"\n'


def publish_app(files: SuperLinkFiles, fab: bytes, signatures: list[dict]) -> str:
    """Store a FAB and its signatures in the registry (replacing that version); returns ``@publisher/name==version``."""
    from flwr.common.config import get_fab_config, get_metadata_from_config

    fab_id, version = get_metadata_from_config(get_fab_config(fab))
    folder = files.apps / fab_id / version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.fab").write_bytes(fab)
    records = [{k: s[k] for k in ("public_key_id", "signature", "signed_at")} for s in signatures]
    (folder / "signatures.json").write_text(json.dumps(records, indent=1) + "\n")
    return f"@{fab_id}=={version}"


def serve_apps(files: SuperLinkFiles, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """An HTTP server answering ``POST /hub/fetch-fab`` and ``GET /fab/<sha256>`` from the registry folder."""
    return ThreadingHTTPServer((host, port), _registry_handler(files.apps))


def serve_apps_in_background(files: SuperLinkFiles, port: int) -> ThreadingHTTPServer:
    """``serve_apps`` in a daemon thread; stop it with ``shutdown()``."""
    server = serve_apps(files, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _registry_handler(apps: Path) -> type[BaseHTTPRequestHandler]:
    def versions(app_id: str) -> list[Path]:
        folder = apps / app_id.removeprefix("@")
        found = [p for p in folder.glob("*") if re.fullmatch(r"\d+\.\d+\.\d+", p.name) and (p / "app.fab").is_file()]
        return sorted(found, key=lambda p: tuple(int(x) for x in p.name.split(".")))

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") != "/hub/fetch-fab":
                return self._reply(404, b'{"detail": "not found"}')
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            app_id, version = str(request.get("app_id", "")), request.get("app_version")
            if not re.fullmatch(r"@[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", app_id):
                return self._reply(404, b'{"detail": "bad app id"}')
            found = [p for p in versions(app_id) if version in (None, p.name)]
            if not found:
                return self._reply(404, json.dumps({"detail": f"{app_id}=={version} not in the registry"}).encode())
            host, port = self.server.server_address[:2]
            body = {
                "fab_url": f"http://{host}:{port}/fab/{found[-1].relative_to(apps).as_posix()}",
                "verifications": json.loads((found[-1] / "signatures.json").read_text()),
            }
            return self._reply(200, json.dumps(body).encode())

        def do_GET(self) -> None:  # noqa: N802
            path = (apps / self.path.removeprefix("/fab/") / "app.fab").resolve()
            if not self.path.startswith("/fab/") or apps.resolve() not in path.parents or not path.is_file():
                return self._reply(404, b"not found", "text/plain")
            return self._reply(200, path.read_bytes(), "application/octet-stream")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (quiet)
            return None

    return Handler


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
    )


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
