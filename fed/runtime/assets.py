"""What the server fits on its public data and ships to every user.

The server may pre-train a BiLSTM encoder or fine-tune MiniLM's layers (seed 000, Stage 1;
fed.encoders.tuned) and fit a projection to fewer dimensions on public data; all travel to
users as one content-addressed bundle
(a tar archive in a byte array), so a real device needs nothing but the setup message.
The bundle comes from an untrusted server (design.md section 2b): ``unpack`` refuses
anything but a plain tar of the known files, and checks every file before it writes one.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.configuration.sections import DIM_AUTO, BundleSections, OutputSections, PublicSections, heldout_size
from ldpfed.fed.data.corpus import generate_public_corpus
from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.encoders import resolver
from ldpfed.fed.encoders.base import Encoder, EncoderRefused
from ldpfed.fed.encoders.bilstm import SAVED_FILES, BiLSTMEncoder, train_bilstm
from ldpfed.fed.encoders.cache import encode_cached
from ldpfed.fed.encoders.hf import minilm_path
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.encoders.token_matrix import TokenMatrixEncoder, split_spec
from ldpfed.fed.encoders.tuned import (
    TUNED_FILE, TUNED_LAYERS, TUNED_SPEC, finetune, read_tuned, tuned_bytes, weights_fingerprint,
)
from ldpfed.fed.data.loaders import load_dataset
from ldpfed.fed.data.population import withheld
from ldpfed.fed.configuration.plan import encoder_spec, make_plan
from ldpfed.fed.device.policy import MAX_BUNDLE_BYTES, DevicePolicy
from ldpfed.fed.randomizers import RANDOMIZERS
from ldpfed.fed.randomizers.split_denoise import DENOISER_FILE
from ldpfed.fed.runtime.refusals import Refusal, RequestRefused

if TYPE_CHECKING:
    from ldpfed.fed.learning.denoiser import Denoiser  # imports torch: loaded only where a bundle ships a denoiser

PUBLIC_GENERATED_SIZE = 1000
MAX_UNPACKED_BYTES = 64 * 2**20
"""Largest total size of the files in a bundle (a plain tar holds no more than its own size)."""
MAX_SPEC_CHARS = 200
"""Longest encoder spec (encoder.txt) a node accepts."""
BILSTM_FILES = tuple(f"bilstm/{name}" for name in SAVED_FILES)
BUNDLE_FILES = ("encoder.txt", "projection.npz", *BILSTM_FILES, DENOISER_FILE, TUNED_FILE)
"""The only files a bundle may hold, each at most once."""
DOMAIN_SAMPLE = 4000
"""Records of each side (seeded sample) that :func:`domain_overlap` compares."""
DOMAIN_DIMS = 16
"""Leading principal directions :func:`domain_overlap` compares (the default --dim)."""
DOMAIN_MIN_ROWS = 200
"""Fewest records on each side for :func:`domain_overlap` to be measured: fewer public records give
noisy principal directions (the generated corpus against itself: 0.74 from 1,000 public records,
0.60 from 200, 0.59 from 120)."""
DOMAIN_OVERLAP_MIN = 0.52
"""Below this :func:`domain_overlap`, the public data counts as another domain than the task's.

Measured with MiniLM (public -> task, training splits, 4,000-record samples). Same domain:
generated public -> generated 0.74, mr -> sst2 0.87, sentiment_labelled_sentences -> sst2 0.58
and -> mr 0.58, tweeteval emotion -> sentiment 0.64, qqp -> quora_bimpm 0.96, ag_news
alps_train10k -> test 0.95. Other domains: generated public -> sst2 0.33 and -> snips 0.24,
mr -> snips 0.40, sst2 -> snips 0.37, snips -> sst2 0.45, sms_spam -> sst2 0.41, tweeteval
sentiment -> sst2 0.42, cola -> sst2 0.43, ag_news -> sst2 0.33, banking77 -> snips 0.18.
The limit lies midway between the highest other-domain pair (0.45) and the lowest
same-domain pair (0.58). (The distance between the mean encodings, also measured, put cola
-> sst2 among the same-domain pairs, and a linear domain classifier told even the generated
corpus's two template sets apart at 94%.) Other encoders: the same figure, not calibrated.
"""
LABELS_SHOWN = 8
"""Label names a warning lists before '...'."""


def default_cache_dir(config: OutputSections) -> Path:
    """The run's cache folder: --cache-dir, else $LDPFED_CACHE, else ~/.cache/ldpfed."""
    return Path(config.output.cache_dir or os.environ.get("LDPFED_CACHE") or Path.home() / ".cache" / "ldpfed")


def load_public(config: PublicSections, spec: str | None = None) -> TextDataset | None:
    """The server's public labelled data ('generated[:N]', 'heldout:N', a folder or id), or None for 'none';
    ``spec``: another public spec than --public (e.g. --projection-public).

    It must not be the evaluation task's own training or dev split; 'heldout:N' is N records of the train split that
    no user holds (fed.data.population.withheld; simulation only).
    """
    spec = config.data.public if spec is None else spec
    if spec == "none":
        return None
    if spec == "generated" or spec.startswith("generated:"):
        size = spec.removeprefix("generated").removeprefix(":")
        if size and not size.isdigit():
            raise ValueError(f"bad public spec {spec!r}; expected generated[:num_records]")
        return generate_public_corpus(int(size or PUBLIC_GENERATED_SIZE), seed=config.seed)
    heldout = heldout_size(spec)
    if heldout is not None:
        return withheld(load_dataset(config.data.data, "train"), config.data, config.seed, heldout)
    if Path(spec).resolve() == Path(config.data.data).resolve() or spec == config.data.data:
        raise ValueError("--public must not be the task's own data (its train or dev split)")
    return load_dataset(spec, "train")


def projection_data(config: PublicSections, public: TextDataset | None) -> TextDataset | None:
    """What the projection is fitted on: --projection-public's records, else ``public`` (the run's --public)."""
    return load_public(config, config.data.projection_public) if config.data.projection_public else public


@dataclass(frozen=True)
class PublicCheck:
    """How the server's public data compares with the task: its labels and its domain.

    Attributes
    ----------
    public:
        The --public spec ('none': no public data, nothing compared).
    public_labels, task_labels:
        Label names by id; a side whose names are the ids themselves ("0", "1", ...: a folder without
        ``labels.txt``) has no names.
    labels_match:
        The public data's labels are known to be the task's: both sides name their labels, with the
        same names in the same order (case-insensitive). Only then is the public data used as labelled
        data (public-only baseline, shrinkage target, class means); a side without names never matches,
        whatever the counts. None without public data.
    domain_overlap:
        :func:`domain_overlap` of the public data with the task's training encodings; None
        when not measured (no public data, too few records, or the task's data was not read).
    warnings:
        What does not match, what it means for the run and what to do, one paragraph each.
    """

    public: str
    public_labels: tuple[str, ...]
    task_labels: tuple[str, ...]
    labels_match: bool | None
    domain_overlap: float | None
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The check as summary.json records it."""
        return {
            "public": self.public,
            "public_labels": list(self.public_labels),
            "task_labels": list(self.task_labels),
            "labels_match": self.labels_match,
            "labels_named": named_labels(self.public_labels) and named_labels(self.task_labels),
            "domain_overlap": self.domain_overlap,
            "domain_overlap_min": DOMAIN_OVERLAP_MIN,
            "domain_match": None if self.domain_overlap is None else self.domain_overlap >= DOMAIN_OVERLAP_MIN,
        }


def check_public(
    config: PublicSections,
    public: TextDataset | None,
    task_labels: Sequence[str],
    public_x: np.ndarray | None = None,
    task_x: np.ndarray | None = None,
) -> PublicCheck:
    """Compare the public data with the task: labels always, the domain when both encodings are given.

    ``task_labels`` are the task's label names by id (the ids as strings when only their count
    is known); ``public_x`` and ``task_x`` are clean encodings of the public records and of
    (a sample of) the task's training records, by the run's encoder, before any projection.
    """
    task_labels = tuple(task_labels)
    if public is None:
        return PublicCheck(config.data.public, (), task_labels, None, None, ())
    labels_match = same_labels(public.label_names, task_labels)
    overlap = None if public_x is None or task_x is None else domain_overlap(public_x, task_x)
    warnings = []
    fitted = " and ".join(
        what
        for what, used in (
            ("the BiLSTM encoder", config.encoder.encoder == "bilstm"),
            (f"the projection to {config.encoder.dim} dimensions (--dim)", config.encoder.dim > 0 and not config.data.projection_public),
        )
        if used
    )
    verb = "come" if " and " in fitted else "comes"
    unused = (
        "So the run uses the public data only where no labels are needed: it has no public-only baseline "
        "(accuracy_public_only stays empty) and the classifier takes neither a shrinkage target nor class "
        "means from public data"
        + (f"; {fitted} still {verb} from it" if fitted else "")
    )
    unnamed = [
        f"{spec} ({_labels_text(names)}{', no labels.txt' if _is_folder(spec) else ''})"
        for spec, names in ((config.data.data, task_labels), (config.data.public, public.label_names))
        if not named_labels(names)
    ]
    if not labels_match and unnamed:
        warnings.append(
            f"the labels of {' and of '.join(unnamed)} have no names, so the public data's labels "
            f"({config.data.public}: {_labels_text(public.label_names)}) are not known to be the task's "
            f"({config.data.data}: {_labels_text(task_labels)}), whatever their counts. {unused}. To use them, name "
            "the labels of both sides in a labels.txt (id<TAB>name lines, the same names in the same order)."
        )
    elif not labels_match:
        warnings.append(
            f"the public data ({config.data.public}: {_labels_text(public.label_names)}) is not labelled like the task "
            f"({config.data.data}: {_labels_text(task_labels)}). {unused}. Pass public data labelled like the task "
            "(--public FOLDER); --public none drops the "
            "projection (--dim auto or 0), which can cost more accuracy than the mismatch: compare both."
        )
    if overlap is not None and overlap < DOMAIN_OVERLAP_MIN:
        use, verb = (fitted, verb) if fitted else ("the public-only baseline and shrinkage target", "come")
        warnings.append(
            f"the public data ({config.data.public}) looks like another domain than the task's training sentences: its "
            f"leading {DOMAIN_DIMS} directions hold {overlap:.0%} of the task variance that the task's own leading "
            f"{DOMAIN_DIMS} hold (domain overlap {overlap:.2f}, below {DOMAIN_OVERLAP_MIN}, the limit measured "
            f"on real pairs in fed.runtime.assets). So {use} {verb} from unrelated text and may discard what the task "
            "needs. Pass public data from the task's domain (--public FOLDER); --public none --dim 0 avoids it but "
            "spreads the noise over every encoder dimension, which can cost more than it saves: compare both."
        )
    return PublicCheck(config.data.public, public.label_names, task_labels, labels_match, overlap, tuple(warnings))


def domain_overlap(public_x: np.ndarray, task_x: np.ndarray) -> float | None:
    """Share of the task's variance in the public data's leading directions, relative to the best.

    ``tr(P C_t P^T) / (sum of the DOMAIN_DIMS largest eigenvalues of C_t)``, with ``C_t`` the
    covariance of the task's encodings and ``P`` the ``DOMAIN_DIMS`` leading principal directions
    of the public encodings: 1 when the public data spans the task's leading subspace (what a
    projection fitted on it keeps), near 0 when it spans other directions. Rows beyond
    ``DOMAIN_SAMPLE`` are sampled (seeded). None when a side has fewer than ``DOMAIN_MIN_ROWS``
    rows or the encoder fewer than ``DOMAIN_DIMS`` dimensions.
    """
    if min(len(public_x), len(task_x)) < DOMAIN_MIN_ROWS or public_x.shape[1] < DOMAIN_DIMS:
        return None
    rng = np.random.default_rng(0)
    p, t = (
        np.asarray(x if len(x) <= DOMAIN_SAMPLE else x[rng.choice(len(x), DOMAIN_SAMPLE, replace=False)], np.float64)
        for x in (public_x, task_x)
    )
    directions = np.linalg.eigh(np.cov(p, rowvar=False))[1][:, -DOMAIN_DIMS:]
    task_cov = np.cov(t, rowvar=False)
    best = np.linalg.eigvalsh(task_cov)[-DOMAIN_DIMS:].sum()
    return float(np.trace(directions.T @ task_cov @ directions) / best)


def same_labels(public: Sequence[str], task: Sequence[str]) -> bool:
    """Whether labels ``public`` are known to be labels ``task``: both sides have names (not just their ids,
    :func:`named_labels`), the same names in the same order (case-insensitive). Equal counts alone prove
    nothing: a generated corpus's 4 topics are not a 4-class task's labels 0..3."""
    if len(public) != len(task) or not named_labels(public) or not named_labels(task):
        return False
    return [n.strip().lower() for n in public] == [n.strip().lower() for n in task]


def named_labels(names: Sequence[str]) -> bool:
    """Whether label ``names`` name anything: not just the ids as strings, as a folder without labels.txt gives."""
    return any(name.strip() != str(i) for i, name in enumerate(names))


def _is_folder(spec: str) -> bool:
    head, sep, tail = spec.rpartition(":")
    return Path(head if sep and "=" in tail else spec).expanduser().is_dir()


def _labels_text(names: Sequence[str]) -> str:
    shown = ", ".join(names[:LABELS_SHOWN]) + (", ..." if len(names) > LABELS_SHOWN else "")
    return f"{len(names)} labels: {shown}"


@dataclass(frozen=True)
class Assets:
    """A user's view of the shipped bundle: the encoder to run, an optional projection and denoiser."""

    encoder: Encoder
    projection: PCAProjection | None
    denoiser: "Denoiser | None" = None

    @property
    def sentence(self) -> Encoder:
        """The sentence encoder behind the records' encoder (itself, unless records are token matrices):
        what the domain check and the non-private upper bound read."""
        return self.encoder.sentence if isinstance(self.encoder, TokenMatrixEncoder) else self.encoder

    def features(
        self, dataset: TextDataset, cache_dir: Path, progress: bool = False, max_tokens: int | None = None
    ) -> np.ndarray:
        """Clean (cached) encodings of ``dataset``, projected when a projection was shipped; with
        ``max_tokens``, by the encoder reading at most that many tokens (a device tier's setting)."""
        encoder = self.encoder if max_tokens is None else self.encoder.truncated(max_tokens)
        x = encode_cached(encoder, dataset, cache_dir, progress=progress)
        return self.projection.apply(x).astype(np.float32) if self.projection else x


def build_bundle(
    config: BundleSections, public: TextDataset | None, cache_dir: Path, progress: bool = False,
    projection: TextDataset | None = None,
) -> np.ndarray:
    """Server side: fit what the run needs on public data and pack it (see ``pack``); the projection on
    ``projection``'s records when given (--projection-public, :func:`projection_data`), else on ``public``'s.

    The files are written to a temporary folder, removed before returning. ``config.encoder.dim`` must be
    resolved: the ServerApp chooses --dim auto first (strategies.app), with the nodes' counts.
    """
    if config.encoder.dim == DIM_AUTO:
        raise ValueError("--dim auto is chosen by the run's server with the nodes' record counts; build with a dimension")
    with tempfile.TemporaryDirectory(prefix="ldpfed-assets-") as temp:
        folder = Path(temp)
        if config.encoder.encoder == "bilstm":
            if public is None:
                raise ValueError("--encoder bilstm needs public data to pre-train on (--public)")
            train_bilstm(public, seed=config.seed, progress=progress).save(folder / "bilstm")
        if config.encoder.encoder == TUNED_SPEC:
            if public is None:
                raise ValueError(f"--encoder {TUNED_SPEC} needs public labelled data to fine-tune on (--public)")
            model = finetune(minilm_path(), public.texts, public.labels, public.num_labels, seed=config.seed, progress=progress)
            data = tuned_bytes(model, TUNED_LAYERS)
            (folder / TUNED_FILE).write_bytes(data)
            print(
                f"ldpfed: stage-1 encoder weights {TUNED_FILE}, {len(data):,} bytes, sha256 {weights_fingerprint(data)} "
                "(a device allows them by listing it in its policy's tuned_encoders)",
                flush=True,
            )
        spec = encoder_spec(config)
        (folder / "encoder.txt").write_text(spec)
        if config.encoder.dim:
            fit_on = public if projection is None else projection
            if fit_on is None:
                raise ValueError("--dim needs public data to fit the projection on (--public or --projection-public)")
            encoder = _encoder(folder, config.encoder.encoder)
            PCAProjection.fit(encode_cached(encoder, fit_on, cache_dir, progress=progress), config.encoder.dim).save(
                folder / "projection.npz"
            )
        shipped = RANDOMIZERS[config.privacy.mechanism].shipped_files
        if shipped:
            if public is None:
                raise ValueError(f"--mechanism {config.privacy.mechanism} needs public data to fit {', '.join(shipped)} on (--public)")
            randomizer = make_plan(config, public.num_labels).query  # query noise: the files serve local inference
            x = encode_cached(_encoder(folder, spec), public, cache_dir, progress=progress)
            for name, data in randomizer.bundle_files(x, config.seed, progress=progress).items():
                (folder / name).write_bytes(data)
        return pack(folder)


def add_projection(bundle: np.ndarray, projection: PCAProjection) -> np.ndarray:
    """The bundle with ``projection`` added as its projection.npz (it must have none)."""
    files = _read_members(np.asarray(bundle, dtype=np.uint8).tobytes())
    if "projection.npz" in files:
        raise ValueError("the bundle already ships a projection")
    with tempfile.TemporaryDirectory(prefix="ldpfed-assets-") as temp:
        folder = Path(temp)
        for name, content in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(content)
        projection.save(folder / "projection.npz")
        return pack(folder)


def pack(folder: Path) -> np.ndarray:
    """A folder as a deterministic tar archive in a uint8 array."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(folder)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as handle:
                tar.addfile(info, handle)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


Acceptance = Callable[[str, Mapping[str, str]], None]
"""``accept(spec, digests)``: raises to refuse a bundle by its encoder spec and its files' names and SHA-256
digests (hex; a node's policy, e.g. allowed shipped weights by fingerprint)."""


def unpack(
    bundle: np.ndarray, cache_dir: Path, accept: Acceptance | None = None, max_bytes: int = MAX_BUNDLE_BYTES
) -> Path:
    """User side: check a bundle and extract it once into the cache (by content hash).

    Returns the bundle's folder. Raises ValueError, having written nothing, unless the
    bundle is a plain (uncompressed) tar of at most ``max_bytes`` whose members are
    regular files among ``BUNDLE_FILES``, together at most ``MAX_UNPACKED_BYTES``, and each
    file passes its loader's checks (see ``_check_files``). ``accept`` sees the encoder spec
    and the files' names and digests first, before any file is loaded or written; what it raises
    passes through.
    """
    return _unpack(bundle, Path(cache_dir), accept, max_bytes)[0]


@contextmanager
def unpacked(
    bundle: np.ndarray, cache_dir: Path, accept: Acceptance | None = None, max_bytes: int = MAX_BUNDLE_BYTES
) -> Iterator[Path]:
    """:func:`unpack` for a caller that may still refuse the bundle: the folder is removed again if
    the block raises, unless it was there before (an earlier setup with the same bundle)."""
    folder, made = _unpack(bundle, Path(cache_dir), accept, max_bytes)
    try:
        yield folder
    except BaseException:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _unpack(bundle: np.ndarray, cache_dir: Path, accept: Acceptance | None, max_bytes: int) -> tuple[Path, bool]:
    """The bundle's folder, and whether this call made it (see :func:`unpack`)."""
    array = np.asarray(bundle, dtype=np.uint8)
    if array.nbytes > max_bytes:
        raise ValueError(f"asset bundle of {array.nbytes} bytes exceeds {max_bytes}")
    data = array.tobytes()
    files = _read_members(data)
    if accept is not None:
        accept(_bundle_spec(files), {name: weights_fingerprint(content) for name, content in files.items()})
    folder = cache_dir / "assets" / hashlib.sha256(data).hexdigest()[:32]
    if (folder / "encoder.txt").is_file():
        return folder, False
    _check_files(files)
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache_dir, prefix="assets-"))
    try:
        for name, content in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            (staging / name).write_bytes(content)
        folder.parent.mkdir(exist_ok=True)
        os.replace(staging, folder)
    except OSError:
        if not (folder / "encoder.txt").is_file():  # unless another process placed it first
            raise
        return folder, False
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # already gone once renamed into place
    return folder, True


def load_assets(folder: Path) -> Assets:
    """The encoder and projection a bundle folder describes; the encoder resolved under the policy in scope
    (fed.encoders.resolver: on a device its owner's, see :func:`device_encoders`).

    Raises ValueError when the projection does not take the encoder's output dimension
    (which for a Hugging Face encoder reads its config, not its weights), and
    :class:`~fed.encoders.base.EncoderRefused` for an encoder the policy refuses or that does not load.
    """
    spec = bundle_encoder(folder)
    encoder = _encoder(folder, spec)
    path = folder / "projection.npz"
    projection = PCAProjection.load(path) if path.is_file() else None
    if projection is not None and projection.input_dim != encoder.dim:
        raise ValueError(f"projection expects {projection.input_dim} dims, encoder {spec!r} gives {encoder.dim}")
    path = folder / DENOISER_FILE
    denoiser = None
    if path.is_file():
        from ldpfed.fed.learning.denoiser import Denoiser

        denoiser = Denoiser.load(path)
        shape = denoiser.shape
        if not isinstance(encoder, TokenMatrixEncoder) or (shape.length, shape.dim) != (encoder.length, encoder.token_dim):
            raise ValueError(f"the denoiser takes {shape.length} tokens of {shape.dim} dims; encoder {spec!r} does not give them")
    return Assets(encoder, projection, denoiser)


def bundle_encoder(folder: Path) -> str:
    """The encoder spec of an unpacked bundle (its encoder.txt)."""
    return _spec((folder / "encoder.txt").read_bytes())


def _encoder(folder: Path, spec: str) -> Encoder:
    """The encoder ``spec`` names, with the bundle ``folder``'s files, by the one resolver under the policy in
    scope (a device's message: its owner's; see :func:`device_encoders`)."""
    return resolver.load_encoder(spec, bundle=folder)


@contextmanager
def device_encoders(policy: DevicePolicy | Callable[[], DevicePolicy | None] | None) -> Iterator[None]:
    """Inside, every encoder name resolves under ``policy`` (fed.encoders.resolver; a callable is asked when a
    name is first resolved; None: the experimenter's, inside the simulation engine), and an encoder refused or
    that cannot be loaded is a :class:`~fed.runtime.requests.RequestRefused`: code ``policy``, or
    ``not-set-up`` for an allowed encoder whose files do not load (what failed goes to the node's log only,
    since it may name the device's files)."""
    with resolver.under(policy):
        try:
            yield
        except EncoderRefused as error:
            if error.detail:
                print(f"ldpfed: encoder refused: {error}", file=sys.stderr, flush=True)
            raise RequestRefused(error.reason, Refusal.NOT_SET_UP if error.unavailable else Refusal.POLICY) from None


def _spec(data: bytes) -> str:
    """The encoder spec of encoder.txt: one short printable line."""
    spec = data.decode("utf-8")
    if not spec or len(spec) > MAX_SPEC_CHARS or not spec.isprintable():
        raise ValueError(f"encoder.txt must be one printable line of 1 to {MAX_SPEC_CHARS} characters")
    return spec


def _read_members(data: bytes) -> dict[str, bytes]:
    """The files of a plain tar archive, each member's header checked before it is read."""
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                name = member.name
                if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE) or member.issparse():
                    raise ValueError(f"asset bundle member {name!r} is not a regular file (no links, folders, devices)")
                path = PurePosixPath(name)
                if path.is_absolute() or ".." in path.parts:
                    raise ValueError(f"asset bundle member {name!r} points outside the bundle folder")
                if name not in BUNDLE_FILES:
                    raise ValueError(f"asset bundle member {name!r} is unknown; expected some of {BUNDLE_FILES}")
                if name in files:
                    raise ValueError(f"asset bundle member {name!r} appears twice")
                total += member.size
                if total > MAX_UNPACKED_BYTES:
                    raise ValueError(f"asset bundle files exceed {MAX_UNPACKED_BYTES} bytes unpacked")
                handle = tar.extractfile(member)
                assert handle is not None  # a regular file
                files[name] = handle.read()
    except tarfile.TarError as err:
        raise ValueError(f"asset bundle is not a plain (uncompressed) tar archive: {err}") from err
    return files


def _bundle_spec(files: dict[str, bytes]) -> str:
    """The encoder spec of a bundle's files (ValueError when encoder.txt is missing or malformed)."""
    if "encoder.txt" not in files:
        raise ValueError("asset bundle refused: it has no encoder.txt")
    with _refusing("encoder.txt"):
        return _spec(files["encoder.txt"])


def _check_files(files: dict[str, bytes]) -> None:
    """Refuse (ValueError) a bundle whose files do not load, or do not fit together."""
    spec = _bundle_spec(files)
    shipped = [name for name in BILSTM_FILES if name in files]
    dim = None
    with _refusing("bilstm/"):
        if spec == "bilstm":
            missing = [name for name in BILSTM_FILES if name not in files]
            if missing:
                raise ValueError(f"encoder.txt says 'bilstm' but the bundle lacks {missing}")
            dim = BiLSTMEncoder.from_saved({n.removeprefix("bilstm/"): files[n] for n in shipped}).dim
        elif shipped:
            raise ValueError(f"the bundle ships {shipped} but encoder.txt names {spec!r}")
    with _refusing(TUNED_FILE):
        if spec == TUNED_SPEC:
            if TUNED_FILE not in files:
                raise ValueError(f"encoder.txt says {TUNED_SPEC!r} but the bundle lacks {TUNED_FILE}")
            from transformers import AutoConfig

            read_tuned(files[TUNED_FILE], AutoConfig.from_pretrained(minilm_path(), local_files_only=True))
        elif TUNED_FILE in files:
            raise ValueError(f"the bundle ships {TUNED_FILE} but encoder.txt names {spec!r}")
    if "projection.npz" in files:
        with _refusing("projection.npz"):
            projection = PCAProjection.load(io.BytesIO(files["projection.npz"]))
            if dim is not None and projection.input_dim != dim:
                raise ValueError(f"projection expects {projection.input_dim} dims, the shipped BiLSTM gives {dim}")
    if DENOISER_FILE in files:
        from ldpfed.fed.learning.denoiser import Denoiser

        with _refusing(DENOISER_FILE):
            shape = Denoiser.from_bytes(files[DENOISER_FILE], DENOISER_FILE).shape
            tokens = split_spec(spec)
            if tokens is None or tokens[0] != shape.length:
                raise ValueError(f"a denoiser of {shape.length} tokens needs encoder.txt 'tokens:{shape.length}:<encoder>', not {spec!r}")


@contextmanager
def _refusing(name: str) -> Iterator[None]:
    """Name the bundle file in a ValueError raised inside."""
    try:
        yield
    except ValueError as err:
        raise ValueError(f"asset bundle refused, {name}: {err}") from err
