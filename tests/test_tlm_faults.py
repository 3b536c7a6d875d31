"""What `tlm texts / retrieve / train`, ISS and `tartan` answer to bad or unusual input: task files in other
encodings or shapes, a user's files in the output folder, ISS mistakes that used to surface only after the BM25
index was built, flags that contradict each other, and a `--resume` of a finished run."""

# ruff: noqa: F811  (pytest fixtures imported from test_tlm_train / test_tartan are parameters here)
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import electra.tlm.train as train_module
from electra.app.cli import main
from electra.core.errors import UserError
from electra.tlm.tasks import read_task_file

from .test_tartan import start_dir  # noqa: F401  (shared fixture)
from .test_tlm_train import SMALL, _cache, data  # noqa: F401  (shared fixtures)


def _agnews_rows(shared_data: Path, n: int = 12) -> str:
    """The first `n` rows of the real AG News CSV (header `label,title,description`)."""
    lines = (shared_data / "tlm_agnews" / "test.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[: n + 1])


@pytest.mark.filterwarnings("ignore:.*is UTF-16 \\(byte-order mark\\)")
def test_task_files_are_read_through_a_byte_order_mark_utf16_and_crlf(shared_data, tmp_path):
    """Before: task files were opened as bare UTF-8, so Excel's BOM hid the `label` header (refused as "no
    header and 3 columns"), a BOM JSONL was "not valid JSON", and UTF-16 was a UnicodeDecodeError traceback."""
    text = _agnews_rows(shared_data)
    plain = tmp_path / "plain.csv"
    plain.write_text(text, encoding="utf-8")
    expected = read_task_file(plain)
    assert [e.label for e in expected][:3] == ["3", "4", "4"]
    variants = {
        "bom.csv": b"\xef\xbb\xbf" + text.encode("utf-8"),
        "utf16.csv": text.encode("utf-16"),
        "crlf.csv": text.replace("\n", "\r\n").encode("utf-8"),
    }
    for name, data_bytes in variants.items():
        path = tmp_path / name
        path.write_bytes(data_bytes)
        assert read_task_file(path) == expected, name
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + b'{"text": "a b", "label": "x"}\r\n{"text": "c d", "label": "y"}\n')
    assert [e.label for e in read_task_file(jsonl)] == ["x", "y"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("latin1.tsv", "caf\xe9 prices rise\tBusiness\n".encode("latin1"), "latin1.tsv:1: not UTF-8 text"),
        (
            "utf16.tsv",
            "stocks fell\tBusiness\nteam won\tSports\n".encode("utf-16-le"),
            "UTF-16 text without a byte-order mark, not UTF-8; convert it with `iconv -f utf-16le -t utf-8`",
        ),
        ("cut.csv", b'label,text\n1,"an open quote\n2,and the rest\n', "cut.csv:3: not valid CSV"),
        ("null.jsonl", b'{"text": "a", "label": null}\n', "null.jsonl:1: label field 'label' is null"),
        ("list.jsonl", b'{"text": "a", "label": [1]}\n', "list.jsonl:1: label field 'label' is [1]"),
    ],
)
def test_undecodable_or_malformed_task_files_are_one_line(name, content, message, tmp_path, capsys):
    """Before: Latin-1 or binary was a UnicodeDecodeError traceback, UTF-16 without a mark a misleading
    "1 columns where the first row has 2", an unclosed quote swallowed every later row in silence, and a JSON
    null or list label became a class named 'None' or '[1]'."""
    path = tmp_path / name
    path.write_bytes(content)
    out = tmp_path / "out"
    assert main(["tlm", "texts", "--task", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_huge_field_and_numeric_labels_are_read(tmp_path):
    """Before: a field over 128 KiB (a long document in one cell) was `_csv.Error: field larger than field
    limit` with a traceback. And in JSONL `1` and `1.0` are one class, as a spreadsheet export writes it."""
    huge = tmp_path / "huge.tsv"
    huge.write_text("word " * 60_000 + "\tA\nshort text\tB\n", encoding="utf-8")
    examples = read_task_file(huge)
    assert [e.label for e in examples] == ["A", "B"] and len(examples[0].text) == 5 * 60_000 - 1
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"text": "a", "label": 1}\n{"text": null, "label": 1.0}\n{"text": "c", "label": "2"}\n')
    examples = read_task_file(mixed)
    assert [e.label for e in examples] == ["1", "1", "2"] and examples[1].text == ""


def _train_argv(data: Path, out: Path, *extra: str) -> list[str]:
    argv = ["tlm", "train", "--task-train", str(data / "train.tsv"), "--task-dev", str(data / "dev.tsv")]
    argv += ["--task-test", str(data / "test.tsv"), "--objective", "none", "--out", str(out)]
    argv += ["--steps", "2", "--batch-size", "8", "--finetune-epochs", "1", "--no-progress"]
    for item in SMALL:
        argv += ["--set", item]
    return [*argv, *extra]


def test_tlm_train_leaves_a_users_files_in_output_alone(data, tmp_path, capsys):
    """Before: only results.json, model/, stage1/ and stage2/ were checked, so a user's config.json, run.json or
    tokenizer/ in --out was replaced in silence by the run's own."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"mine": 1}\n')
    (out / "tokenizer").mkdir()
    (out / "tokenizer" / "vocab.txt").write_text("hello\n")
    for extra in (
        (),
        ("--overwrite",),
    ):  # no run.json shows a run wrote them: --overwrite is no way out either
        assert main(_train_argv(data, out, *extra)) == 2
        err = capsys.readouterr().err
        assert "mine holds config.json, tokenizer, but no run.json" in err
        assert "they are not replaced, even with --overwrite" in err
    assert (out / "config.json").read_text() == '{"mine": 1}\n'
    assert sorted(p.name for p in out.rglob("*")) == ["config.json", "tokenizer", "vocab.txt"]


def test_resume_of_a_finished_run_changes_nothing(data, tmp_path, capsys, monkeypatch):
    """Before: `tlm train --resume` (and `tartan --resume`) of a finished run kept without checkpoints trained
    both stages again from their first step and rewrote results.json; now it says the run is finished, prints
    the saved results and touches nothing. Other settings are still refused, and --resume with --overwrite."""
    out = tmp_path / "run"
    assert main(_train_argv(data, out)) == 0
    capsys.readouterr()
    results = out / "results.json"
    before = (results.read_bytes(), results.stat().st_mtime_ns)

    def no_training(settings):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(train_module, "train_joint", no_training)
    assert main(_train_argv(data, out, "--resume")) == 0
    captured = capsys.readouterr()
    assert "already finished" in captured.err and "nothing to do" in captured.err
    assert json.loads(captured.out)["test"] == json.loads(before[0])["test"]
    assert (results.read_bytes(), results.stat().st_mtime_ns) == before
    assert main(_train_argv(data, out, "--resume", "--steps", "3")) == 2
    assert "differs from this run in steps (saved 2, now 3)" in capsys.readouterr().err
    assert main(_train_argv(data, out, "--resume", "--overwrite")) == 2
    assert "give one of them" in capsys.readouterr().err
    assert (results.read_bytes(), results.stat().st_mtime_ns) == before


def _retrieve_argv(data: Path, out: Path, *extra: str) -> list[str]:
    argv = ["tlm", "retrieve", "--corpus", str(data / "corpus"), "--task-train", str(data / "train.tsv")]
    return [*argv, "--top-k", "3", "--out", str(out), "--no-progress", *extra]


def test_retrieve_leaves_a_users_summary_alone_and_refuses_iss_flags_under_bm25(data, tmp_path, capsys):
    """Before: only OUT/corpus was checked, so a summary.json or retrieved.jsonl of the user's in --out was
    replaced without --overwrite; and --task-dev, --init-from, --vocab or --set with --select bm25 were ignored
    without a word."""
    out = tmp_path / "ret"
    out.mkdir()
    (out / "summary.json").write_text("my summary\n")
    assert main(_retrieve_argv(data, out)) == 2
    assert "ret/summary.json already exists; pass --overwrite" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
    assert (out / "summary.json").read_text() == "my summary\n"
    other = tmp_path / "other"
    assert main(_retrieve_argv(data, other, "--task-dev", str(data / "dev.tsv"))) == 2
    assert "--task-dev is for the ISS reference model, which --select bm25 does not train" in (
        capsys.readouterr().err
    )
    assert not other.exists()


def _iss_argv(data: Path, out: Path, dev: Path, *extra: str) -> list[str]:
    argv = _retrieve_argv(data, out, "--select", "iss", "--select-size", "4", "--task-dev", str(dev))
    return [*argv, "--reference-steps", "1", *extra]


def test_iss_mistakes_are_refused_before_the_index_is_built(data, start_dir, tmp_path, capsys, monkeypatch):
    """Before: a missing or damaged --init-from, a dev label train lacks, a --vocab other than --init-from's and
    --objective none were each found after the BM25 index was built (an hour on a real corpus), the last one after
    the reference run too. Now each is one line and OUT is not even created."""
    import electra.tlm.indexing as indexing

    def no_index(*args, **kwargs):
        raise AssertionError("the index was built before the refusal")

    monkeypatch.setattr(indexing, "load_or_build_index", no_index)
    damaged = tmp_path / "damaged"
    shutil.copytree(start_dir, damaged)
    weights = damaged / "discriminator" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    unseen = tmp_path / "unseen.tsv"
    unseen.write_text("stocks and weather\tweather\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    dev = data / "dev.tsv"
    cases = [
        (dev, ["--init-from", str(tmp_path / "nope")], "nope: not a directory"),
        (dev, ["--init-from", str(damaged)], "model.safetensors: not a readable safetensors file"),
        (unseen, ["--init-from", str(start_dir)], "label 'weather', which the training file never uses"),
        (
            dev,
            ["--init-from", str(start_dir), "--vocab", str(vocab)],
            "differs from the vocabulary of --init-from",
        ),
        (
            dev,
            ["--init-from", str(start_dir), "--objective", "none"],
            "ISS needs a reference model with an LM",
        ),
    ]
    for number, (split, extra, message) in enumerate(cases):
        out = tmp_path / f"out{number}"
        assert main(_iss_argv(data, out, split, *extra)) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (extra, err)
        assert not out.exists(), extra


def _tartan_argv(data: Path, start: Path, out: Path, *extra: str) -> list[str]:
    argv = ["tartan", "--init-from", str(start), "--task-train", str(data / "train.tsv")]
    argv += ["--task-dev", str(data / "dev.tsv"), "--task-test", str(data / "test.tsv")]
    return [*argv, "--out", str(out), "--steps", "2", "--batch-size", "8", "--no-progress", *extra]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--meta-lr", "0.5"], "--meta-lr is for --weighting meta; add --weighting meta or drop --meta-lr."),
        (["--meta-head-steps", "3"], "--meta-head-steps is for --weighting meta"),
        (["--patience", "2", "--eval-every", "0"], "--patience counts dev evaluations, and --eval-every 0"),
        (["--aux", "tapt,dapt", "--dapt-corpus", "NOPE"], "--dapt-corpus NOPE: no such file or directory"),
    ],
)
def test_tartan_flags_that_would_be_ignored_are_refused(data, start_dir, tmp_path, capsys, extra, message):
    """Before: META-TARTAN's flags under --weighting uniform and --patience with --eval-every 0 were ignored in
    silence, and a missing path was named without the flag that gave it."""
    out = tmp_path / "run"
    assert main(_tartan_argv(data, start_dir, out, *extra)) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_task_reader_refuses_a_non_object_label_through_the_library(tmp_path):
    """The reader itself (used by `electra.tlm.settings.TLMSettings.read_split` from Python) raises the one-line error."""
    path = tmp_path / "bool.jsonl"
    path.write_text('{"text": "a", "label": true}\n')
    with pytest.raises(UserError, match="label field 'label' is true, not a class name"):
        read_task_file(path)
