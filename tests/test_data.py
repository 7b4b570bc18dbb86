"""TextDataset, the dataset loaders and the generated corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.data.corpus import LABEL_NAMES, STYLE_NAMES, generate_corpus, generate_public_corpus
from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.data.loaders import HOLDOUT_FRACTION, load_dataset


def _tiny() -> TextDataset:
    return TextDataset("tiny", ("a", "b", "c"), None, np.array([0, 1, 0]), ("x", "y"))


def test_dataset_subset_and_fingerprint() -> None:
    data = _tiny()
    part = data.subset([2, 0])
    assert part.texts == ("c", "a") and part.labels.tolist() == [0, 0] and len(part) == 2
    assert data.num_labels == 2
    renamed = TextDataset("other", data.texts, None, data.labels.copy(), ("p", "q"))
    assert renamed.fingerprint() == data.fingerprint()
    assert data.subset([0, 1, 2]).fingerprint() == data.fingerprint()
    assert part.fingerprint() != data.fingerprint()
    relabelled = TextDataset("tiny", data.texts, None, np.array([0, 1, 1]), ("x", "y"))
    assert relabelled.fingerprint() != data.fingerprint()
    # Text boundaries matter: ("ab", "c") is not ("a", "bc").
    a = TextDataset("t", ("ab", "c"), None, np.array([0, 0]), ("x",))
    b = TextDataset("t", ("a", "bc"), None, np.array([0, 0]), ("x",))
    assert a.fingerprint() != b.fingerprint()


def test_dataset_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="label ids"):
        TextDataset("t", ("a",), None, np.array([2]), ("x", "y"))
    with pytest.raises(ValueError, match="second sentences"):
        TextDataset("t", ("a", "b"), ("c",), np.array([0, 0]), ("x",))
    with pytest.raises(ValueError, match="labels must be"):
        TextDataset("t", ("a",), None, np.array([0.5]), ("x",))
    with pytest.raises(ValueError, match="out of range"):
        _tiny().subset([3])


def test_sst2_dev_rows(shared_data: Path) -> None:
    data = load_dataset(str(shared_data / "sst2"), "dev")
    assert len(data) == 872
    assert data.texts2 is None and data.label_names == ("negative", "positive")
    assert data.labels.dtype == np.int64 and set(data.labels.tolist()) == {0, 1}
    assert data.texts[0] == "it 's a charming and often affecting journey . "  # trailing space kept


def test_double_quotes_round_trip(shared_data: Path) -> None:
    # SST-2 has no double quotes; MRPC dev opens a sentence with an unmatched one, which a
    # quoting reader would run on into the next rows.
    data = load_dataset(str(shared_data / "mrpc"), "dev")
    assert len(data) == 408
    assert data.texts2[0] == '"The foodservice pie business does not fit our long-term growth strategy.'
    lines = (shared_data / "mrpc" / "dev.tsv").read_text(encoding="utf-8").split("\n")[1:-1]
    quoted = [i for i, line in enumerate(lines) if '"' in line]
    assert len(quoted) > 50
    for i in quoted:
        assert "\t".join((data.texts[i], data.texts2[i], str(data.labels[i]))) == lines[i]


def test_pair_dataset_loads_second_sentences(shared_data: Path) -> None:
    data = load_dataset(str(shared_data / "rte"), "dev")
    assert len(data) == 277 and data.texts2 is not None and len(data.texts2) == 277
    assert data.texts[0].startswith("Dana Reeve") and data.texts2[0] == "Christopher Reeve had an accident."


def test_dev_falls_back_to_test(shared_data: Path) -> None:
    data = load_dataset(str(shared_data / "snips"), "dev")
    assert len(data) == 700 and data.num_labels == 7


def test_folder_without_splits_is_split_80_20(shared_data: Path) -> None:
    folder = str(shared_data / "sentiment_labelled_sentences")
    everything = load_dataset(folder, "all")
    train, dev = load_dataset(folder, "train"), load_dataset(folder, "dev")
    assert len(everything) == 3000 and len(dev) == round(HOLDOUT_FRACTION * 3000)
    assert len(train) + len(dev) == 3000
    assert everything.group_names == ("amazon_cells_labelled", "imdb_labelled", "yelp_labelled")
    assert set(train.groups.tolist()) == {0, 1, 2}
    assert load_dataset(folder, "dev").fingerprint() == dev.fingerprint()
    assert load_dataset(folder, "test").fingerprint() == dev.fingerprint()


def test_missing_folder_and_bad_split(shared_data: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_dataset(str(tmp_path / "nothing"), "train")
    with pytest.raises(ValueError, match="no split 'train'.*alps_train10k"):
        load_dataset(str(shared_data / "ag_news"), "train")
    with pytest.raises(ValueError, match="no split 'nope'"):
        load_dataset(str(shared_data / "sst2"), "nope")


def test_a_spec_names_its_splits(shared_data: Path, tmp_path: Path) -> None:
    folder = shared_data / "ag_news"
    spec = f"{folder}:train=alps_train10k,test=alps_test"
    train, dev = load_dataset(spec, "train"), load_dataset(spec, "dev")
    assert (len(train), len(dev)) == (10_001, len(load_dataset(f"{folder}:test=alps_test", "test")))
    assert train.texts[0] == load_dataset(f"{folder}:train={folder / 'alps_train10k.tsv'}", "train").texts[0]
    assert train.label_names == dev.label_names and len(train.label_names) == 4
    assert load_dataset(f"{folder}:train=alps_train10k", "test").name == "ag_news/test"
    with pytest.raises(ValueError, match="split 'train' names .*nope.tsv, which is not a file"):
        load_dataset(f"{folder}:train=nope", "train")
    with pytest.raises(ValueError, match="split mapping must be"):
        load_dataset(f"{folder}:train=", "train")
    with pytest.raises(ValueError, match="named twice"):
        load_dataset(f"{folder}:train=a,train=b", "train")


def test_tsv_errors_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nfine\t0\nbad row\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.tsv:3: 1 fields"):
        load_dataset(str(tmp_path), "train")
    (tmp_path / "train.tsv").write_text("text\tlabel\nx\t0\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        load_dataset(str(tmp_path), "train")


def test_a_byte_order_mark_a_trailing_blank_line_and_csv_files_are_read(tmp_path: Path) -> None:
    """Issue 42 item 9e: what a spreadsheet writes (a byte-order mark, a last blank line, CSV) was refused."""
    (tmp_path / "train.tsv").write_text("\ufeffsentence\tlabel\nfine\t0\nalso \"fine\"\t1\n\n", encoding="utf-8")
    (tmp_path / "dev.csv").write_text('\ufeffsentence,label\r\n"one, two",1\r\n"say ""hi""",0\r\n', encoding="utf-8")
    train, dev = load_dataset(str(tmp_path), "train"), load_dataset(str(tmp_path), "dev")
    assert train.texts == ("fine", 'also "fine"') and list(train.labels) == [0, 1]
    assert dev.texts == ("one, two", 'say "hi"') and list(dev.labels) == [1, 0] and dev.name == f"{tmp_path.name}/dev"
    assert load_dataset(f"{tmp_path}:train=dev", "train").texts == dev.texts
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nfine\t0\n\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.tsv:3: 0 fields"):  # two blank lines: one is a real problem
        load_dataset(str(tmp_path), "train")
    (tmp_path / "dev.csv").write_text("sentence,label\nfine,0\nbad,row,here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dev.csv:3: 3 fields"):
        load_dataset(str(tmp_path), "dev")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n", encoding="utf-8")
    with pytest.raises(ValueError, match="dev.csv and dev.tsv are one split"):
        load_dataset(str(tmp_path), "dev")


def test_hub_failure_says_local_folders_work(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="could not be downloaded.*local folder"):
        load_dataset("no-such-user/no-such-dataset", "train")


def test_generated_corpus_is_deterministic_and_balanced() -> None:
    a = generate_corpus(2000, seed=3, split="train")
    assert a.texts == generate_corpus(2000, seed=3, split="train").texts
    assert a.texts != generate_corpus(2000, seed=4, split="train").texts
    assert a.label_names == LABEL_NAMES and a.group_names == STYLE_NAMES
    for counts in (np.bincount(a.labels, minlength=4), np.bincount(a.groups, minlength=4)):
        assert counts.min() > 0.8 * len(a) / 4
    assert load_dataset("generated:2000:3", "train").fingerprint() == a.fingerprint()


def test_generated_splits_and_public_corpus_are_disjoint() -> None:
    train = set(generate_corpus(3000, 0, "train").texts)
    dev = set(generate_corpus(1000, 0, "dev").texts)
    test = set(generate_corpus(1000, 0, "test").texts)
    public = set(generate_public_corpus(3000, seed=0).texts)
    assert not (train & dev) and not (train & test) and not (dev & test)
    assert not public & (train | dev | test)


def test_generated_styles_differ_in_form() -> None:
    data = generate_corpus(800, 0, "train")
    texts = np.array(data.texts)
    questions = texts[data.groups == STYLE_NAMES.index("question")]
    assert all(text.endswith("?") for text in questions)
    tweets = texts[data.groups == STYLE_NAMES.index("tweet")]
    assert np.mean(["#" in text for text in tweets]) > 0.5
