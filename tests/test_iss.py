"""ISS selection: influence equals a brute-force dot product of per-batch gradients, the round-robin selection by
hand, and `tlm retrieve --select iss` end to end (corpus, provenance, timing) with its refusals."""

# ruff: noqa: F811  (pytest fixtures imported from test_tlm_train / test_tartan are parameters here)
from __future__ import annotations

import json
from pathlib import Path

import torch

from electra.app.cli import main
from electra.core.config_files import parse_overrides
from electra.data.tokenization import load_or_train_tokenizer
from electra.objectives import build_config
from electra.tlm.iss import iss_select, layer_parameters, select_batches
from electra.tlm.model import build_models
from electra.tlm.task_data import encode_task
from electra.tlm.tasks import LabelVocab, read_task_file

from .test_tartan import start_dir  # noqa: F401  (shared fixture)
from .test_tlm_train import SMALL, _cache, data, retrieved  # noqa: F401  (shared fixtures)


def test_round_robin_selection_by_hand():
    scores = torch.tensor([[3.0, 1.0, 2.0], [1.0, 5.0, 0.0]])
    # Round 0: row 0's best is batch 0, row 1's is batch 1; round 1: row 0's second is batch 2.
    assert select_batches(scores, [2, 2, 2], target=5) == [0, 1, 2]
    assert select_batches(scores, [2, 2, 2], target=3) == [0, 1]
    assert select_batches(scores, [2, 2, 2], target=100) == [0, 1, 2]  # all there is
    # A batch both rows rank first is taken once; the next round moves on.
    assert select_batches(torch.tensor([[9.0, 1.0, 0.0], [9.0, 0.0, 1.0]]), [1, 1, 1], target=2) == [0, 1]


def test_influence_is_the_dot_product_of_per_batch_gradients(data):
    tokenizer = load_or_train_tokenizer(None, data / "corpus", 300, True)
    config = build_config("tiny", overrides={**parse_overrides(SMALL), "objective": "electra"})
    examples = read_task_file(data / "dev.tsv")
    labels = LabelVocab.from_examples(examples, "dev")
    validation = encode_task(examples[:10], labels.encode(examples[:10], "dev"), tokenizer, 64)
    passages = (data / "corpus" / "general.txt").read_text().split("\n\n")[:22]
    encoded = tokenizer(passages, truncation=True, max_length=64)["input_ids"]
    candidates = [{"input_ids": ids, "token_type_ids": [0] * len(ids)} for ids in encoded]
    torch.manual_seed(0)
    model = build_models(config, tokenizer, labels, "electra")
    selection = iss_select(
        model,
        candidates,
        validation,
        target=9,
        pad_token_id=tokenizer.pad_token_id,
        batch_size=4,
        seed=3,
        progress=False,
    )
    assert selection.scores.shape == (3, 6)  # 10 dev rows and 22 passages in batches of 4

    from electra.tlm.task_data import TaskCollator

    last_layer = layer_parameters(model.classifier.electra, -1)
    assert all(p is q for p, q in zip(last_layer, model.classifier.electra.encoder.layer[-1].parameters()))

    def brute_gradient() -> torch.Tensor:
        vector = torch.cat([p.grad.reshape(-1).clone() for p in last_layer])
        model.zero_grad()
        return vector

    collate = TaskCollator(tokenizer.pad_token_id)
    model.eval()
    task = []
    for start in range(0, 10, 4):
        loss, _ = model.task_loss(collate(validation[start : start + 4]))
        loss.backward()
        task.append(brute_gradient())
    lm = []
    for number, start in enumerate(range(0, 22, 4)):
        rows = [dict(c, label=0) for c in candidates[start : start + 4]]
        batch = collate(rows)
        torch.manual_seed(3 + number)
        model.lm(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).loss.backward()
        lm.append(brute_gradient())
    expected = torch.tensor([[float(t @ g) for g in lm] for t in task])
    torch.testing.assert_close(selection.scores, expected, rtol=1e-4, atol=1e-7)
    assert len(selection.passages) == 9 and len(set(selection.passages)) == 9
    first_batches = {int(i) for i in selection.scores.argmax(dim=1)}
    assert all(any(p in selection.batches[b] for p in selection.passages) for b in first_batches)


def _retrieve(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "tlm", "retrieve", "--corpus", str(data / "corpus"), "--task-train", str(data / "train.tsv"),
        "--out", str(out), "--index", str(data / "retrieved" / "index"), "--no-progress", *extra,
    ]  # fmt: skip


def test_retrieve_select_iss_writes_an_equal_size_corpus(data, retrieved, start_dir, tmp_path):
    iss = ["--select", "iss", "--select-size", "20", "--top-k", "4", "--task-dev", str(data / "dev.tsv")]
    iss += ["--init-from", str(start_dir), "--reference-steps", "3", "--iss-batch-size", "4"]
    assert main(_retrieve(data, tmp_path / "iss", *iss)) == 0
    assert main(_retrieve(data, tmp_path / "bm25", "--top-k", "4", "--select-size", "20")) == 0
    for name in ("iss", "bm25"):
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["select"] == name and summary["retrieved_passages"] == 20
        assert summary["selection_seconds"] > 0
        text = (tmp_path / name / "corpus" / "retrieved.txt").read_text()
        assert len([p for p in text.split("\n\n") if p.strip()]) == 20
    summary = json.loads((tmp_path / "iss" / "summary.json").read_text())
    assert summary["candidates"] > 20 and summary["reference_seconds"] > 0
    records = [json.loads(line) for line in (tmp_path / "iss" / "retrieved.jsonl").read_text().splitlines()]
    assert len(records) == 20 and all("influence" in r for r in records)
    assert (tmp_path / "iss" / "reference" / "results.json").is_file()  # the reference model's own run


def test_iss_refusals_are_one_line(data, retrieved, start_dir, tmp_path, capsys):
    def refused(argv: list[str], needle: str) -> None:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err

    refused(_retrieve(data, tmp_path / "a", "--select", "iss", "--select-size", "5"), "--task-dev")
    iss = [
        "--select",
        "iss",
        "--top-k",
        "1",
        "--task-dev",
        str(data / "dev.tsv"),
        "--init-from",
        str(start_dir),
    ]
    refused(_retrieve(data, tmp_path / "b", *iss, "--select-size", "100000"), "raise --top-k")
    refused(_retrieve(data, tmp_path / "c", "--select-size", "0"), "at least 1")
    # A layer the model lacks is refused before the reference run (before: after it, an hour on a real corpus).
    iss_layer = [*iss, "--select-size", "5", "--reference-steps", "1", "--iss-layer"]
    refused(_retrieve(data, tmp_path / "d", *iss_layer, "nosuchlayer"), "names no parameters")
    refused(_retrieve(data, tmp_path / "e", *iss_layer, "-9"), "--iss-layer -9 is out of range")
    assert not (tmp_path / "d" / "reference").exists() and not (tmp_path / "e" / "reference").exists()


def test_iss_counts_are_refused_before_any_work(data, retrieved, start_dir, tmp_path, capsys):
    """Before: `--reference-steps 0` meant "unset" and trained the reference for the size's max_steps (600 on
    tiny), and `--iss-batch-size 0` failed with a traceback once the reference was trained."""
    iss = ["--select", "iss", "--select-size", "5", "--top-k", "2", "--task-dev", str(data / "dev.tsv")]
    iss += ["--init-from", str(start_dir)]
    for flag in ("--reference-steps", "--iss-batch-size"):
        out = tmp_path / flag.strip("-")
        assert main(_retrieve(data, out, *iss, flag, "0")) == 2
        err = capsys.readouterr().err.strip()
        assert f"{flag} must be at least 1" in err and len(err.splitlines()) == 1, err
        assert not out.exists()
