"""Load a labelled text dataset: the generated corpus, a local folder, or a Hugging Face id.

Local folders use the layout of shared/data: UTF-8 TSV files with one header row
``sentence[\\tsentence2]\\tlabel``, fields unquoted (a double quote is a literal character),
and an optional ``labels.txt`` of ``id\\tname`` lines. A ``.csv`` file (what a spreadsheet
exports: comma-separated, fields quoted as the csv module reads them) holds the same columns and
serves as a ``.tsv`` of its stem. A byte-order mark at the start and one blank line at the end
of a file are ignored.

Split resolution in a folder:

1. ``<split>.tsv`` (or ``.csv``) if it exists (so any file stem works, e.g. "alps_train10k");
2. "dev" falls back to ``test.tsv`` when there is no ``dev.tsv``;
3. a folder without any of train/dev/test.tsv (e.g. one ``all.tsv``, or several sources)
   is read as split "all": every ``*.tsv`` and ``*.csv`` in name order, concatenated, with the file of
   each record in ``groups``. "train" is a fixed 80% of it and "dev" / "test" the other
   20%, drawn by a permutation seeded with ``HOLDOUT_SEED`` (kept in file order).

A folder spec may name its splits: ``<folder>:train=alps_train10k,dev=alps_test`` maps each
split to a file stem in the folder or to a ``.tsv`` or ``.csv`` path. Splits it does not name resolve as
above.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np

from ldpfed.fed.data.corpus import LABEL_NAMES, generate_corpus
from ldpfed.fed.data.dataset import TextDataset

GENERATED_SIZES = {"train": 2_000, "dev": 400, "test": 400}
"""Records of the generated corpus per split when the spec gives no size (others: 400)."""
GENERATED_HELD_OUT_SHARE = 5
"""With 'generated:N', dev and test get N // this many records, other splits N."""

HOLDOUT_SEED = 20_240_601
"""Seed of the permutation that splits a folder's "all" records into train and dev."""
HOLDOUT_FRACTION = 0.2
"""Fraction of a folder's "all" records held out as dev/test."""

DATA_SUFFIXES = (".tsv", ".csv")
"""The suffixes of a local folder's data files."""

_STANDARD_SPLITS = ("train", "dev", "test")
_TEXT_COLUMNS = ("sentence", "text", "sentence1", "question1", "premise", "question", "content", "tweet")
_TEXT2_COLUMNS = ("sentence2", "question2", "hypothesis")
_LABEL_COLUMNS = ("label", "labels", "coarse_label")
_HF_SPLITS = {"dev": ("validation", "dev", "test")}


def load_dataset(spec: str, split: str) -> TextDataset:
    """Load one split of a dataset.

    Parameters
    ----------
    spec:
        "generated[:num_records[:seed]]" for the project's own corpus (default sizes in
        ``GENERATED_SIZES``, seed 0); an existing local folder; otherwise a Hugging Face
        dataset id ("name" or "org/name"), optionally "id:config" (e.g.
        "nyu-mll/glue:sst2"). A spec that looks like a path (absolute, starting with "."
        or "~", or with more than one "/") must be an existing folder. A folder may be
        followed by ":split=stem-or-file.tsv,..." naming its splits.
    split:
        "train", "dev", "test", or any split name the source has.

    Returns
    -------
    TextDataset
    """
    if not split:
        raise ValueError("split must be a non-empty name such as 'train' or 'dev'")
    if spec == "generated" or spec.startswith("generated:"):
        return _load_generated(spec, split)
    named = _named_split(spec, split)
    if named is not None:
        return named
    folder = Path(spec).expanduser()
    if folder.is_dir():
        return _load_folder(folder, split)
    if folder.exists():
        raise ValueError(f"{spec} is a file; a local dataset is a folder of TSV (or CSV) files")
    if folder.is_absolute() or spec.startswith((".", "~")) or spec.count("/") > 1:
        raise ValueError(f"dataset folder {spec} does not exist")
    return _load_hf(spec, split)


def _named_split(spec: str, split: str) -> TextDataset | None:
    """One split of a "<folder>:split=file,..." spec ("dev" falls back to a named "test"); None for other specs."""
    head, sep, tail = spec.rpartition(":")
    if not sep or "=" not in tail or not Path(head).expanduser().is_dir():
        return None
    folder = Path(head).expanduser()
    mapping: dict[str, str] = {}
    for item in tail.split(","):
        name, eq, target = (part.strip() for part in item.partition("="))
        if not eq or not name or not target:
            raise ValueError(f"{spec}: split mapping must be 'split=file[,split=file...]', got {item!r}")
        if name in mapping:
            raise ValueError(f"{spec}: split {name!r} is named twice")
        mapping[name] = target
    key = "test" if split == "dev" and "dev" not in mapping and "test" in mapping else split
    if key not in mapping:
        return _load_folder(folder, split)
    target = Path(mapping[key]).expanduser()
    if target.suffix in DATA_SUFFIXES:
        path = target
    else:
        path = _data_files(folder).get(mapping[key], folder / f"{mapping[key]}.tsv")
    if not path.is_file():
        raise ValueError(f"{spec}: split {key!r} names {path}, which is not a file")
    return _read_files(folder, [path], f"{folder.name}/{key}")


def label_schema(spec: str) -> tuple[str, ...] | None:
    """The task's label names from its schema alone, reading no record: the generated corpus's names, or a
    local folder's ``labels.txt``; None where there is none (a folder without it, a Hugging Face id)."""
    if spec == "generated" or spec.startswith("generated:"):
        return LABEL_NAMES
    head, sep, tail = spec.rpartition(":")
    folder = Path(head if sep and "=" in tail else spec).expanduser()
    path = folder / "labels.txt"
    if not path.is_file():
        return None
    names = _read_label_file(path)
    if sorted(names) != list(range(len(names))):
        raise ValueError(f"{path}: ids must be 0..k-1")
    return tuple(names[i] for i in range(len(names)))


def train_record_count(spec: str) -> int | None:
    """How many records the task's training split holds, for a local folder (a public fact of the run, design.md
    section 2); None for other specs (the generated corpus, a Hugging Face id), which are not read here."""
    head, sep, tail = spec.rpartition(":")
    folder = Path(head if sep and "=" in tail else spec).expanduser()
    if not folder.is_dir():
        return None
    return len(load_dataset(spec, "train"))


def _load_generated(spec: str, split: str) -> TextDataset:
    fields = spec.split(":")[1:]
    if len(fields) > 2 or not all(field.isdigit() for field in fields):
        raise ValueError(f"bad generated spec {spec!r}; expected generated[:num_records[:seed]]")
    if fields:
        size = int(fields[0]) if split not in ("dev", "test") else max(1, int(fields[0]) // GENERATED_HELD_OUT_SHARE)
    else:
        size = GENERATED_SIZES.get(split, 400)
    seed = int(fields[1]) if len(fields) > 1 else 0
    return generate_corpus(size, seed, split)


def read_tsv(path: Path) -> tuple[list[str], list[str] | None, list[int]]:
    """Read one data file with header ``sentence[\tsentence2]\tlabel``: unquoted TSV, or CSV for a ``.csv`` path;
    ValueError naming the file (and the line)."""
    kind = "CSV" if path.suffix == ".csv" else "TSV"
    try:
        return _read_rows(path)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    except csv.Error as error:
        limit = csv.field_size_limit()
        raise ValueError(f"{path}: unreadable {kind} ({error}; fields are limited to {limit} characters)") from None


def _read_rows(path: Path) -> tuple[list[str], list[str] | None, list[int]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:  # -sig: a spreadsheet's byte-order mark
        if path.suffix == ".csv":
            reader = csv.reader(handle)
        else:
            reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header not in (["sentence", "label"], ["sentence", "sentence2", "label"]):
            separator = "," if path.suffix == ".csv" else "<TAB>"
            raise ValueError(f"{path}: header must be sentence[{separator}sentence2]{separator}label, got {header}")
        texts: list[str] = []
        texts2: list[str] = []
        labels: list[int] = []
        rows = [(reader.line_num, row) for row in reader]
        if rows and not rows[-1][1]:
            rows.pop()  # one blank line at the end
        for line, row in rows:
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: {len(row)} fields, header has {len(header)}")
            try:
                labels.append(int(row[-1]))
            except ValueError:
                raise ValueError(f"{path}:{line}: label {row[-1]!r} is not an integer") from None
            texts.append(row[0])
            if len(header) == 3:
                texts2.append(row[1])
    return texts, (texts2 if len(header) == 3 else None), labels


def _label_names(folder: Path, labels: np.ndarray) -> tuple[str, ...]:
    """Names from ``labels.txt`` (``id<TAB>name`` lines), else the ids as strings."""
    path = folder / "labels.txt"
    count = int(labels.max()) + 1 if labels.size else 0
    if not path.is_file():
        return tuple(str(i) for i in range(count))
    names = _read_label_file(path)
    if sorted(names) != list(range(len(names))) or len(names) < count:
        raise ValueError(f"{path}: ids must be 0..k-1 and cover every label (max {count - 1})")
    return tuple(names[i] for i in range(len(names)))


def _read_label_file(path: Path) -> dict[int, str]:
    """The ``id<TAB>name`` lines of a ``labels.txt``."""
    names: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            key, _, name = line.partition("\t")
            if not key.strip().isdigit() or not name:
                raise ValueError(f"{path}: expected 'id<TAB>name' lines, got {line!r}")
            names[int(key)] = name
    return names


def _data_files(folder: Path) -> dict[str, Path]:
    """The folder's data files (``DATA_SUFFIXES``) by stem, in name order; ValueError for a stem with two."""
    files: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix in DATA_SUFFIXES and path.is_file():
            if path.stem in files:
                raise ValueError(f"{folder}: {files[path.stem].name} and {path.name} are one split; keep one of them")
            files[path.stem] = path
    return files


def _load_folder(folder: Path, split: str) -> TextDataset:
    files = _data_files(folder)
    stems = sorted(files)
    if not stems:
        raise ValueError(f"{folder} holds no .tsv or .csv files")
    if split in stems:
        return _read_files(folder, [files[split]], f"{folder.name}/{split}")
    if split == "dev" and "test" in stems:
        return _read_files(folder, [files["test"]], f"{folder.name}/test")
    if any(stem in _STANDARD_SPLITS for stem in stems) or split not in ("all", *_STANDARD_SPLITS):
        raise ValueError(
            f"{folder} has no split {split!r}; available: {', '.join(stems)}. "
            f"Name the splits' files with '{folder}:train=<stem>,dev=<stem>'"
        )
    everything = _read_files(folder, [files[stem] for stem in stems], f"{folder.name}/all")
    if split == "all":
        return everything
    order = np.random.default_rng(HOLDOUT_SEED).permutation(len(everything))
    held_out = int(round(HOLDOUT_FRACTION * len(everything)))
    chosen = order[held_out:] if split == "train" else order[:held_out]
    return replace(everything.subset(np.sort(chosen)), name=f"{folder.name}/{split}")


def _read_files(folder: Path, paths: list[Path], name: str) -> TextDataset:
    """Concatenate data files, labels named by the folder's ``labels.txt``; with several files, ``groups`` records the file."""
    texts: list[str] = []
    texts2: list[str] = []
    labels: list[int] = []
    groups: list[int] = []
    pairs = None
    for index, path in enumerate(paths):
        file_texts, file_texts2, file_labels = read_tsv(path)
        if pairs is not None and pairs != (file_texts2 is not None):
            raise ValueError(f"{folder}: some files hold sentence pairs and some do not")
        pairs = file_texts2 is not None
        texts += file_texts
        texts2 += file_texts2 or []
        labels += file_labels
        groups += [index] * len(file_texts)
    label_array = np.array(labels, dtype=np.int64)
    return TextDataset(
        name=name,
        texts=tuple(texts),
        texts2=tuple(texts2) if pairs else None,
        labels=label_array,
        label_names=_label_names(folder, label_array),
        groups=np.array(groups, dtype=np.int64) if len(paths) > 1 else None,
        group_names=tuple(path.stem for path in paths) if len(paths) > 1 else (),
    )


def _load_hf(spec: str, split: str) -> TextDataset:
    """A split of a Hugging Face dataset ("id" or "id:config"), columns mapped by name."""
    import datasets

    path, _, config = spec.partition(":")
    try:
        splits = datasets.load_dataset(path, config or None)
    except Exception as err:  # any download or resolution failure
        raise ValueError(
            f"{spec!r} is not a local folder and could not be downloaded from the Hugging Face "
            f"Hub ({type(err).__name__}: {err}). Offline, pass a local folder of TSV files "
            "(sentence[<TAB>sentence2]<TAB>label), e.g. one from shared/data, or 'generated'."
        ) from err
    candidates = _HF_SPLITS.get(split, (split,))
    chosen = next((name for name in candidates if name in splits), None)
    if chosen is None:
        raise ValueError(f"{spec} has no split {split!r}; available: {', '.join(splits)}")
    table = splits[chosen]
    columns = table.column_names
    text_col = next((c for c in _TEXT_COLUMNS if c in columns), None)
    label_col = next((c for c in _LABEL_COLUMNS if c in columns), None)
    if text_col is None or label_col is None:
        raise ValueError(f"{spec}: cannot find text and label columns among {columns}")
    text2_col = next((c for c in _TEXT2_COLUMNS if c in columns and c != text_col), None)
    labels = np.asarray(table[label_col], dtype=np.int64)
    if labels.size and labels.min() < 0:
        raise ValueError(f"{spec}/{chosen} has unlabelled records (label -1); pick a labelled split")
    feature = table.features[label_col]
    names = getattr(feature, "names", None) or [str(i) for i in range(int(labels.max()) + 1)]
    return TextDataset(
        name=f"{spec}/{chosen}",
        texts=tuple(table[text_col]),
        texts2=tuple(table[text2_col]) if text2_col else None,
        labels=labels,
        label_names=tuple(names),
    )
