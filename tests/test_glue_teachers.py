"""Teachers for multi-task distillation: written by `electra glue --save-train-logits`, read by example id, and
refused when they were made from other data (a tiny local model and GLUE-format files written here)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from electra.app.cli import main
from electra.core.errors import UserError
from electra.glue.model import GlueModel, load_encoder
from electra.glue.tasks import get_task
from electra.glue.teachers import Teacher, read_teacher, teacher_fingerprint
from tests.golden_trace import WORDS, export_word_model, write_stsb


def write_mrpc(directory: Path, seed: int = 0) -> Path:
    """An MRPC-format task: a pair is a paraphrase ("1") when it shares at least three of its five words."""
    rng = random.Random(seed)
    root = directory / "MRPC"
    root.mkdir(parents=True, exist_ok=True)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    for name, size in (("train.tsv", 96), ("dev.tsv", 40)):
        rows = [header]
        for i in range(size):
            first = rng.sample(WORDS, 5)
            shared = rng.randrange(6)
            second = first[:shared] + rng.sample([w for w in WORDS if w not in first], 5 - shared)
            rows.append(f"{int(shared >= 3)}\t{i}\t{i + 1000}\tthe {' '.join(first)}\tthe {' '.join(second)}")
        (root / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    test = ["index\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    test += [f"{i}\t{i}\t{i + 1}\tthe {WORDS[i]}\tthe {WORDS[i + 1]}" for i in range(5)]
    (root / "test.tsv").write_text("\n".join(test) + "\n", encoding="utf-8")
    return directory


def write_cola(directory: Path, seed: int = 0) -> Path:
    """A CoLA-format task (headerless train/dev): acceptable ("1") when "module" is among the words."""
    rng = random.Random(seed)
    root = directory / "CoLA"
    root.mkdir(parents=True, exist_ok=True)
    for name, size in (("train.tsv", 80), ("dev.tsv", 40)):
        rows = []
        for _ in range(size):
            words = rng.sample(WORDS, 4)
            rows.append(f"src\t{int('module' in words)}\t\tthe {' '.join(words)}")
        (root / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    test = ["index\tsentence", *(f"{i}\tthe {WORDS[i]} {WORDS[i + 2]}" for i in range(5))]
    (root / "test.tsv").write_text("\n".join(test) + "\n", encoding="utf-8")
    return directory


def write_glue(directory: Path) -> Path:
    """CoLA, MRPC and STS-B in the GLUE layout (STS-B with a test file)."""
    write_cola(directory)
    write_mrpc(directory)
    write_stsb(directory)
    rows = ["index\tsentence1\tsentence2", *(f"{i}\tthe {WORDS[i]}\tthe {WORDS[i + 1]}" for i in range(6))]
    (directory / "STS-B" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def micro(tmp_path_factory) -> tuple[Path, Path]:
    """(a one-layer ELECTRA export over a word vocabulary, GLUE-format data for CoLA, MRPC and STS-B)."""
    root = tmp_path_factory.mktemp("micro")
    export_word_model(root / "run")
    return root / "run", write_glue(root / "glue")


@pytest.fixture(scope="module")
def teachers(micro, tmp_path_factory) -> Path:
    """`electra glue --save-train-logits` on MRPC and STS-B (both trained on swapped pairs too), best model kept."""
    model, data = micro
    out = tmp_path_factory.mktemp("teachers") / "single"
    code = main(
        ["glue", "--model", str(model), "--task", "mrpc,stsb", "--data-dir", str(data), "--max-steps", "3",
         "--max-seq-length", "16", "--seeds", "2", "--save-train-logits", "--save-best", "--output", str(out),
         "--no-progress", "--report-to", "none"]
    )  # fmt: skip
    assert code == 0
    return out


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("electra glue: error: "), err
    return err


@pytest.mark.parametrize("task", ["mrpc", "stsb"])
def test_a_teacher_row_is_its_examples_output_swapped_pairs_included(teachers, micro, task):
    """Every row is the saved best model's output (dropout off) on the example its id names: a swapped pair's row
    is the output on (B, A), not on (A, B)."""
    _, data = micro
    record = json.loads((teachers / "teachers" / f"{task}.json").read_text())
    spec = get_task(task)
    model_dir = teachers / "checkpoints" / task
    assert record["seed"] == json.loads((model_dir / "config.json").read_text())["glue_head"]["seed"]
    rows = record["rows"]
    lines = (data / spec.directory / "train.tsv").read_text().splitlines()
    assert len(rows) == 2 * (len(lines) - 1)  # every pair in both orders
    model = GlueModel(load_encoder(model_dir), spec.num_labels, spec.name, spec.labels).eval()
    assert model.load_head_if_same_task(model_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    columns = {name: i for i, name in enumerate(lines[0].split("\t"))}
    for line in (2, 17, len(lines)):
        fields = lines[line - 1].split("\t")
        a, b = fields[columns[spec.text_a]], fields[columns[spec.text_b]]
        for guid, pair in ((f"train.tsv:{line}", (a, b)), (f"train.tsv:{line}:swapped", (b, a))):
            batch = tokenizer(*pair, truncation="longest_first", max_length=16, return_tensors="pt")
            with torch.no_grad():
                ours = model(**batch)[1].reshape(-1).numpy()
            np.testing.assert_allclose(np.asarray(rows[guid]).reshape(-1), ours, rtol=1e-4, atol=1e-5)
    assert rows[f"train.tsv:{2}"] != rows[f"train.tsv:{2}:swapped"]


def test_rows_are_read_by_id_in_any_order(teachers):
    teacher = Teacher(
        "mrpc", Path("x.json"), "logits", {"a": [1.0, 2.0], "b": [3.0, 4.0], "b:swapped": [5.0, 6.0]}
    )
    np.testing.assert_array_equal(teacher.outputs_for(["b:swapped", "a"]), [[5.0, 6.0], [1.0, 2.0]])
    with pytest.raises(UserError, match=r"x.json: no teacher output for 1 of the 2 mrpc .*first: c\)"):
        teacher.outputs_for(["a", "c"])


def test_a_student_refuses_a_teacher_made_from_another_training_file(teachers, micro, tmp_path, capsys):
    """One line naming the teacher file and the training file, with the fix; nothing is trained or written."""
    model, data = micro
    changed = tmp_path / "glue"
    write_glue(changed)
    lines = (changed / "MRPC" / "train.tsv").read_text().splitlines()
    lines[5] = "1" + lines[5][1:] if lines[5][0] == "0" else "0" + lines[5][1:]  # one label flipped
    (changed / "MRPC" / "train.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "student"
    code = main(
        ["glue", "--model", str(model), "--task", "mrpc,stsb", "--data-dir", str(changed), "--max-steps", "2",
         "--max-seq-length", "16", "--multitask", "--teachers", str(teachers), "--output", str(out),
         "--no-progress", "--report-to", "none"]
    )  # fmt: skip
    assert code != 0
    err = _one_line(capsys)
    assert str(teachers / "teachers" / "mrpc.json") in err and "MRPC/train.tsv" in err
    assert "make the teacher again: electra glue --task mrpc --save-train-logits" in err
    assert not (out / "results.json").exists() and not (out / "runs").exists()


def test_a_teacher_of_another_length_or_tokenizer_is_refused(teachers, micro):
    model, data = micro
    spec = get_task("stsb")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model / "discriminator"))
    path = teachers / "teachers" / "stsb.json"
    assert read_teacher(path, spec, teacher_fingerprint(spec, data, tokenizer, 16)).kind == "score"
    with pytest.raises(UserError, match="made at --max-seq-length 16, this run uses 32"):
        read_teacher(path, spec, teacher_fingerprint(spec, data, tokenizer, 32))
    fingerprint = teacher_fingerprint(spec, data, tokenizer, 16) | {"tokenizer_sha256": "0" * 64}
    with pytest.raises(UserError, match="made with another tokenizer"):
        read_teacher(path, spec, fingerprint)


def test_missing_teachers_and_lone_multitask_flags_are_one_line(teachers, micro, tmp_path, capsys):
    model, data = micro
    base = [
        "glue",
        "--model",
        str(model),
        "--data-dir",
        str(data),
        "--max-steps",
        "2",
        "--output",
        str(tmp_path / "o"),
    ]
    assert main([*base, "--task", "cola,mrpc", "--multitask", "--teachers", str(teachers)]) != 0
    assert "no teacher for cola; make one with `electra glue --task cola --save-train-logits" in _one_line(
        capsys
    )
    assert main([*base, "--task", "mrpc", "--fixed-lambda", "0"]) != 0
    assert "--fixed-lambda is a --multitask flag" in _one_line(capsys)
    assert main([*base, "--task", "mrpc,stsb", "--multitask", "--fixed-lambda", "0.5"]) != 0
    assert "give --teachers DIR too" in _one_line(capsys)
