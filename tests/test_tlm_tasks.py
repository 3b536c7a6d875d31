"""TLM task files: TSV/CSV/JSONL columns, header detection, label vocabulary errors, and the SciERC sciie task."""

from __future__ import annotations

import pytest

from electra.core.errors import UserError
from electra.tlm.tasks import (
    LabelVocab,
    TaskExample,
    build_sciie,
    mark_relation,
    parse_columns,
    read_task_file,
    split_examples,
)


def test_tsv_without_header_is_text_then_label(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text('Stocks "rally" on Wall Street\tBusiness\n\nRed Sox win\tSports\n')
    assert read_task_file(path) == [
        TaskExample('Stocks "rally" on Wall Street', "Business"),
        TaskExample("Red Sox win", "Sports"),
    ]


def test_csv_with_header_joins_the_other_columns(tmp_path):
    path = tmp_path / "test.csv"
    path.write_text('label,title,description\n3,Fears for pension,"Unions say, they are disappointed."\n')
    assert read_task_file(path) == [TaskExample("Fears for pension Unions say, they are disappointed.", "3")]
    only_title = read_task_file(path, text_columns=parse_columns("title"), label_column="label")
    assert only_title == [TaskExample("Fears for pension", "3")]
    by_index = read_task_file(path, text_columns=parse_columns("2"), label_column=0, header=True)
    assert by_index == [TaskExample("Unions say, they are disappointed.", "3")]


def test_missing_label_column_is_a_clear_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("category,text\nSports,Red Sox win\n")
    with pytest.raises(
        UserError, match=r"t\.csv:1: label column 'label' not found \(the header has category, text\)"
    ):
        read_task_file(path, header=True)
    assert read_task_file(path, label_column="category") == [TaskExample("Red Sox win", "Sports")]
    wide = tmp_path / "wide.tsv"
    wide.write_text("a\tb\tc\n")
    with pytest.raises(UserError, match="no label column"):
        read_task_file(wide)


def test_ragged_rows_and_jsonl_errors_name_the_line(tmp_path):
    ragged = tmp_path / "r.tsv"
    ragged.write_text("good row\tA\nbad row\tA\textra\n")
    with pytest.raises(UserError, match=r"r\.tsv:2: 3 columns"):
        read_task_file(ragged)
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"text": "x", "label": "A"}\n{"text": "y"}\n')
    with pytest.raises(UserError, match=r"d\.jsonl:2: label field 'label' missing"):
        read_task_file(jsonl)
    empty = tmp_path / "e.tsv"
    empty.write_text("\n")
    with pytest.raises(UserError, match="no examples"):
        read_task_file(empty)


def test_labels_unseen_in_train_are_rejected():
    vocab = LabelVocab.from_examples([TaskExample("a", "World"), TaskExample("b", "Sports")], "train.tsv")
    assert vocab.labels == ["Sports", "World"]
    assert vocab.encode([TaskExample("c", "World")], "dev.tsv") == [1]
    with pytest.raises(
        UserError, match=r"test\.tsv: example 2 has label 'Business', which the training file never"
    ):
        vocab.encode([TaskExample("c", "World"), TaskExample("d", "Business")], "test.tsv")
    with pytest.raises(UserError, match="at least two"):
        LabelVocab.from_examples([TaskExample("a", "World")], "train.tsv")


def test_split_is_seeded_disjoint_and_complete():
    examples = [TaskExample(str(i), "AB"[i % 2]) for i in range(20)]
    train, dev = split_examples(examples, 5, seed=3)
    assert len(train) == 15 and len(dev) == 5
    assert sorted(e.text for e in train + dev) == sorted(e.text for e in examples)
    assert split_examples(examples, 5, seed=3) == (train, dev)


def test_mark_relation_brackets_head_and_tail():
    tokens = "we use a Bayesian model for word segmentation".split()
    assert (
        mark_relation(tokens, (3, 4), (6, 7)) == "we use a [[ Bayesian model ]] for << word segmentation >>"
    )
    # Tail before head, and a tail nested in the head, stay well formed.
    assert (
        mark_relation(tokens, (6, 7), (3, 3)) == "we use a << Bayesian >> model for [[ word segmentation ]]"
    )
    assert (
        mark_relation(tokens, (3, 4), (4, 4)) == "we use a [[ Bayesian << model >> ]] for word segmentation"
    )


def test_sciie_from_dygie_uses_sentence_relative_offsets(tmp_path):
    path = tmp_path / "s.json"
    doc = {
        "sentences": [["A", "first", "sentence", "."], ["CRF", "is", "used", "for", "tagging", "."]],
        "relations": [[], [[4, 4, 8, 8, "USED-FOR"]]],
    }
    import json

    path.write_text(json.dumps(doc) + "\n")
    assert build_sciie(path) == [TaskExample("[[ CRF ]] is used for << tagging >> .", "USED-FOR")]


def test_real_task_files(shared_data):
    agnews = shared_data / "tlm_agnews"
    dev = read_task_file(agnews / "alps" / "dev.tsv")
    test = read_task_file(agnews / "alps" / "test.tsv")
    assert len(dev) == 10001 and len(test) == 7600
    vocab = LabelVocab.from_examples(dev, "dev.tsv")
    assert vocab.labels == ["Business", "Sci/Tech", "Sports", "World"]
    assert len(vocab.encode(test, "test.tsv")) == 7600
    original = read_task_file(agnews / "test.csv")
    assert len(original) == 7600 and {e.label for e in original} == {"1", "2", "3", "4"}
    assert original[0].text.startswith("Fears for T N pension after talks Unions representing workers")
    sizes = [len(build_sciie(shared_data / "tlm_scierc" / f"{s}.json")) for s in ("train", "dev", "test")]
    assert sizes == [3219, 455, 974]  # DSP's sciie split sizes


def test_sciie_cli_writes_readable_splits(shared_data, tmp_path):
    from electra.app.cli import main

    assert main(["tlm", "sciie", "--scierc", str(shared_data / "tlm_scierc"), "--out", str(tmp_path)]) == 0
    train = read_task_file(tmp_path / "train.jsonl")
    test = read_task_file(tmp_path / "test.jsonl")
    assert len(train) == 3219 and len(test) == 974
    vocab = LabelVocab.from_examples(train, "train.jsonl")
    assert len(vocab) == 7 and len(vocab.encode(test, "test.jsonl")) == 974
    assert all("[[" in e.text and "<<" in e.text for e in train)


def test_sciie_cli_keeps_existing_splits_and_writes_nothing_when_one_is_missing(tmp_path, capsys):
    """Before: a missing dev.json stopped `tlm sciie` after train.jsonl was written, and splits already in --out
    (a user's own train.jsonl) were replaced without a word; now every input is checked first and existing
    splits need --overwrite."""
    import json

    from electra.app.cli import main

    source, out = tmp_path / "scierc", tmp_path / "out"
    source.mkdir()
    doc = {
        "sentences": [["CRF", "is", "used", "for", "tagging", "."]],
        "relations": [[[0, 0, 4, 4, "USED-FOR"]]],
    }
    (source / "train.json").write_text(json.dumps(doc) + "\n")
    (source / "test.json").write_text(json.dumps(doc) + "\n")
    assert main(["tlm", "sciie", "--scierc", str(source), "--out", str(out)]) == 2
    assert "dev.json: missing" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    (source / "dev.json").write_text(json.dumps(doc) + "\n")
    out.mkdir(exist_ok=True)
    (out / "train.jsonl").write_text('{"text": "my own", "label": "x"}\n')
    assert main(["tlm", "sciie", "--scierc", str(source), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "train.jsonl already exists" in err and "--overwrite" in err and len(err.splitlines()) == 1
    assert (out / "train.jsonl").read_text() == '{"text": "my own", "label": "x"}\n'
    assert sorted(p.name for p in out.iterdir()) == ["train.jsonl"]
    assert main(["tlm", "sciie", "--scierc", str(source), "--out", str(out), "--overwrite"]) == 0
    assert read_task_file(out / "train.jsonl") == [
        TaskExample("[[ CRF ]] is used for << tagging >> .", "USED-FOR")
    ]
    assert sorted(p.name for p in out.iterdir()) == ["dev.jsonl", "test.jsonl", "train.jsonl"]
