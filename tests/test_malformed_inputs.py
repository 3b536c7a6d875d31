"""Every malformed input tried, with the one line it gets (README, "Reliability", prints this table):

    python -m tests.test_malformed_inputs      # the table, as markdown

Each case runs the real command and must exit 2 with exactly one line on stderr, naming the file or flag and the
fix, and no traceback.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from electra.app.cli import main
from tests.conftest import MICRO, SAMPLE_TEXT

Case = tuple[str, Callable[[Path], list[str]], str]
MICRO_FLAGS = [f"--set={k}={v}" for k, v in {**MICRO, "max_steps": 2, "save_every": 2}.items()]


def _corpus(root: Path) -> Path:
    directory = root / "corpus"
    directory.mkdir(exist_ok=True)
    for i in range(6):
        (directory / f"doc{i}.txt").write_text(SAMPLE_TEXT * 4)
    return directory


def _write(root: Path, name: str, content: str | bytes) -> Path:
    path = root / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return path


def _pretrain(root: Path, *extra: str) -> list[str]:
    return [
        "pretrain",
        "--output",
        str(root / "run"),
        "--cache-dir",
        str(root / "cache"),
        "--no-plot",
        *extra,
    ]


def _finished_run(root: Path) -> list[str]:
    argv = _pretrain(root, "--corpus", str(_corpus(root)), *MICRO_FLAGS)
    assert main(argv) == 0
    return argv


CASES: list[Case] = [
    (
        "corpus path that does not exist",
        lambda r: _pretrain(r, "--corpus", str(r / "nope")),
        "does not exist",
    ),
    ("empty corpus file", lambda r: _pretrain(r, "--corpus", str(_write(r, "e.txt", "\n\n"))), "is empty"),
    (
        "binary file as corpus",
        lambda r: _pretrain(r, "--corpus", str(_write(r, "b.txt", bytes(range(256)) * 50))),
        "undecodable bytes",
    ),
    (
        "UTF-16 corpus with --strict-utf8",
        lambda r: _pretrain(
            r, "--strict-utf8", "--corpus", str(_write(r, "u.txt", "hi there".encode("utf-16")))
        ),
        "UTF-16 text",
    ),
    (
        "corpus in UTF-16 without a byte-order mark (valid UTF-8, half NUL bytes)",
        lambda r: _pretrain(r, "--corpus", str(_write(r, "u.txt", (SAMPLE_TEXT * 4).encode("utf-16-le")))),
        "UTF-16 text without a byte-order mark",
    ),
    ("pretrain --seed -1", lambda r: _pretrain(r, "--seed", "-1"), "seed must be in 0..4294967295"),
    ("pretrain --num-proc 0", lambda r: _pretrain(r, "--num-proc", "0"), "--num-proc must be at least 1"),
    (
        "vocabulary without [MASK]",
        lambda r: _pretrain(
            r, "--corpus", str(_corpus(r)), "--vocab", str(_write(r, "v.txt", "[PAD]\n[UNK]\n"))
        ),
        "lacks",
    ),
    ("unknown config key", lambda r: _pretrain(r, "--set", "hiden_size=3"), "unknown config key"),
    (
        "JSON config value of the wrong type",
        lambda r: _pretrain(r, "--config", str(_write(r, "c.json", json.dumps({"num_hidden_layers": 2.5})))),
        "is not a whole number",
    ),
    ("--set max_steps=5e-1", lambda r: _pretrain(r, "--set", "max_steps=5e-1"), "is not a whole number"),
    (
        "a flag and --set naming one field (the flag won, the --set value went unchecked)",
        lambda r: _pretrain(r, "--max-steps", "2", "--set", "max_steps=5e-1"),
        "--max-steps and --set max_steps=5e-1 both set max_steps; give one of them.",
    ),
    ("--save-every 0", lambda r: _pretrain(r, "--save-every", "0"), "save_every must be at least 1"),
    (
        "--set max_grad_norm=-1 (clipping would flip every gradient)",
        lambda r: _pretrain(r, "--corpus", str(_corpus(r)), *MICRO_FLAGS, "--set", "max_grad_norm=-1"),
        "max_grad_norm must be at least 0",
    ),
    (
        "--set generator_hidden_multiplier=inf",
        lambda r: _pretrain(r, "--set", "generator_hidden_multiplier=inf"),
        "is not a finite number",
    ),
    ("unknown objective", lambda r: _pretrain(r, "--set", "objective=xlnet"), "is not one of electra"),
    (
        "output directory holding other files",
        lambda r: _pretrain(r, "--corpus", str(_corpus(r)), "--output", str(_write(r, "x", "").parent)),
        "is not empty",
    ),
    ("output directory holding a finished run", _finished_run, "already holds a run"),
    (
        "--resume on another corpus",
        lambda r: [
            *_finished_run(r)[:-1],
            "--corpus",
            str(_write(r, "other.txt", "Other text here. " * 50)),
            "--resume",
        ],
        "is not the one",
    ),
    (
        "--resume with no checkpoint",
        lambda r: _pretrain(r, "--corpus", str(_corpus(r)), "--resume"),
        "no complete checkpoint",
    ),
    (
        "GLUE task file missing",
        lambda r: ["glue", "--model", str(_pickled(r)), "--task", "qnli", "--data-dir", str(r)],
        "file not found",
    ),
    (
        "GLUE --model naming a GLUE output (its models are in checkpoints/TASK)",
        lambda r: ["glue", "--model", str(_glue_output(r)), "--task", "sst2", "--data-dir", str(r)],
        "is an `electra glue` output, not a model",
    ),
    (
        "--init-from naming a GLUE output",
        lambda r: ["pretrain", "--init-from", str(_glue_output(r)), "--output", str(r / "run")],
        "is an `electra glue` output, not a model",
    ),
    (
        "SQuAD --model naming a pretraining run that was never exported",
        lambda r: [
            "squad",
            "--model",
            str(_unexported(r)),
            "--eval",
            str(_squad_file(r)),
            "--output",
            str(r / "o"),
        ],
        "a pretraining run of this library with no export yet",
    ),
    (
        "score --model naming a pretraining run that was never exported",
        lambda r: [
            "score",
            "--model",
            str(_unexported(r)),
            "--input",
            str(_write(r, "s.txt", "a sentence\n")),
        ],
        "a pretraining run of this library with no export yet",
    ),
    (
        "GLUE --max-seq-length 2 on a sentence-pair task",
        lambda r: ["glue", "--model", "m", "--task", "stsb", "--max-seq-length", "2"],
        "leaves no room for text",
    ),
    (
        "GLUE --seed -1",
        lambda r: ["glue", "--model", "m", "--task", "sst2", "--seed", "-1"],
        "seed -1 must be in 0..4294967295",
    ),
    (
        "checkpoint with pickled weights only",
        lambda r: ["glue", "--model", str(_pickled(r)), "--task", "sst2", "--data-dir", str(_sst2(r))],
        "no .safetensors weights",
    ),
    (
        "checkpoint whose weights were cut short (a copy interrupted)",
        lambda r: ["glue", "--model", str(_cut_short(r)), "--task", "sst2", "--data-dir", str(_sst2(r))],
        "its safetensors weights cannot be read",
    ),
    (
        "--init-from a checkpoint whose weights were cut short",
        lambda r: _pretrain(r, "--init-from", str(_cut_short(r)), "--corpus", str(_corpus(r))),
        "not a readable safetensors file",
    ),
    (
        "STS-B score outside 0-5 (a typo)",
        lambda r: ["glue", "--model", str(_cut_short(r)), "--task", "stsb", "--data-dir", str(_stsb(r))],
        "is outside 0-5",
    ),
    (
        "--init-from a checkpoint with pickled weights only",
        lambda r: _pretrain(r, "--init-from", str(_pickled(r)), "--corpus", str(_corpus(r))),
        "no .safetensors weights",
    ),
    (
        "glue: a tokenizer with more pieces than the model's embeddings",
        lambda r: ["glue", "--model", str(_outgrown(r)), "--task", "sst2", "--data-dir", str(_sst2(r))],
        "its tokenizer has 10 pieces but the model's embeddings only 5 rows",
    ),
    (
        "score: a tokenizer with more pieces than the model's embeddings",
        lambda r: ["score", "--model", str(_outgrown(r)), "--input", str(_write(r, "s.txt", "good film\n"))],
        "its tokenizer has 10 pieces but the model's embeddings only 5 rows",
    ),
    (
        "checkpoint without a tokenizer (transformers would make an empty one)",
        lambda r: ["glue", "--model", str(_untokenized(r)), "--task", "sst2", "--data-dir", str(_sst2(r))],
        "holds no tokenizer",
    ),
    (
        "GLUE checkpoint whose config.json is damaged (a copy cut short)",
        lambda r: ["glue", "--model", str(_damaged_config(r)), "--task", "sst2", "--data-dir", str(_sst2(r))],
        "config.json: not valid JSON",
    ),
    (
        "SQuAD checkpoint whose config.json is damaged",
        lambda r: ["squad", "--model", str(_damaged_config(r)), "--eval", str(_squad(r))],
        "config.json: not valid JSON",
    ),
    (
        "SQuAD tokenizer given as a hub name",
        lambda r: [
            "squad",
            "--model",
            str(_pickled(r)),
            "--tokenizer",
            "bert-base-uncased",
            "--eval",
            str(_squad(r)),
            "--output",
            str(r / "s"),
        ],
        "not a local directory",
    ),
    (
        "n-best list with an empty hypothesis list",
        lambda r: [
            "rescore",
            "--model",
            str(r),
            "--dev",
            str(_write(r, "dev.json", '[{"id": "u9", "ref": "a", "hyps": []}]')),
        ],
        "empty hypothesis list",
    ),
    (
        "n-best list with an utterance id given twice",
        lambda r: [
            "rescore",
            "--model",
            str(r),
            "--dev",
            str(_write(r, "dev.json", '{"u1": {"hyp_1": {"text": "a", "score": 0}}, "u1": {}}')),
        ],
        "key 'u1' appears twice in one JSON object",
    ),
    (
        "score input with old Mac line breaks (carriage returns alone)",
        lambda r: ["score", "--model", str(r), "--input", str(_write(r, "mac.txt", b"the cat\ra dog\r"))],
        "a carriage return inside the line",
    ),
    (
        "score input that does not exist",
        lambda r: ["score", "--model", str(r), "--input", str(r / "none.txt")],
        "does not exist",
    ),
    (
        "score input that is a folder",
        lambda r: ["score", "--model", str(r), "--input", str(r)],
        "is a directory; give the path of the input file, not a folder",
    ),
    (
        "score --output naming its own --input, even with --overwrite",
        lambda r: [
            "score",
            "--model",
            str(r),
            "--input",
            str(_write(r, "in.txt", "the cat sat\n")),
            "--output",
            str(r / "in.txt"),
            "--overwrite",
        ],
        "is the --input file, which this command reads; it is never replaced",
    ),
    (
        "score input in UTF-16 without a byte-order mark",
        lambda r: [
            "score",
            "--model",
            str(r),
            "--input",
            str(_write(r, "u.txt", "the cat\n".encode("utf-16-le"))),
        ],
        "UTF-16 text without a byte-order mark",
    ),
    (
        "TLM task file in Latin-1",
        lambda r: [
            "tlm",
            "texts",
            "--task",
            str(_write(r, "l.tsv", "caf\xe9\t1\n".encode("latin-1"))),
            "--out",
            str(r / "o"),
        ],
        "not UTF-8 text",
    ),
    (
        "TLM CSV with an unclosed quote",
        lambda r: [
            "tlm",
            "texts",
            "--task",
            str(_write(r, "q.csv", 'text,label\n"open,1\nmore,2\n')),
            "--out",
            str(r / "o"),
        ],
        "not valid CSV",
    ),
    (
        "tartan --meta-lr without --weighting meta",
        lambda r: [
            "tartan",
            "--init-from",
            str(r),
            "--meta-lr",
            "0.5",
            "--task-train",
            "t",
            "--task-dev",
            "d",
            "--task-test",
            "e",
        ],
        "--meta-lr is for --weighting meta",
    ),
    (
        "rescore --lambdas nan,inf",
        lambda r: ["rescore", "--model", str(r), "--dev", str(r / "dev.json"), "--lambdas", "nan,inf"],
        "every λ must be a finite number",
    ),
    (
        "SQuAD training file that is a folder",
        lambda r: ["squad", "--model", str(_pickled(r)), "--train", str(r), "--output", str(r / "s")],
        "is a directory; give the path of the SQuAD JSON file",
    ),
    (
        "SQuAD file cut short (a download interrupted)",
        lambda r: [
            "squad",
            "--model",
            str(_pickled(r)),
            "--train",
            str(_write(r, "cut.json", '{"version": "1.1", "data": [{"title": "t", "paragraphs": [')),
            "--output",
            str(r / "s"),
        ],
        "the file was cut short",
    ),
    (
        "SQuAD --batch-size 0",
        lambda r: [
            "squad",
            "--model",
            str(r),
            "--train",
            str(_squad(r)),
            "--output",
            str(r / "s"),
            "--batch-size",
            "0",
        ],
        "batch_size must be at least 1",
    ),
    (
        "TLM task file that is a folder",
        lambda r: [
            "tlm",
            "train",
            "--task-train",
            str(r),
            "--task-dev",
            str(r),
            "--task-test",
            str(r),
            "--retrieved",
            str(_corpus(r)),
            "--out",
            str(r / "t"),
        ],
        "is a directory; give the path of the task file",
    ),
    (
        "results.json of an earlier run in --output",
        lambda r: [
            "glue",
            "--model",
            "m",
            "--task",
            "sst2",
            "--output",
            str(_write(r, "results.json", "{}").parent),
        ],
        "already exists",
    ),
]


def _pickled(root: Path) -> Path:
    import torch

    directory = root / "pickled"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(
        json.dumps({"model_type": "electra", "architectures": ["ElectraModel"]})
    )
    torch.save({"w": torch.zeros(1)}, directory / "pytorch_model.bin")
    return directory


def _glue_output(root: Path) -> Path:
    """What `electra glue --output tuned --save-best` leaves: its run.json, and the model it saved."""
    directory = root / "tuned"
    (directory / "checkpoints").mkdir(parents=True, exist_ok=True)
    (directory / "run.json").write_text(json.dumps({"command": "glue", "model": "m"}))
    shutil.copytree(_pickled(root), directory / "checkpoints" / "sst2", dirs_exist_ok=True)
    return directory


def _squad_file(root: Path) -> Path:
    qa = {"id": "q1", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]}
    paragraph = {"context": "Denver won the game.", "qas": [qa]}
    return _write(
        root, "dev.json", json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [paragraph]}]})
    )


def _unexported(root: Path) -> Path:
    """A pretraining run stopped before its end: its run.json and its own config.json, no export.json."""
    directory = root / "unexported"
    directory.mkdir(exist_ok=True)
    (directory / "run.json").write_text(json.dumps({"corpus": str(root / "corpus.txt"), "world_size": 1}))
    (directory / "config.json").write_text(json.dumps({"hidden_size": 64, "objective": "electra"}))
    return directory


def _untokenized(root: Path) -> Path:
    """A checkpoint saved without its tokenizer: config.json and safetensors weights only."""
    import torch
    from safetensors.torch import save_file

    directory = root / "untokenized"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(
        json.dumps({"model_type": "electra", "architectures": ["ElectraModel"]})
    )
    save_file({"w": torch.zeros(1)}, str(directory / "model.safetensors"))
    return directory


def _damaged_config(root: Path) -> Path:
    """A checkpoint whose config.json was cut short in copying (transformers' OSError traceback, once GLUE's data
    had been read)."""
    directory = root / "damaged-config"
    shutil.copytree(_untokenized(root), directory, dirs_exist_ok=True)
    (directory / "config.json").write_text('{"model_type": "electra", "hidden_')
    return directory


def _outgrown(root: Path) -> Path:
    """A masked LM of 5 embedding rows beside a 10-piece tokenizer: ids past its last row (an IndexError deep in
    the first forward, once the data was read)."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraTokenizerFast

    directory = root / "outgrown"
    shape = dict(
        embedding_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    ElectraForMaskedLM(ElectraConfig(vocab_size=5, **shape)).save_pretrained(str(directory))
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film", "a", "the"]
    ElectraTokenizerFast(vocab={w: i for i, w in enumerate(pieces)}).save_pretrained(str(directory))
    return directory


def _cut_short(root: Path) -> Path:
    """A checkpoint with its tokenizer whose model.safetensors lost its second half."""
    directory = root / "cut-short"
    shutil.copytree(_untokenized(root), directory)
    (directory / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]) + "\n"
    )
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return directory


def _squad(root: Path) -> Path:
    """A sound one-question SQuAD 1.1 file (the data is read before the tokenizer)."""
    qa = {"id": "q", "question": "what?", "answers": [{"text": "cat", "answer_start": 2}]}
    data = [{"title": "t", "paragraphs": [{"context": "a cat", "qas": [qa]}]}]
    return _write(root, "squad.json", json.dumps({"version": "1.1", "data": data}))


def _stsb(root: Path) -> Path:
    data = root / "glue"
    (data / "STS-B").mkdir(parents=True, exist_ok=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    for split in ("train", "dev"):
        (data / "STS-B" / f"{split}.tsv").write_text(header + "0\tg\tf\t2012\t0\ts\ts\tA cat.\tA dog.\t35\n")
    return data


def _sst2(root: Path) -> Path:
    data = root / "glue"
    (data / "SST-2").mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        (data / "SST-2" / f"{split}.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    return data


def one_line_error(argv: list[str], capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("electra ")]
    assert code == 2, err
    assert len(errors) == 1 and not any("Traceback" in line for line in err), err
    return errors[0]


@pytest.mark.parametrize("label, make_argv, fragment", CASES, ids=[case[0] for case in CASES])
def test_malformed_input_gets_one_line(label, make_argv, fragment, tmp_path, capsys):
    argv = make_argv(tmp_path)
    capsys.readouterr()
    assert fragment in one_line_error(argv, capsys)


def table() -> str:
    """The README's table: each malformed input and the line the command answers with."""

    class Capture:
        def readouterr(self):
            from types import SimpleNamespace

            value = sys.stderr.getvalue()
            sys.stderr.truncate(0)
            sys.stderr.seek(0)
            return SimpleNamespace(err=value, out="")

    import io

    rows = ["| input | the command's answer (stderr, exit 2) |", "|---|---|"]
    for label, make_argv, _ in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            real = sys.stderr
            sys.stderr = io.StringIO()
            try:
                argv = make_argv(root)
                sys.stderr.truncate(0)
                sys.stderr.seek(0)
                line = one_line_error(argv, Capture())
            finally:
                sys.stderr = real
            rows.append(f"| {label} | `` {line.replace(tmp, 'TMP')} `` |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
