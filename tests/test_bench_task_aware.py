"""`bench/task_aware.py` from a given encoder (`--encoder DIR`, issue 54): a micro BERT without a masked-LM head, as
all-MiniLM-L6-v2 is, and a task given by `--task-dir`. The shared base pretraining is skipped, every arm starts from
the encoder with its vocabulary, every arm gets the budget `--budget-epochs` names, and the report tests each TARTAN
arm against TAPT."""

from __future__ import annotations

import json
import math
import sys

import pytest
from transformers import BertModel

from electra.core.errors import UserError
from electra.tlm.budget import finetune_epoch_flops
from electra.tlm.settings import TLMSettings
from electra.tlm.tasks import TaskExample, write_jsonl

from .conftest import SAMPLE_TEXT
from .test_benches import _bench
from .test_continued_bert import bert_tokenizer, save_bert


def _sibling(name: str):
    """A module `bench/task_aware.py` imports (bench/<name>.py), as it imported it."""
    _bench("task_aware")
    return sys.modules[f"bench.{name}"]


def _task(folder):
    """A three-class task: each sentence of SAMPLE_TEXT labelled by its paragraph (train, dev and test alike)."""
    paragraphs = [p.split(". ") for p in SAMPLE_TEXT.strip().split("\n\n")]
    examples = [TaskExample(s, f"p{i}") for i, p in enumerate(paragraphs) for s in p]
    folder.mkdir()
    write_jsonl(examples * 2, folder / "train.jsonl")
    write_jsonl(examples, folder / "dev.jsonl")
    write_jsonl(examples, folder / "test.jsonl")
    return folder


def test_arm_names_parse_into_what_they_train():
    arms = _sibling("task_aware_arms")
    tapt = arms.parse_arm("tapt_mlm_ft")
    assert (tapt.kind, tapt.objective, tapt.corpora) == ("continued", "mlm", ("tapt",))
    assert arms.parse_arm("dapt_tapt_ft").corpora == ("dapt", "tapt")
    meta = arms.parse_arm("meta_electra_tapt_balanced")
    assert (meta.kind, meta.weighting, meta.corpora, meta.balanced) == ("tartan", "meta", ("tapt",), True)
    assert arms.parse_arm("mt_mlm").corpora == ("tapt", "dapt") and arms.parse_arm("mt_mlm").needs_dapt
    assert all(arms.parse_arm(name).name == name for name in arms.ARMS)
    for wrong in ("tapt", "ft_tapt", "mt_electra_dapt", "tapt_tapt_ft", "meta"):
        with pytest.raises(UserError, match="unknown arm"):
            arms.parse_arm(wrong)


def test_every_arm_starts_from_the_encoder_at_the_same_budget(tmp_path, sample_tokenizer):
    encoder = save_bert(BertModel, bert_tokenizer(sample_tokenizer), tmp_path / "bert")  # no masked-LM head
    task = _task(tmp_path / "task")
    work = tmp_path / "work"
    argv = ["--encoder", str(encoder), "--task-dir", "para", "accuracy", str(task), "--work", str(work)]
    argv += ["--arms", "ft,tapt_mlm_ft,mt_electra_tapt,meta_mlm_tapt", "--seeds", "2", "--budget-epochs", "6"]
    argv += ["--batch-size", "4", "--pretrain-batch-size", "2", "--eval-every", "3", "--max-seq-length", "32"]
    argv += ["--learning-rate", "1e-3", "--pretrain-learning-rate", "1e-4"]
    assert _bench("task_aware").main(argv) == 0

    assert (
        not (work / "base").exists() and not (work / "general").exists()
    )  # no shared pretraining, no corpus
    runs = {
        p.parent.parent.name + p.parent.name[4:]: json.loads(p.read_text())
        for p in work.glob("para/*/seed*/arm.json")
    }
    assert len(runs) == 8
    settings = TLMSettings(
        task_train=str(work / "para/data/train.jsonl"),
        task_dev=str(work / "para/data/dev.jsonl"),
        task_test=str(work / "para/data/test.jsonl"),
        out="",
        init_from=str(encoder),
        size="tiny",
        batch_size=4,
        overrides={"max_seq_length": 32},
    )
    budget = 6 * finetune_epoch_flops(settings)
    for name, run in runs.items():
        assert run["budget"] == pytest.approx(budget)
        assert run["total_flops"] <= 1.5 * budget, name  # the last step may pass the budget, not much more
    assert runs["ft0"]["init_from"] == str(encoder) == runs["meta_mlm_tapt1"]["init_from"]
    assert (
        runs["tapt_mlm_ft0"]["init_from"].endswith("continued_tapt")
        and runs["tapt_mlm_ft0"]["pretrain_flops"] > 0
    )
    # six epochs of 6 batches of fine-tuning alone: the ft arm's steps (the meter's estimate over sample batches)
    assert math.isclose(runs["ft0"]["stage1_steps"], 6 * 6, rel_tol=0.2)
    vocabulary = json.loads((work / "para/ft/seed0/task/tokenizer/tokenizer.json").read_text())["model"][
        "vocab"
    ]
    assert vocabulary == json.loads((encoder / "tokenizer.json").read_text())["model"]["vocab"]

    report = (work / "results.md").read_text()
    assert "vs TAPT (MLM) → fine-tune: Δ median, U, p" in report
    assert "META-TARTAN, MLM aux on TAPT |" in report and "U=" in report and "p=" in report
    assert (work / "task-aware.png").is_file() and (work / "meta-weights.png").is_file()
    again = _bench("task_aware").main([*argv, "--report-only"])  # finished arms are read back, not trained
    assert again == 0 and (work / "results.md").read_text() == report


def test_mann_whitney_is_two_sided_and_needs_two_seeds_a_side():
    report = _sibling("task_aware_report")
    assert report.mann_whitney([0.1], [0.2, 0.3]) is None
    u, p = report.mann_whitney([0.5, 0.6, 0.7], [0.1, 0.2, 0.3])
    assert u == 9 and p == pytest.approx(0.1)  # exact: 2 of the 20 orderings are as extreme
