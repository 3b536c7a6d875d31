"""End-to-end GLUE fine-tuning with a tiny randomly initialised ELECTRA saved locally (no hub access)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from electra.app.cli import main
from electra.core.errors import ElectraWarning, UserError
from electra.glue.finetune import glue_average, run_glue, summarise
from electra.glue.inputs import load_task_data
from electra.glue.model import GlueModel, load_encoder
from electra.glue.seed_run import SeedRun
from electra.glue.settings import FinetuneSettings
from electra.glue.tasks import get_task
from electra.training.optim import layerwise_lr_groups
from tests.test_glue_tasks import write_mnli, write_qqp  # GLUE-format writers


def _tokenizer(vocab: Path):
    from transformers import ElectraTokenizerFast

    tokenizer = ElectraTokenizerFast(vocab=str(vocab), do_lower_case=True)  # transformers 5
    if len(tokenizer) < 1000:  # transformers 4 names the argument vocab_file
        tokenizer = ElectraTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    assert len(tokenizer) == 30522
    return tokenizer


@pytest.fixture(scope="module")
def tiny_run(shared_data, tmp_path_factory) -> Path:
    """A pretraining run directory exported by our own core (random weights: the `tiny` size with 2 layers)."""
    from electra.objectives import build_config
    from electra.training.model import build_pretraining_model

    tokenizer = _tokenizer(shared_data / "bert_vocab" / "vocab.txt")
    torch.manual_seed(0)
    config = build_config("tiny", overrides={"num_hidden_layers": 2, "embedding_size": 64})
    run_dir = tmp_path_factory.mktemp("tiny_run")
    build_pretraining_model(config, tokenizer).export(run_dir, tokenizer)
    return run_dir


@pytest.fixture(scope="module")
def tiny_model(tiny_run) -> Path:
    """The exported discriminator: a plain Hugging Face ELECTRA checkpoint directory."""
    assert (tiny_run / "discriminator" / "config.json").is_file()
    return tiny_run / "discriminator"


def test_sst2_tiny_random_model_beats_majority(tiny_model, shared_data):
    settings = FinetuneSettings(learning_rate=2e-3, max_steps=100, max_seq_length=64, max_train_examples=3200)
    results = run_glue(tiny_model, [get_task("sst2")], shared_data / "glue", settings, seeds=[1])
    row = results["results"]["sst2"]
    majority = 444 / 872  # the SST-2 dev majority class ("1")
    assert row["metric"] == "accuracy" and row["seeds"] == [row["median"]]
    assert row["median"] > majority + 0.05, row
    assert results["settings"]["size"] == "small" and results["settings"]["layer_decay"] == 0.8
    assert results["average"] == row["median"] and results["average_over"] == ["sst2"]
    assert results["finetune_flops"] > 0 and math.isfinite(results["finetune_flops"])


def test_stsb_double_unordered_and_finite_correlations(tiny_model, shared_data):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    spec = get_task("stsb")
    single = load_task_data(
        spec,
        shared_data / "glue",
        tokenizer,
        FinetuneSettings(max_train_examples=100, double_unordered=False),
    )
    double = load_task_data(spec, shared_data / "glue", tokenizer, FinetuneSettings(max_train_examples=100))
    assert len(single.train) == 100 and len(double.train) == 200
    first, swapped = double.train[0], double.train[100]
    sep = tokenizer.sep_token_id
    a_len = first["input_ids"].index(sep)  # [CLS] A [SEP] B [SEP] -> [CLS] B [SEP] A [SEP]
    assert swapped["input_ids"][-(a_len):] == first["input_ids"][1:a_len] + [sep]
    assert swapped["labels"] == first["labels"] and isinstance(first["labels"], float)

    settings = FinetuneSettings(max_steps=20, max_seq_length=48, max_train_examples=320)
    results = run_glue(tiny_model, [spec], shared_data / "glue", settings, seeds=[3])
    medians = results["results"]["stsb"]["medians"]
    assert set(medians) == {"pearson", "spearman"} and results["results"]["stsb"]["metric"] == "spearman"
    assert all(math.isfinite(v) and -1 <= v <= 1 for v in medians.values()), medians


def test_head_is_the_classifier_and_encoder_layers_decay(tiny_model):
    model = GlueModel(load_encoder(tiny_model), num_labels=3, task="mnli", labels=("a", "b", "c"))
    groups = {g["name"]: g for g in layerwise_lr_groups(model, 1e-4, 0.8)}
    assert groups["head"]["param_names"] == ["classifier.weight", "classifier.bias"]
    assert groups["layer_1"]["lr"] == pytest.approx(1e-4)
    assert groups["layer_0"]["lr"] == pytest.approx(0.8e-4)
    assert groups["embeddings"]["lr"] == pytest.approx(0.64e-4)
    assert "encoder.embeddings_project.weight" in groups["embeddings"]["param_names"]


def test_cli_mnli_qqp_seeds_test_files_checkpoint_and_init_from(tiny_run, tiny_model, shared_data, tmp_path):
    data = write_qqp(write_mnli(tmp_path / "glue"))
    out = tmp_path / "run"
    # --model may be the pretraining run directory: its export.json points at the discriminator.
    argv = ["glue", "--model", str(tiny_run), "--task", "mnli,qqp", "--data-dir", str(data), "--seeds", "2"]
    argv += [
        "--max-steps",
        "2",
        "--max-seq-length",
        "32",
        "--output",
        str(out),
        "--predict-test",
        "--save-best",
    ]
    assert main(argv) == 0

    results = json.loads((out / "results.json").read_text())
    assert list(results["results"]) == ["mnli", "mnli-mm", "qqp"]
    for row in results["results"].values():
        assert len(row["seeds"]) == 2 and row["seed_ids"] == [1, 2]
        assert row["median"] == pytest.approx(sorted(row["seeds"])[0] / 2 + sorted(row["seeds"])[1] / 2)
    assert set(results["results"]["qqp"]["medians"]) == {"accuracy", "f1"}
    assert results["average_over"] == ["qqp", "mnli"]  # the paper's order; MNLI-mm is not averaged
    assert "| mnli-mm | acc |" in (out / "results.md").read_text()
    assert results["model"] == str(tiny_model)

    expected_rows = {"MNLI-m": 2, "MNLI-mm": 2, "AX": 1, "QQP": 1}
    for stem, n in expected_rows.items():
        lines = (out / "glue_test" / f"{stem}.tsv").read_text().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == n + 1
        labels = get_task("qqp" if stem == "QQP" else "mnli").labels
        assert all(line.split("\t")[1] in labels for line in lines[1:])
        assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(n)]

    checkpoint = out / "checkpoints" / "mnli"
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["glue_head"]["task"] == "mnli" and config["id2label"] == {
        str(i): label for i, label in enumerate(get_task("mnli").labels)
    }
    assert not (checkpoint / "glue_head.safetensors").exists()  # one model.safetensors holds encoder and head
    tuned, original = load_encoder(checkpoint).state_dict(), load_encoder(tiny_model).state_dict()
    assert not torch.equal(
        tuned["encoder.layer.1.output.dense.weight"], original["encoder.layer.1.output.dense.weight"]
    )
    assert GlueModel(load_encoder(checkpoint), 3, "mnli", get_task("mnli").labels).load_head_if_same_task(
        checkpoint
    )
    assert not GlueModel(load_encoder(checkpoint), 2, "rte", get_task("rte").labels).load_head_if_same_task(
        checkpoint
    )

    # RTE from the MNLI checkpoint, as the paper does, on the real RTE files.
    argv = ["glue", "--model", str(tiny_model), "--init-from", str(checkpoint), "--task", "rte"]
    argv += ["--data-dir", str(shared_data / "glue"), "--max-steps", "2", "--max-train-examples", "64"]
    argv += ["--max-seq-length", "32", "--output", str(tmp_path / "rte"), "--original-layer-decay"]
    assert main(argv) == 0
    rte = json.loads((tmp_path / "rte" / "results.json").read_text())
    assert rte["init_from"] == str(checkpoint) and 0 <= rte["results"]["rte"]["median"] <= 1
    assert rte["settings"]["original_off_by_one"] is True and rte["settings"]["learning_rate"] == 3e-4


def test_any_bert_checkpoint_works(shared_data, tmp_path):
    """A randomly initialised HF BERT (pooler included) fine-tunes through the same path."""
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = _tokenizer(shared_data / "bert_vocab" / "vocab.txt")
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertForMaskedLM(config).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    settings = FinetuneSettings(max_steps=2, max_seq_length=32, max_train_examples=64)
    out = tmp_path / "out"
    results = run_glue(
        tmp_path / "bert", [get_task("wnli")], shared_data / "glue", settings, [1], output_dir=out
    )
    assert 0 <= results["results"]["wnli"]["median"] <= 1 and results["average_over"] == []
    text = (out / "results.json").read_text()
    assert "NaN" not in text and json.loads(text)["average"] is None  # WNLI is not averaged: no average
    model = GlueModel(load_encoder(tmp_path / "bert"), 2, "wnli", ("0", "1"))
    # A BERT fine-tune is exactly BertForSequenceClassification: transformers loads it and gives our logits.
    from transformers import AutoModelForSequenceClassification

    torch.nn.init.normal_(model.classifier.weight)
    model.save(tmp_path / "tuned", tokenizer)
    theirs = AutoModelForSequenceClassification.from_pretrained(tmp_path / "tuned").eval()
    assert type(theirs).__name__ == "BertForSequenceClassification" and theirs.config.id2label == {
        0: "0",
        1: "1",
    }
    batch = tokenizer(["a short one", "and another sentence"], padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model.eval()(**batch)[1]
        torch.testing.assert_close(theirs(**batch).logits, ours, rtol=0, atol=1e-5)
    again = GlueModel(load_encoder(tmp_path / "tuned"), 2, "wnli", ("0", "1"))
    assert again.load_head_if_same_task(tmp_path / "tuned")
    assert torch.equal(again.classifier.weight, model.classifier.weight)
    head = {g["name"]: g for g in layerwise_lr_groups(model, 1e-4, 0.8)}["head"]["param_names"]
    assert set(head) == {
        "encoder.pooler.dense.weight",
        "encoder.pooler.dense.bias",
        "classifier.weight",
        "classifier.bias",
    }


def test_cli_bad_input_is_one_line(tiny_model, shared_data, tmp_path, capsys):
    base = ["glue", "--model", str(tiny_model), "--data-dir", str(shared_data / "glue"), "--max-steps", "1"]
    assert main(base + ["--task", "squad"]) == 2
    assert "unknown GLUE task 'squad'" in capsys.readouterr().err
    assert main(base + ["--task", "qnli"]) == 2  # QNLI train is not staged: fails before any training
    err = capsys.readouterr().err.strip()
    assert "QNLI/train.tsv: file not found" in err and len(err.splitlines()) == 1
    assert main(["glue", "--model", str(tmp_path), "--task", "rte", "--data-dir", str(tmp_path)]) == 2
    assert "config.json: not found" in capsys.readouterr().err
    # The flag that named the wrong path is the one the message names.
    rte = ["--task", "rte", "--data-dir", str(shared_data / "glue")]
    assert main(["glue", "--model", str(tiny_model), *rte, "--init-from", str(tmp_path / "nope")]) == 2
    assert "--init-from must be a Hugging Face checkpoint directory" in capsys.readouterr().err
    (tmp_path / "weights.bin").write_text("")
    assert main(["glue", "--model", str(tmp_path / "weights.bin"), *rte]) == 2
    assert "--model " + str(tmp_path / "weights.bin") + " is a file" in capsys.readouterr().err
    compare = ["compare", "--corpus", str(tmp_path), "--out", str(tmp_path / "c"), "--glue-tasks", "rte"]
    assert main([*compare, "--glue-data", str(tmp_path / "nope")]) == 2
    assert "pass --glue-data DIR" in capsys.readouterr().err
    bad = tmp_path / "glue" / "RTE"
    bad.mkdir(parents=True)
    (bad / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tyes\n")
    (bad / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")
    assert (
        main(["glue", "--model", str(tiny_model), "--task", "rte", "--data-dir", str(tmp_path / "glue")]) == 2
    )
    assert "RTE/train.tsv:2: label 'yes' is not one of" in capsys.readouterr().err


def test_median_over_seeds_and_paper_average():
    spec = get_task("mrpc")
    runs = [
        SeedRun(s, {"mrpc": {"accuracy": acc, "f1": f1}}, 1, {}, {}, 0.0)
        for s, acc, f1 in [(1, 0.80, 0.85), (2, 0.70, 0.90), (3, 0.90, 0.80)]
    ]
    row = summarise(spec, runs)["mrpc"]
    assert row["median"] == pytest.approx(0.80) and row["seeds"] == [0.80, 0.70, 0.90]
    assert row["medians"] == pytest.approx({"accuracy": 0.80, "f1": 0.85})
    rows = {
        "cola": {"median": 0.5},
        "mnli": {"median": 0.8},
        "mnli-mm": {"median": 0.1},  # not averaged
        "wnli": {"median": 0.0},  # not averaged (the paper leaves WNLI out)
        "stsb": {"median": 0.9},
    }
    average, used = glue_average(rows)
    assert used == ["cola", "stsb", "mnli"] and average == pytest.approx((0.5 + 0.9 + 0.8) / 3)


def test_lengths_are_fitted_to_the_model_and_exports_say_their_length(tmp_path, capsys):
    """Before: `glue --max-seq-length 512` on a 128-position model ended in a RuntimeError, and exported tokenizers
    had no model_max_length, so truncation=True (and the pipelines) did not stop where the model does."""
    from transformers import AutoTokenizer, ElectraTokenizerFast

    from electra.export.layout import fit_length
    from electra.objectives import build_config
    from electra.training.model import build_pretraining_model
    from tests.golden_trace import WORDS, write_stsb

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", *WORDS]
    tokenizer = ElectraTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    small = dict(
        hidden_size=32, num_hidden_layers=1, intermediate_size=64, num_attention_heads=2, embedding_size=16
    )
    config = build_config("tiny", overrides={**small, "max_position_embeddings": 64, "max_seq_length": 64})
    build_pretraining_model(config, tokenizer).export(tmp_path / "run", tokenizer)
    saved = AutoTokenizer.from_pretrained(str(tmp_path / "run" / "discriminator"))
    assert saved.model_max_length == 64
    assert len(saved(" ".join(["module"] * 200), truncation=True)["input_ids"]) == 64
    assert fit_length(512, config) == 64 and "using its 64 positions" in capsys.readouterr().err
    data = write_stsb(tmp_path / "glue")
    argv = ["glue", "--model", str(tmp_path / "run"), "--task", "stsb", "--data-dir", str(data)]
    assert main([*argv, "--max-seq-length", "512", "--max-steps", "2"]) == 0
    assert (
        "--max-seq-length 512 is longer than the model takes; using its 64 positions"
        in capsys.readouterr().err
    )


def test_an_electra_fine_tune_is_one_directory_and_the_first_layout_still_loads(tmp_path):
    from safetensors.torch import save_file
    from transformers import AutoModel, ElectraConfig, ElectraModel

    config = ElectraConfig(
        vocab_size=30,
        embedding_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    model = GlueModel(ElectraModel(config), 3, "mnli", get_task("mnli").labels)
    torch.nn.init.normal_(model.classifier.weight)
    model.save(tmp_path / "new")
    saved = json.loads((tmp_path / "new" / "config.json").read_text())
    assert saved.get("architectures") is None  # no transformers class has the paper's one-layer head
    assert saved["glue_head"]["num_labels"] == 3
    assert isinstance(AutoModel.from_pretrained(tmp_path / "new"), ElectraModel)
    old = tmp_path / "old"
    model.encoder.save_pretrained(old)
    save_file(
        {k: v.contiguous() for k, v in model.classifier.state_dict().items()},
        str(old / "glue_head.safetensors"),
    )
    (old / "glue_head.json").write_text(
        json.dumps({"task": "mnli", "num_labels": 3, "labels": list(model.labels)})
    )
    for directory in (tmp_path / "new", old):
        again = GlueModel(load_encoder(directory), 3, "mnli", get_task("mnli").labels)
        assert again.load_head_if_same_task(directory)
        assert torch.equal(again.classifier.weight, model.classifier.weight)


def test_resume_refuses_another_model_or_settings_and_reuses_finished_seeds(tmp_path, capsys, monkeypatch):
    """Before: `glue --resume` with another --model, --max-steps or --learning-rate reused the finished seeds and
    rewrote results.json/results.md under the new model and settings, with the old runs' numbers (rc 0)."""
    import shutil

    import electra.glue.finetune as finetune_module

    _, data = _micro_glue(tmp_path)
    shutil.copytree(tmp_path / "run", tmp_path / "other")
    out = tmp_path / "out"
    common = [
        "--task",
        "stsb",
        "--data-dir",
        str(data),
        "--seeds",
        "2",
        "--batch-size",
        "8",
        "--output",
        str(out),
    ]
    first = ["--max-steps", "2", "--learning-rate", "1e-3", "--save-every", "1"]
    assert main(["glue", "--model", str(tmp_path / "run"), *common, *first]) == 0
    capsys.readouterr()
    saved = {name: (out / name).read_bytes() for name in ("results.json", "results.md")}

    def refused(model: str, *flags: str) -> str:
        assert main(["glue", "--model", str(tmp_path / model), *common, *flags, "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--resume:" in err and "--overwrite" in err, err
        assert {name: (out / name).read_bytes() for name in saved} == saved  # nothing rewritten
        return err

    err = refused("other", *first)
    assert (
        f'model (saved "{tmp_path / "run" / "discriminator"}", now "{tmp_path / "other" / "discriminator"}")'
        in err
    )
    err = refused("run", "--max-steps", "3", "--learning-rate", "5e-4", "--save-every", "1")
    assert "learning_rate (saved 0.001, now 0.0005)" in err and "max_steps (saved 2, now 3)" in err
    # An output from before run.json existed is compared with its results.json.
    record = (out / "run.json").read_bytes()
    (out / "run.json").unlink()
    assert "results.json differs from this run in max_steps" in refused(
        "run", "--max-steps", "3", "--learning-rate", "1e-3"
    )
    (out / "run.json").write_bytes(record)

    def no_training(*args, **kwargs):
        raise AssertionError("a finished seed was trained again")

    # The same settings (checkpointing may change) resume, reusing both finished seeds.
    monkeypatch.setattr(finetune_module, "run_seed", no_training)
    assert (
        main(
            [
                "glue",
                "--model",
                str(tmp_path / "run"),
                *common,
                "--max-steps",
                "2",
                "--learning-rate",
                "1e-3",
                "--resume",
            ]
        )
        == 0
    )
    again = json.loads((out / "results.json").read_text())
    assert again["results"] == json.loads(saved["results.json"])["results"]


def _micro_glue(tmp_path: Path) -> tuple[Path, Path]:
    """A one-layer exported run over a word vocabulary, and STS-B-format data with a test file: fast enough to run
    several fine-tunes in one test."""
    from tests.golden_trace import WORDS, export_word_model, write_stsb

    export_word_model(tmp_path / "run")
    data = write_stsb(tmp_path / "glue")
    rows = ["index\tsentence1\tsentence2", *(f"{i}\tthe {WORDS[i]}\tthe {WORDS[i + 1]}" for i in range(6))]
    (data / "STS-B" / "test.tsv").write_text("\n".join(rows) + "\n")
    return tmp_path / "run", data


def test_a_resume_of_fewer_tasks_keeps_the_others_in_the_summary(tmp_path, capsys, monkeypatch):
    """Before: `glue --resume --task rte` into a folder that had run STS-B and RTE rewrote results.json and
    results.md with RTE alone: the STS-B row was gone without a word (its seeds stayed under runs/). The summary
    now keeps the earlier tasks' rows, runs and FLOPs, in the earlier order, and says so."""
    import electra.glue.finetune as finetune_module
    from tests.golden_trace import WORDS

    run, data = _micro_glue(tmp_path)
    rte = data / "RTE"
    rte.mkdir()
    for name, size in (("train.tsv", 24), ("dev.tsv", 8)):
        rows = ["index\tsentence1\tsentence2\tlabel"]
        rows += [
            f"{i}\tthe {WORDS[i % 10]}\tthe {WORDS[i % 10 + 1]}\t{('entailment', 'not_entailment')[i % 2]}"
            for i in range(size)
        ]
        (rte / name).write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    common = ["--model", str(run), "--data-dir", str(data), "--seeds", "2", "--max-steps", "2"]
    common += ["--batch-size", "8", "--output", str(out)]
    assert main(["glue", *common, "--task", "stsb,rte"]) == 0
    before = json.loads((out / "results.json").read_text())
    capsys.readouterr()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished seed was trained again")

    monkeypatch.setattr(finetune_module, "run_seed", no_training)
    assert main(["glue", *common, "--task", "rte", "--resume"]) == 0
    assert "results.json keeps stsb from the earlier run" in capsys.readouterr().out
    after = json.loads((out / "results.json").read_text())
    assert after["tasks"] == ["stsb", "rte"] and after["carried_over"] == ["stsb"]
    assert after["results"] == before["results"] and list(after["results"]) == ["stsb", "rte"]
    assert after["runs"] == before["runs"] and after["average"] == before["average"]
    assert after["finetune_flops"] == pytest.approx(before["finetune_flops"])
    markdown = (out / "results.md").read_text()
    assert "| stsb |" in markdown and "| rte |" in markdown and "earlier run in this folder" in markdown


def test_a_resume_adds_what_the_first_run_did_not_write(tmp_path, capsys):
    """Before: a run resumed with --predict-test or --save-best reused its finished seeds as they were, so the
    test predictions were missing (no STS-B.tsv) and no best model was saved. Now such a seed is run again from its
    last checkpoint, which gives the very model the uninterrupted run saves."""
    from safetensors.torch import load_file

    from electra.glue.model import saved_seed

    run, data = _micro_glue(tmp_path)
    common = ["--model", str(run), "--task", "stsb", "--data-dir", str(data), "--seeds", "2"]
    common += ["--max-steps", "3", "--batch-size", "8", "--save-every", "3"]
    assert (
        main(["glue", *common, "--output", str(tmp_path / "straight"), "--predict-test", "--save-best"]) == 0
    )
    assert main(["glue", *common, "--output", str(tmp_path / "out")]) == 0
    assert not (tmp_path / "out" / "glue_test").exists() and not (tmp_path / "out" / "checkpoints").exists()
    assert (
        main(
            ["glue", *common, "--output", str(tmp_path / "out"), "--resume", "--predict-test", "--save-best"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.count("finished earlier without test predictions") == 2
    for name in ("glue_test/STS-B.tsv", "results.json"):
        straight, resumed = (tmp_path / d / name for d in ("straight", "out"))
        if name == "results.json":
            strip = lambda p: {k: v for k, v in json.loads(p.read_text())["results"].items()}  # noqa: E731
            assert strip(resumed) == strip(straight)
        else:
            assert resumed.read_text() == straight.read_text() and len(resumed.read_text().splitlines()) == 7
    best = tmp_path / "out" / "checkpoints" / "stsb"
    assert saved_seed(best) == saved_seed(tmp_path / "straight" / "checkpoints" / "stsb") is not None
    a = load_file(str(best / "model.safetensors"))
    b = load_file(str(tmp_path / "straight" / "checkpoints" / "stsb" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_overwrite_deletes_the_earlier_runs_seeds(tmp_path, capsys):
    """Before: `--overwrite` left the earlier run's runs/TASK/seed-N (result.json, checkpoints) in place, so a later
    --resume of the new run took the old run's finished seeds, trained under other settings, for its own."""
    run, data = _micro_glue(tmp_path)
    out = tmp_path / "out"
    common = ["--model", str(run), "--task", "stsb", "--data-dir", str(data), "--batch-size", "8"]
    common += ["--save-every", "2", "--output", str(out)]
    assert main(["glue", *common, "--seeds", "2", "--max-steps", "2"]) == 0
    (out / "notes.txt").write_text("mine")
    assert (out / "runs" / "stsb" / "seed-2" / "result.json").is_file()
    assert main(["glue", *common, "--seeds", "2", "--max-steps", "4", "--task", "nope", "--overwrite"]) == 2
    assert (out / "runs" / "stsb" / "seed-2" / "result.json").is_file()  # a mistyped flag deletes nothing
    assert main(["glue", *common, "--seeds", "1", "--max-steps", "4", "--overwrite"]) == 0
    assert not (out / "runs" / "stsb" / "seed-2").exists() and (out / "notes.txt").read_text() == "mine"
    capsys.readouterr()
    assert main(["glue", *common, "--seeds", "2", "--max-steps", "4", "--resume"]) == 0
    assert json.loads((out / "runs" / "stsb" / "seed-2" / "result.json").read_text())["steps"] == 4


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("electra glue: error: "), err
    return err


def test_bad_numbers_are_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    """Before: `--max-seq-length 2` on a pair task trained on untruncated sequences (the tokenizer cannot cut
    [CLS] A [SEP] B [SEP] to 2 and keeps all of it), 4 on [CLS] A [SEP] [SEP] without B, both rc 0;
    `--max-train-examples -3` and `--seed -1` ended in ValueError tracebacks, and `--max-train-examples 0` trained
    on all of train."""
    import electra.glue.finetune as finetune_module

    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    monkeypatch.setattr(finetune_module, "run_seed", lambda *a, **k: pytest.fail("trained"))
    base = ["glue", "--model", str(run), "--task", "stsb", "--data-dir", str(data), "--max-steps", "1"]
    for flags, expected in [
        (
            ["--max-seq-length", "2"],
            "--max-seq-length 2 leaves no room for text in stsb's [CLS] A [SEP] B [SEP]",
        ),
        (["--max-seq-length", "4"], "give at least 5"),
        (["--max-train-examples", "0"], "max_train_examples must be at least 1, got 0."),
        (["--max-train-examples", "-3"], "max_train_examples must be at least 1, got -3."),
        (["--seed", "-1"], "seed -1 must be in 0..4294967295"),
        (["--seed", str(2**32 - 1), "--seeds", "2"], "seed 4294967296 must be in 0..4294967295"),
    ]:
        assert main(base + flags) == 2, flags
        assert expected in _one_line(capsys), flags
    with pytest.raises(UserError, match="max_train_examples must be at least 1"):
        FinetuneSettings(max_train_examples=0)


def test_a_malformed_later_task_stops_the_run_before_any_training(tmp_path, capsys, monkeypatch):
    """Before: each task's files were read when its turn came, so a bad row in the second task of a run ended it
    after the first had trained (results lost without --output); a task file that is a folder read as 'not
    found'."""
    import electra.glue.finetune as finetune_module

    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    rte = data / "RTE"
    rte.mkdir()
    header = "index\tsentence1\tsentence2\tlabel\n"
    (rte / "train.tsv").write_text(header + "0\tthe file\tthe loop\tentailment\n1\tthe\tline\tmaybe\n")
    (rte / "dev.tsv").write_text(header + "0\tthe file\tthe loop\tentailment\n")
    monkeypatch.setattr(finetune_module, "run_seed", lambda *a, **k: pytest.fail("trained before the check"))
    argv = ["glue", "--model", str(run), "--task", "stsb,rte", "--data-dir", str(data), "--max-steps", "1"]
    assert main(argv) == 2
    assert "RTE/train.tsv:3: label 'maybe' is not one of entailment, not_entailment" in _one_line(capsys)
    (rte / "dev.tsv").unlink()
    (rte / "dev.tsv").mkdir()
    assert main(argv) == 2
    assert "RTE/dev.tsv is a directory; task rte needs a TSV file there" in _one_line(capsys)


def test_a_damaged_seed_result_is_run_again(tmp_path, capsys):
    """Before: a result.json cut short (a full disk, a crash of the machine) or edited by hand stopped every later
    `--resume` with a JSONDecodeError or KeyError traceback. Now it is reported in one line and the seed runs
    again from its last checkpoint, to the same numbers."""
    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    out = tmp_path / "out"
    argv = ["glue", "--model", str(run), "--task", "stsb", "--data-dir", str(data), "--seeds", "2"]
    argv += ["--max-steps", "3", "--batch-size", "8", "--save-every", "3", "--output", str(out)]
    assert main(argv) == 0
    straight = json.loads((out / "results.json").read_text())["results"]
    second = out / "runs" / "stsb" / "seed-2" / "result.json"
    for damage in (second.read_text()[:40], '{"seed": 2}', "[]"):
        second.write_text(damage)
        with pytest.warns(ElectraWarning, match=f"{second} is damaged .*running that seed again"):
            assert main([*argv, "--resume"]) == 0
        assert json.loads((out / "results.json").read_text())["results"] == straight
        assert json.loads(second.read_text())["steps"] == 3


def test_resume_refuses_changed_task_files(tmp_path, capsys):
    """Before: `--resume` after a dev or train file changed (edited, or --data-dir pointed at another copy) reused
    the seeds finished on the old files beside new seeds run on the new ones, one median over both, rc 0."""
    import shutil

    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    out = tmp_path / "out"
    common = ["glue", "--model", str(run), "--task", "stsb", "--max-steps", "2", "--batch-size", "8"]
    common += ["--output", str(out)]
    assert main([*common, "--data-dir", str(data), "--seeds", "1"]) == 0
    saved = (out / "results.json").read_bytes()
    other = tmp_path / "other"
    shutil.copytree(data, other)
    dev = other / "STS-B" / "dev.tsv"
    dev.write_text("".join(dev.read_text().splitlines(keepends=True)[:20]))
    capsys.readouterr()
    assert main([*common, "--data-dir", str(other), "--seeds", "2", "--resume"]) == 2
    err = _one_line(capsys)
    assert (
        f"--resume: {dev} is not the file the stsb seeds in {out} were run on" in err and "--overwrite" in err
    )
    assert (out / "results.json").read_bytes() == saved and not (out / "runs" / "stsb" / "seed-2").exists()
    # The same files elsewhere resume, and test files first read at a resume join the record.
    shutil.copy(data / "STS-B" / "dev.tsv", dev)
    assert main([*common, "--data-dir", str(other), "--seeds", "2", "--resume", "--predict-test"]) == 0
    record = json.loads((out / "runs" / "stsb" / "data.json").read_text())
    assert sorted(record) == ["STS-B/dev.tsv", "STS-B/test.tsv", "STS-B/train.tsv"]


def test_an_output_holding_another_commands_run_is_refused(tmp_path, capsys):
    """Before: `glue --output runs/small` (the pretraining run it fine-tunes) was told that runs/small/checkpoints
    'already exists; pass --overwrite to replace it', and --overwrite then deleted the pretraining checkpoints and
    wrote GLUE's run.json over the run's own; --resume wrote into it. Now each is refused and nothing changes."""
    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    record = '{"corpus": "/data/corpus.txt", "corpus_sample": "ab12", "world_size": 1}\n'
    (run / "run.json").write_text(record)
    (run / "checkpoints" / "step-00000010").mkdir(parents=True)
    argv = ["glue", "--model", str(run), "--task", "stsb", "--data-dir", str(data), "--max-steps", "1"]
    for flag in ([], ["--overwrite"], ["--resume"]):
        assert main([*argv, "--output", str(run), *flag]) == 2
        assert f"{run} holds another command's run" in _one_line(capsys)
        assert (run / "run.json").read_text() == record and (run / "checkpoints" / "step-00000010").is_dir()


def test_a_run_folder_given_as_a_model_is_named_for_what_it_is(tmp_path, capsys, monkeypatch):
    """Before: `--init-from` (or `--model`) naming a GLUE output, whose models are in checkpoints/TASK, was told
    it must be "a Hugging Face checkpoint directory"; a pretraining run stopped before its export (its own
    config.json, no export.json) was told to convert its weights to safetensors. Now each is named for what it
    is, with the folder to give instead, before any work."""
    import shutil

    import electra.glue.finetune as finetune_module
    from electra.export.layout import finetune_dir

    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    monkeypatch.setattr(finetune_module, "run_seed", lambda *a, **k: pytest.fail("trained"))
    tuned = tmp_path / "tuned"  # what `glue --output tuned --save-best` leaves
    (tuned / "checkpoints").mkdir(parents=True)
    shutil.copytree(finetune_dir(run), tuned / "checkpoints" / "stsb")
    (tuned / "run.json").write_text(json.dumps({"command": "glue", "model": str(finetune_dir(run))}))
    base = ["glue", "--task", "stsb", "--data-dir", str(data), "--max-steps", "1"]
    assert main([*base, "--model", str(run), "--init-from", str(tuned)]) == 2
    assert (
        f"--init-from {tuned} is an `electra glue` output, not a model; give one of the models it saved: "
        f"{tuned / 'checkpoints' / 'stsb'}." in _one_line(capsys)
    )
    shutil.rmtree(tuned / "checkpoints")
    assert main([*base, "--model", str(tuned)]) == 2
    assert (
        f"--model {tuned} is an `electra glue` output, not a model; give a pretraining run of this library (with "
        "its export.json) or a Hugging Face checkpoint directory." in _one_line(capsys)
    )

    unfinished = tmp_path / "unfinished"  # a pretraining run before its export: run.json and its own config
    unfinished.mkdir()
    (unfinished / "config.json").write_text(json.dumps({"hidden_size": 32}))
    (unfinished / "run.json").write_text(
        '{"corpus": "/data/corpus.txt", "corpus_sample": "ab12", "world_size": 1}'
    )
    assert main([*base, "--model", str(unfinished)]) == 2
    err = _one_line(capsys)
    assert f"--model {unfinished}: a pretraining run of this library with no export yet" in err
    assert f"finish it with `electra pretrain --output {unfinished} --resume`" in err
    assert sorted(p.name for p in unfinished.iterdir()) == ["config.json", "run.json"]


def test_init_from_a_model_of_another_shape_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """Before: `--init-from` a fine-tune of another model was trained with --model's tokenizer: an IndexError
    traceback in the first forward where its vocabulary was smaller, and otherwise a run on ids that mean other
    words, rc 0. Now its shape is compared with --model's, from the command line and from Python."""
    import shutil

    import electra.glue.finetune as finetune_module
    from electra.export.layout import finetune_dir
    from electra.glue.inputs import check_init_from

    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    monkeypatch.setattr(finetune_module, "run_seed", lambda *a, **k: pytest.fail("trained"))
    model = finetune_dir(run)
    other = tmp_path / "other"
    shutil.copytree(model, other)
    config = json.loads((other / "config.json").read_text())
    check_init_from(model, other)  # a checkpoint of the same shape passes
    (other / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 7}))
    out = tmp_path / "out"
    argv = ["glue", "--model", str(run), "--init-from", str(other), "--task", "stsb", "--data-dir", str(data)]
    assert main([*argv, "--max-steps", "1", "--output", str(out)]) == 2
    err = _one_line(capsys)
    assert (
        f"--init-from {other}: its vocab_size is {config['vocab_size'] + 7} where --model {model}'s is "
        f"{config['vocab_size']}, so it is not fine-tuned from that model" in err
    )
    assert not out.exists()
    with pytest.raises(UserError, match=r"its vocab_size is \d+ where --model .*'s is \d+"):
        run_glue(run, [get_task("stsb")], data, FinetuneSettings(max_steps=1), [1], init_from=other)
    (other / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(UserError, match=r"its num_hidden_layers is 3 where --model .*'s is 1"):
        check_init_from(model, other)


def test_a_seed_given_twice_is_refused(tmp_path):
    """Before: `electra.finetune_glue(..., seeds=[1, 2, 1])` ran seed 1 twice, counted it twice in the median,
    and wrote its second result over the first."""
    import electra
    from electra.glue.inputs import check_run_inputs

    with pytest.raises(UserError, match=r"seed 1 is given twice in seeds \[1, 2, 1\]; give each seed once"):
        check_run_inputs([get_task("stsb")], FinetuneSettings(), [1, 2, 1])
    with pytest.raises(UserError, match=r"seed 3 is given twice"):
        electra.finetune_glue(tmp_path / "m", "stsb", tmp_path, seeds=[3, 3], output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_every_task_missing_files_is_named_at_once(tmp_path, capsys, monkeypatch):
    """Before: `--task all` on a partial download named the first task with a missing file; each fix met the
    next refusal. Now one line names them all and the tasks that are complete."""
    import electra.glue.finetune as finetune_module

    run, data = _micro_glue(tmp_path)
    capsys.readouterr()  # the export's progress bars
    monkeypatch.setattr(finetune_module, "run_seed", lambda *a, **k: pytest.fail("trained"))
    (data / "RTE").mkdir()
    (data / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    argv = ["glue", "--model", str(run), "--data-dir", str(data), "--max-steps", "1"]
    assert main([*argv, "--task", "rte,stsb,wnli,mrpc"]) == 2
    assert (
        f"{data / 'RTE' / 'dev.tsv'}: file not found; task rte needs it (GLUE layout: RTE/dev.tsv); wnli, mrpc "
        "lack files too; add the missing files, or run only the complete tasks: stsb." in _one_line(capsys)
    )
    assert main([*argv, "--task", "stsb,wnli"]) == 2
    assert "(GLUE layout: WNLI/train.tsv); add the missing files, or run only the complete tasks: stsb." in (
        _one_line(capsys)
    )
    assert main([*argv, "--task", "wnli"]) == 2  # one task: the line it always was
    assert _one_line(capsys).endswith(
        f"{data / 'WNLI' / 'train.tsv'}: file not found; task wnli needs it (GLUE layout: WNLI/train.tsv)."
    )


def test_resume_into_a_users_folder_is_refused(tmp_path, capsys):
    """Before: `--resume` into a folder of the user's holding a name GLUE writes (their own runs/, no run.json)
    went on as a fresh run and wrote its seeds into it; without --resume it was told to pass --overwrite, which
    then refused the same files."""
    out = tmp_path / "mine"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "notes.txt").write_text("mine\n")
    argv = ["glue", "--model", str(tmp_path / "m"), "--task", "stsb", "--data-dir", str(tmp_path)]
    for flag in ([], ["--resume"], ["--overwrite"]):
        assert main([*argv, "--output", str(out), *flag]) == 2
        err = _one_line(capsys)
        assert f"{out} holds runs, but no run.json shows that a run wrote them" in err, flag
    assert sorted(p.name for p in out.rglob("*")) == ["notes.txt", "runs"]
