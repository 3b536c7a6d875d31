"""`electra compare`: equal-FLOP budgets, resumable cells, and the table/plot writer."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from electra.app.cli import main
from electra.app.compare.run import (
    CompareSettings,
    format_markdown,
    glue_settings,
    prepare_tokenizer,
    pretrain_objective,
    write_report,
)
from electra.core.errors import UserError
from electra.glue.inputs import task_data_fingerprints
from electra.glue.tasks import get_task
from electra.objectives import build_config, flop_report

PRETRAIN_KEYS = ("max_steps", "save_every", "log_every", "warmup_steps")


# A finished pretraining fraction as pretrain_objective records it (the one fraction of a one-checkpoint study).
ONE_CELL = {
    "index": 1,
    "fraction": 1.0,
    "step": 7,
    "train_flops": 3e9,
    "train_flops_per_step": 5e8,
    "max_steps": 7,
}


def _write_sst2(root: Path) -> Path:
    """A tiny SST-2 (two classes) under ROOT/glue/SST-2: the sst2 probe's data is read before any work."""
    folder = root / "glue" / "SST-2"
    folder.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"a {'good' if i % 2 else 'bad'} film number {i}\t{i % 2}\n" for i in range(12))
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)
    return root


def _micro(micro_overrides: dict) -> dict:
    return {k: v for k, v in micro_overrides.items() if k not in PRETRAIN_KEYS}


def _settings(tmp_path: Path, corpus: Path, micro_overrides: dict, budget: float, **extra) -> CompareSettings:
    return CompareSettings(
        corpus=str(corpus),
        out=tmp_path / "out",
        objectives=["electra", "mlm"],
        tasks=["rte"],
        glue_data=tmp_path,
        budget=budget,
        checkpoints=2,
        seeds=[1],
        overrides=_micro(micro_overrides),
        **extra,
    )


def _prepared(tmp_path, corpus, micro_overrides):
    """Settings, the shared tokenizer directory, and each objective's FLOPs per step for that vocabulary."""
    from electra.data.tokenization import load_saved_tokenizer

    settings = _settings(tmp_path, corpus, micro_overrides, budget=1.0)
    settings.out.mkdir(parents=True)
    tokenizer_dir = prepare_tokenizer(settings, build_config("tiny", overrides=settings.overrides))
    vocab = len(load_saved_tokenizer(tokenizer_dir))
    per_step = {}
    for objective in ("electra", "mlm"):
        config = build_config("tiny", overrides=dict(settings.overrides, objective=objective))
        config.vocab_size = vocab
        per_step[objective] = flop_report(config).train_flops_per_step
    return settings, tokenizer_dir, vocab, per_step


def test_equal_budgets_stop_within_one_step_and_rerun_skips(small_corpus, tmp_path, micro_overrides):
    settings, tokenizer_dir, vocab, per_step = _prepared(tmp_path, small_corpus, micro_overrides)
    assert per_step["mlm"] < 0.8 * per_step["electra"]
    settings.budget = 5 * per_step["electra"]  # 5 ELECTRA steps buy more of the cheaper MLM's

    cells = {o: pretrain_objective(settings, o, tokenizer_dir) for o in ("electra", "mlm")}
    for objective, records in cells.items():
        assert [c["fraction"] for c in records] == [0.5, 1.0]
        for cell in records:
            target = settings.budget * cell["fraction"]
            assert (
                target <= cell["train_flops"] < target + per_step[objective]
            )  # within one step, never under
            assert cell["step"] == math.ceil(target / per_step[objective] - 1e-9)
        assert records[-1]["max_steps"] == records[-1]["step"]  # the schedule spans exactly the budget
    assert cells["electra"][-1]["step"] == 5 and cells["mlm"][-1]["step"] > 5
    assert abs(cells["electra"][-1]["train_flops"] - cells["mlm"][-1]["train_flops"]) < per_step["electra"]

    # every fraction is a loadable export; the pretraining run kept only what resuming needs
    from transformers import AutoModel

    from electra.export.layout import finetune_dir

    for objective in cells:
        for name in ("1of2", "2of2"):
            model_dir = finetune_dir(settings.out / "checkpoints" / objective / name)
            assert AutoModel.from_pretrained(str(model_dir)).config.vocab_size == vocab
    assert (settings.out / "checkpoints" / "mlm" / "2of2" / "mlm").is_dir()
    assert (settings.out / "checkpoints" / "electra" / "2of2" / "generator").is_dir()

    # a rerun trains nothing: the cells come back from disk unchanged
    stamps = {p: p.stat().st_mtime_ns for p in (settings.out / "pretrain").rglob("*") if p.is_file()}
    again = {o: pretrain_objective(settings, o, tokenizer_dir) for o in ("electra", "mlm")}
    assert again == cells
    assert {p: p.stat().st_mtime_ns for p in (settings.out / "pretrain").rglob("*") if p.is_file()} == stamps


def test_a_killed_run_resumes_from_its_checkpoint(small_corpus, tmp_path, micro_overrides):
    """Export of the second fraction lost (killed after training): the rerun exports without training again."""
    import shutil

    settings, tokenizer_dir, _, per_step = _prepared(tmp_path, small_corpus, micro_overrides)
    settings.budget = 4 * per_step["mlm"]
    first = pretrain_objective(settings, "mlm", tokenizer_dir)
    shutil.rmtree(settings.out / "checkpoints" / "mlm" / "2of2")
    metrics = (settings.out / "pretrain" / "mlm" / "metrics.csv").read_text()
    assert pretrain_objective(settings, "mlm", tokenizer_dir) == first
    assert (settings.out / "pretrain" / "mlm" / "metrics.csv").read_text() == metrics


def _fake_results() -> dict:
    def cell(fraction, step, flops, scores):
        known = [v for v in scores.values() if v is not None]
        return {
            "fraction": fraction,
            "step": step,
            "train_flops": flops,
            "scores": scores,
            "average": sum(known) / len(known) if known else None,
        }

    return {
        "corpus": "corpus/",
        "size": "tiny",
        "budget": 2e12,
        "checkpoints": 2,
        "tasks": ["sst2", "rte"],
        "seeds": [1, 2, 3],
        "objectives": {
            "electra": {
                "cells": [
                    cell(0.5, 10, 1.0e12, {"sst2": 0.8, "rte": 0.5}),
                    cell(1.0, 20, 2.0e12, {"sst2": 0.85, "rte": 0.55}),
                ]
            },
            "mlm": {
                "cells": [
                    cell(0.5, 16, 1.02e12, {"sst2": 0.75, "rte": 0.5}),
                    cell(1.0, 32, 2.01e12, {}),
                ]
            },
        },
    }


def test_writer_table_json_and_plot(tmp_path):
    results = _fake_results()
    paths = write_report(results, tmp_path)
    table = paths["markdown"].read_text()
    lines = table.splitlines()
    assert lines[0] == "| objective | fraction | step | train FLOPs | sst2 | rte | average |"
    assert "| electra | 0.50 | 10 | 1e+12 | 80.0 | 50.0 | 65.0 |" in lines
    assert "| electra | 1.00 | 20 | 2e+12 | 85.0 | 55.0 | 70.0 |" in lines
    assert "| mlm | 0.50 | 16 | 1.02e+12 | 75.0 | 50.0 | 62.5 |" in lines
    assert "| mlm | 1.00 | 32 | 2.01e+12 | – | – | – |" in lines  # a cell not fine-tuned yet
    assert "median over 3 seed(s)" in table
    assert json.loads(paths["json"].read_text()) == results
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    image = imread(paths["plot"])
    assert image.shape[0] > 200 and image.shape[1] > 300
    assert not list(tmp_path.glob(".*partial*"))  # written by rename, nothing left behind
    assert format_markdown(results) == table


def test_cli_rejects_bad_input(tmp_path, small_corpus, capsys):
    argv = [
        "compare",
        "--corpus",
        str(small_corpus),
        "--out",
        str(tmp_path / "o"),
        "--glue-data",
        str(tmp_path),
    ]
    assert main(argv + ["--objectives", "electra,bert"]) == 2
    assert "'bert' is not one of" in capsys.readouterr().err
    assert main(argv + ["--objectives", "electra,cloze"]) == 2
    assert "'cloze' trains a scorer with no encoder to fine-tune or probe" in capsys.readouterr().err
    assert main(argv + ["--flops-budget", "0"]) == 2
    assert (
        main(
            [
                "compare",
                "--corpus",
                str(tmp_path / "missing"),
                "--out",
                str(tmp_path / "o"),
                "--glue-data",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "corpus not found" in capsys.readouterr().err
    # Before: a corpus refused for having no text still left OUT/compare.json, which then refused the corrected
    # rerun as "run with other corpus"; and that message named no values.
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out = tmp_path / "e"
    probe = ["--glue-tasks", "none", "--probes", "sst2", "--probe-data", str(_write_sst2(tmp_path))]
    assert main(["compare", "--corpus", str(empty), "--out", str(out), *probe]) == 2
    capsys.readouterr()
    assert not out.exists()  # refused before anything was written, OUT included
    out.mkdir()
    (out / "compare.json").write_text(json.dumps({"corpus": str(empty.resolve()), "budget": "1e12"}))
    assert main(["compare", "--corpus", str(small_corpus), "--out", str(out), *probe]) == 2
    err = capsys.readouterr().err
    assert f'corpus (saved "{empty.resolve()}", now "{Path(small_corpus).resolve()}")' in err, err


@pytest.mark.slow
def test_miniature_end_to_end_compare_and_resume(
    small_corpus, tmp_path, micro_overrides, shared_data, capsys
):
    out = tmp_path / "cmp"
    glue_data = tmp_path / "glue"  # a copy, edited below
    shutil.copytree(shared_data / "glue" / "RTE", glue_data / "RTE")
    argv = ["compare", "--corpus", str(small_corpus), "--out", str(out), "--objectives", "electra,mlm"]
    argv += ["--flops-budget", "4e9", "--checkpoints", "2", "--glue-tasks", "rte", "--seeds", "1"]
    argv += [
        "--glue-data",
        str(glue_data),
        "--glue-max-steps",
        "3",
        "--glue-max-train-examples",
        "32",
    ]
    for key, value in _micro(micro_overrides).items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["objectives"]) == ["electra", "mlm"]
    for entry in results["objectives"].values():
        assert [c["fraction"] for c in entry["cells"]] == [0.5, 1.0]
        for cell in entry["cells"]:
            assert 0.0 <= cell["scores"]["rte"] <= 1.0 and cell["average"] == cell["scores"]["rte"]
            assert cell["train_flops"] >= 4e9 * cell["fraction"]
    assert (out / "curve.png").stat().st_size > 1000
    table = (out / "results.md").read_text()
    assert table.count("| electra |") == 2 and table.count("| mlm |") == 2

    cells = sorted((out / "glue").glob("*/*/*.json"))
    assert len(cells) == 4
    stamps = [p.stat().st_mtime_ns for p in cells]
    assert main(argv) == 0  # resumed: every cell is on disk, nothing is retrained
    assert [p.stat().st_mtime_ns for p in cells] == stamps
    assert json.loads((out / "results.json").read_text()) == results
    # The plan of a rerun counts what is on disk (before: every run, as if none were done).
    # A cell whose record is lost keeps its seed's result, which the rerun reuses: that run counts as done.
    cells[0].unlink()
    capsys.readouterr()
    assert main([*argv, "--plan"]) == 0
    plan = capsys.readouterr().out
    assert plan.count("checkpoints at steps") == 2 and plan.count("; 2 of 2 exported, 0 left") == 2
    assert (
        "fine-tuning: 4 runs (2 objectives x 2 checkpoints x 1 tasks x 1 seeds); 4 of 4 done, 0 left" in plan
    )
    (result,) = cells[0].parent.glob("seed-runs/rte-*/runs/rte/seed-1/result.json")
    result.rename(result.with_suffix(".kept"))  # as if killed inside the seed
    assert main([*argv, "--plan"]) == 0
    assert "; 3 of 4 done, 1 left" in capsys.readouterr().out
    result.with_suffix(".kept").rename(result)
    # More seeds (an evaluation change, so --overwrite): each cell fine-tunes seed 2 alone and reuses seed 1's
    # result, also where the cell's record was lost (before: every seed was fine-tuned again).
    seed_one = sorted((out / "glue").glob("*/*/seed-runs/rte-*/runs/rte/seed-1/result.json"))
    assert len(seed_one) == 4
    stamps = [p.stat().st_mtime_ns for p in seed_one]
    more_seeds = [*argv, "--overwrite"]
    more_seeds[more_seeds.index("--seeds") + 1] = "2"
    capsys.readouterr()
    assert main([*more_seeds, "--plan"]) == 0  # before: "8 runs" and no word of seed 1's four on disk
    assert "fine-tuning: 8 runs (2 objectives x 2 checkpoints x 1 tasks x 2 seeds); 4 of 8 done, 4 left" in (
        capsys.readouterr().out
    )
    assert main(more_seeds) == 0
    assert [p.stat().st_mtime_ns for p in seed_one] == stamps
    assert len(list((out / "glue").glob("*/*/seed-runs/rte-*/runs/rte/seed-2/result.json"))) == 4
    assert all(json.loads(p.read_text())["seeds"] == [1, 2] for p in cells)
    # A comparison moved to another folder resumes there: a cell redone finds its seed runs recorded under the old
    # path, which glue would refuse to resume, and starts them over.
    moved = tmp_path / "moved"
    out.rename(moved)
    (moved / cells[0].relative_to(out)).unlink()
    at_moved = [*more_seeds]
    at_moved[at_moved.index("--out") + 1] = str(moved)
    assert main(at_moved) == 0
    assert json.loads((moved / cells[0].relative_to(out)).read_text())["seeds"] == [1, 2]
    moved.rename(out)
    # After the task's files change every cell is redone, its seeds run again (glue would refuse to resume them);
    # before, finished cells kept the old dev set's scores in the report.
    dev = glue_data / "RTE" / "dev.tsv"
    dev.write_text("".join(dev.read_text().splitlines(keepends=True)[:-5]))
    digests = {json.loads(p.read_text())["data"]["RTE/dev.tsv"] for p in cells}
    stamps = [p.stat().st_mtime_ns for p in seed_one]
    assert main(more_seeds) == 0
    redone = [json.loads(p.read_text()) for p in cells]
    assert all(r["seeds"] == [1, 2] and r["data"]["RTE/dev.tsv"] not in digests for r in redone)
    assert len(digests) == 1 and all(a != b for a, b in zip(stamps, (p.stat().st_mtime_ns for p in seed_one)))
    assert main(argv[:-2] + ["--set", "hidden_size=64"]) == 2  # another model into the same OUT is refused


def test_plan_prints_the_steps_each_budget_buys(tmp_path, small_corpus, shared_data, capsys):

    argv = ["compare", "--corpus", str(small_corpus), "--out", str(tmp_path / "o")]
    argv += ["--glue-data", str(shared_data / "glue"), "--flops-budget", "1e13", "--plan"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for objective in ("electra", "mlm"):
        config = build_config("tiny", overrides={"objective": objective})
        config.vocab_size = (
            config.tokenizer_vocab_size
        )  # no vocabulary trained yet: the plan assumes its size
        steps = math.ceil(1e13 / flop_report(config).train_flops_per_step)
        quarter = math.ceil(1e13 / 4 / flop_report(config).train_flops_per_step)
        assert f"{objective}: " in printed and f"{steps} steps" in printed and f"[{quarter}, " in printed
    assert "fine-tuning: 96 runs" in printed
    assert not (tmp_path / "o").exists()  # a plan trains and writes nothing


def test_results_are_collected_from_the_cells_on_disk(tmp_path):
    """An undefined metric (NaN, stored as null) shows as missing and stays out of the average."""
    from electra.app.compare.run import collect_results

    settings = CompareSettings(
        corpus="c",
        out=tmp_path,
        objectives=["mlm"],
        tasks=["sst2", "stsb", "rte"],
        glue_data=tmp_path,
        checkpoints=1,
    )
    cell_dir = tmp_path / "glue" / "mlm" / "1of1"
    cell_dir.mkdir(parents=True)
    (cell_dir / "sst2.json").write_text(json.dumps({"rows": {"sst2": {"median": 0.8}}}))
    (cell_dir / "stsb.json").write_text(json.dumps({"rows": {"stsb": {"median": None}}}))
    cell = dict(ONE_CELL)
    results = collect_results(settings, {"mlm": [cell]}, None)
    row = results["objectives"]["mlm"]["cells"][0]
    # RTE not fine-tuned yet: no average (before: SST-2's score alone, plotted beside whole fractions' averages)
    assert row["scores"] == {"sst2": 0.8, "stsb": None} and row["average"] is None
    (cell_dir / "rte.json").write_text(json.dumps({"rows": {"rte": {"median": 0.6}}}))
    results = collect_results(settings, {"mlm": [cell]}, None)
    row = results["objectives"]["mlm"]["cells"][0]
    assert row["scores"] == {"sst2": 0.8, "stsb": None, "rte": 0.6} and row["average"] == pytest.approx(0.7)
    assert "| mlm | 1.00 | 7 | 3e+09 | 80.0 | – | 60.0 | 70.0 |" in format_markdown(results)
    (cell_dir / "rte.json").unlink()
    # A cell fine-tuned with other settings (a rerun with new fine-tuning options) is stale: not reported.
    finetune = glue_settings(settings, build_config("tiny"))
    (cell_dir / "sst2.json").write_text(
        json.dumps({"seeds": settings.seeds, "settings": {"epochs": 99}, "rows": {"sst2": {"median": 0.8}}})
    )
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    for split in ("train", "dev"):
        (tmp_path / "STS-B").mkdir(exist_ok=True)
        (tmp_path / "STS-B" / f"{split}.tsv").write_text(header + "0\tg\tf\ty\t1\tn\tn\tA.\tB.\t2.5\n")
    data = task_data_fingerprints(get_task("stsb"), tmp_path)
    current = dict(seeds=settings.seeds, settings=dataclasses.asdict(finetune), data=data)
    (cell_dir / "stsb.json").write_text(json.dumps({**current, "rows": {"stsb": {"median": 0.5}}}))
    row = collect_results(settings, {"mlm": [cell]}, finetune)["objectives"]["mlm"]["cells"][0]
    assert row["scores"] == {"stsb": 0.5}
    # A cell made on other task files (a corrected dev set) is stale too.
    (tmp_path / "STS-B" / "dev.tsv").write_text(header + "0\tg\tf\ty\t1\tn\tn\tA.\tB.\t4.0\n")
    row = collect_results(settings, {"mlm": [cell]}, finetune)["objectives"]["mlm"]["cells"][0]
    assert row["scores"] == {}


@pytest.mark.parametrize("objective", ["electra-15", "replace-mlm", "all-tokens-mlm"])
def test_stepping_stones_train_to_the_budget_and_export(objective, small_corpus, tmp_path, micro_overrides):
    from transformers import AutoModel

    from electra.data.tokenization import load_saved_tokenizer
    from electra.export.layout import finetune_dir

    settings, tokenizer_dir, vocab, _ = _prepared(tmp_path, small_corpus, micro_overrides)
    config = build_config("tiny", overrides=dict(settings.overrides, objective=objective))
    config.vocab_size = len(load_saved_tokenizer(tokenizer_dir))
    per_step = flop_report(config).train_flops_per_step
    settings.budget = 3 * per_step
    settings.checkpoints = 1
    (cell,) = pretrain_objective(settings, objective, tokenizer_dir)
    assert cell["step"] == 3 and cell["train_flops"] == pytest.approx(3 * per_step)
    summary = json.loads((settings.out / "pretrain" / objective / "summary.json").read_text())
    assert summary["stop_reason"] == "flops_budget"
    # measured matmuls agree with the analytic count (All-Tokens MLM's head skips padding the count charges)
    assert summary["flop_counter_check"]["ratio"] == pytest.approx(1.0, abs=0.05)
    model_dir = finetune_dir(settings.out / "checkpoints" / objective / "1of1")
    assert AutoModel.from_pretrained(str(model_dir)).config.vocab_size == vocab


def test_arms_carry_their_settings_labels_and_safe_folders():
    from electra.app.compare.settings import parse_arm

    plain = parse_arm("electra")
    assert (plain.label, plain.objective, plain.overrides, plain.slug) == (
        "electra",
        "electra",
        (),
        "electra",
    )
    gdes = parse_arm("electra+embedding_sharing=gdes")
    assert gdes.objective == "electra" and gdes.overrides == (("embedding_sharing", "gdes"),)
    assert gdes.slug == "electra+embedding_sharing=gdes"
    fast = parse_arm("fast:electra+generator_from=runs/Gen Dir")
    assert fast.label == "fast" and fast.overrides == (
        ("generator_from", "runs/Gen Dir"),
    )  # case and path kept
    assert parse_arm("electra+generator_from=/a/b").slug == "electra+generator_from=_a_b"
    with pytest.raises(UserError, match="key=value"):
        parse_arm("electra+gdes")


def test_an_arm_may_not_reshape_the_shared_vocabulary(tmp_path):
    """Arms share OUT/tokenizer: an arm's own text form or vocabulary size would silently be ignored."""
    from electra.app.compare.run import check_arms

    for override in ("text_form=words", "lowercase=false", "tokenizer_vocab_size=4096"):
        settings = CompareSettings(
            corpus="c", out=tmp_path, objectives=["mlm", f"electra+{override}"], tasks=[], glue_data=None
        )
        with pytest.raises(UserError, match=f"sets {override.split('=')[0]}.*--set"):
            check_arms(settings)
    fine = CompareSettings(
        corpus="c", out=tmp_path, objectives=["electra+mask_prob=0.25"], tasks=[], glue_data=None
    )
    check_arms(fine)


def test_arm_overrides_reach_the_config_and_a_frozen_generator_stops_sharing(tmp_path):
    from electra.app.compare.run import objective_config
    from electra.app.compare.settings import parse_arm

    settings = CompareSettings(
        corpus="c", out=tmp_path, objectives=["electra"], tasks=[], glue_data=None, budget=1e13, checkpoints=2
    )
    config = objective_config(settings, parse_arm("electra+embedding_sharing=gdes"), 30522)
    assert config.embedding_sharing == "gdes" and config.objective == "electra"
    assert objective_config(settings, "mlm", 30522).objective == "mlm"


def test_probe_columns_and_random_encoder_row_in_the_report(tmp_path):
    from electra.app.compare.run import write_report

    def cell(fraction, median):
        probe = {
            "median": median,
            "min": median - 0.01,
            "max": median + 0.02,
            "accuracy": [median],
            "majority": 0.5,
        }
        return {
            "fraction": fraction,
            "step": 10,
            "train_flops": 1e12 * fraction,
            "scores": {},
            "average": None,
            "average_by_seed": [],
            "probes": {"sst2": probe},
        }

    results = {
        "corpus": "c",
        "size": "tiny",
        "budget": 2e12,
        "checkpoints": 2,
        "tasks": [],
        "seeds": [1, 2, 3],
        "overrides": {},
        "finetune_settings": None,
        "probes": ["sst2"],
        "probe_max_train": 1000,
        "random_encoder": {
            "sst2": {"median": 0.55, "min": 0.55, "max": 0.56, "accuracy": [0.55], "majority": 0.5}
        },
        "objectives": {
            "electra": {
                "train_flops_per_step": 1e11,
                "max_steps": 20,
                "cells": [cell(0.5, 0.60), cell(1.0, 0.65)],
            }
        },
    }
    paths = write_report(results, tmp_path)
    table = paths["markdown"].read_text()
    assert "| objective | fraction | step | train FLOPs | probe sst2 |" in table
    assert "| electra | 1.00 | 10 | 1e+12 | 65.0 [64.0-67.0] |" in table
    assert "| random encoder | – | 0 | 0 | 55.0 [55.0-56.0] |" in table
    assert "1000 training sentences per seed" in table
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_arms_with_probes_only_end_to_end(small_corpus, tmp_path, micro_overrides, capsys):
    """Two arms (plain and GDES), no GLUE, a part-of-speech probe on planted tagged text, a random-encoder row."""
    brown = tmp_path / "data" / "corpus" / "brown"
    brown.mkdir(parents=True)
    words = [("the", "at"), ("committee", "nn"), ("met", "vbd"), ("on", "in"), ("tuesday", "nr"), (".", ".")]
    (brown / "ca01").write_text("\n".join(" ".join(f"{w}/{t}" for w, t in words) for _ in range(40)) + "\n")
    out = tmp_path / "cmp"
    argv = ["compare", "--corpus", str(small_corpus), "--out", str(out), "--glue-tasks", "none"]
    argv += ["--objectives", "electra,gdes:electra+embedding_sharing=gdes", "--probes", "pos"]
    argv += [
        "--probe-data",
        str(tmp_path / "data"),
        "--flops-budget",
        "2e9",
        "--checkpoints",
        "1",
        "--seeds",
        "2",
    ]
    for key, value in _micro(micro_overrides).items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["objectives"]) == ["electra", "gdes"]
    for entry in results["objectives"].values():
        probe = entry["cells"][0]["probes"]["pos"]
        assert probe["min"] <= probe["median"] <= probe["max"] and len(probe["accuracy"]) == 2
    assert "pos" in results["random_encoder"]
    assert (out / "checkpoints" / "gdes" / "1of1" / "discriminator" / "model.safetensors").is_file()
    table = (out / "results.md").read_text()
    assert "| random encoder |" in table and "| gdes | 1.00 |" in table
    capsys.readouterr()
    assert main([*argv, "--plan"]) == 0
    assert "; 3 of 3 (encoder, probe) cells done, 0 left" in capsys.readouterr().out


def test_a_rerun_with_other_evaluation_settings_needs_overwrite(small_corpus, tmp_path, capsys, monkeypatch):
    """Before: a rerun into the same --out with other GLUE or probe settings silently replaced results.md and
    results.json, while glue, tlm, score and rescore refuse to replace results without --overwrite."""
    import electra.app.compare.rerun
    import electra.app.compare.run

    def started(*args, **kwargs):
        raise RuntimeError("work started")

    monkeypatch.setattr(electra.app.compare.run, "prepare_tokenizer", started)
    out = tmp_path / "out"
    out.mkdir()
    tuned = {"learning_rate": 0.5, "an_old_setting": 1}  # a setting only one side has is not compared
    report = {
        "tasks": ["rte"],
        "seeds": [1],
        "probes": [],
        "probe_max_train": None,
        "finetune_settings": tuned,
    }
    (out / "results.json").write_text(json.dumps(report))
    manifest = {"corpus": str(small_corpus.resolve()), "size": "tiny", "overrides": {}, "budget": 6e13}
    (out / "compare.json").write_text(json.dumps({**manifest, "checkpoints": 4, "vocab": None}))
    _write_sst2(tmp_path / "probe-data")
    argv = ["compare", "--corpus", str(small_corpus), "--out", str(out), "--glue-tasks", "none"]
    argv += ["--probes", "sst2", "--probe-data", str(tmp_path / "probe-data"), "--seeds", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"electra compare: error: {out / 'results.json'} reports a comparison made with other "
    )
    # each setting with its saved and new value (before: "other tasks, seeds, finetune_settings, probes")
    assert (
        'other tasks (saved ["rte"], now []); seeds (saved [1], now [1, 2]); ' in err and "--overwrite" in err
    )
    assert 'finetune_settings.learning_rate (saved 0.5, now 0.001); probes (saved [], now ["sst2"]);' in err
    assert len(err.splitlines()) == 1
    assert json.loads((out / "results.json").read_text()) == report and sorted(out.iterdir()) == [
        out / "compare.json",
        out / "results.json",
    ]
    with pytest.raises(RuntimeError, match="work started"):
        main([*argv, "--overwrite"])
    # The same evaluation: arms may be added (the report grows), but one the report holds may not be left out.
    monkeypatch.setattr(electra.app.compare.rerun, "evaluation_settings", lambda settings, finetune: report)
    (out / "results.json").write_text(json.dumps({**report, "objectives": {"electra": {}, "mlm": {}}}))
    with pytest.raises(RuntimeError, match="work started"):
        main([*argv, "--objectives", "electra,mlm,electric"])
    assert main([*argv, "--objectives", "electra"]) == 2
    err = capsys.readouterr().err.strip()
    assert "other --objectives (this run leaves out mlm)" in err and "pass --overwrite" in err


def _probe_only(tmp_path: Path, corpus: Path, out: Path, micro_overrides: dict, budget: str) -> list[str]:
    """A compare command line that needs no GLUE data (probes only) on the micro model."""
    _write_sst2(tmp_path / "probe-data")
    argv = ["compare", "--corpus", str(corpus), "--out", str(out), "--glue-tasks", "none", "--probes", "sst2"]
    argv += ["--probe-data", str(tmp_path / "probe-data"), "--flops-budget", budget, "--checkpoints", "2"]
    for key, value in _micro(micro_overrides).items():
        argv += ["--set", f"{key}={value}"]
    return argv


def _stop_before_pretraining(monkeypatch):
    import electra.app.compare.run

    def started(*args, **kwargs):
        raise RuntimeError("pretraining started")

    monkeypatch.setattr(electra.app.compare.run, "pretrain_objective", started)


def test_a_budget_refused_leaves_nothing_that_blocks_the_corrected_rerun(
    small_corpus, tmp_path, micro_overrides, capsys, monkeypatch
):
    """Before: a budget too small for the checkpoints was refused only after OUT/compare.json was written, and that
    manifest then refused the corrected rerun ("run with other budget"), --overwrite or not."""
    out = tmp_path / "out"
    small = _probe_only(tmp_path, small_corpus, out, micro_overrides, "1")
    assert main(small) == 2
    err = capsys.readouterr().err
    assert "--flops-budget 1 buys only 0 step(s)" in err and err.count("\n") == 1
    assert not (out / "compare.json").exists() and not (out / "tokenizer").exists()
    # --plan refuses it too (counting with the untrained vocabulary's full size), and writes nothing
    assert main([*small, "--plan"]) == 2
    assert "buys only 0 step(s)" in capsys.readouterr().err
    _stop_before_pretraining(monkeypatch)
    corrected = _probe_only(tmp_path, small_corpus, out, micro_overrides, "1e12")
    with pytest.raises(RuntimeError, match="pretraining started"):
        main(corrected)
    assert json.loads((out / "compare.json").read_text())["budget"] == 1e12
    assert (out / "tokenizer" / "tokenizer.json").is_file()


def test_a_manifest_no_arm_was_pretrained_under_gives_way_to_overwrite(
    small_corpus, tmp_path, micro_overrides, capsys, monkeypatch
):
    """A compare.json left by a run that never pretrained (killed early, or refused by an older version after
    recording it) binds nothing: --overwrite starts over, with a fresh vocabulary. Once an arm has a checkpoint,
    other pretraining settings stay refused, --overwrite or not."""
    from electra.data.tokenization import load_saved_tokenizer

    out = tmp_path / "out"
    argv = _probe_only(tmp_path, small_corpus, out, micro_overrides, "1e12")
    stale = {
        "corpus": str(small_corpus.resolve()),
        "size": "tiny",
        "overrides": {},
        "budget": 1e9,
        "checkpoints": 2,
    }
    (out / "tokenizer").mkdir(parents=True)
    (out / "tokenizer" / "tokenizer.json").write_text("not the vocabulary these settings train")
    (out / "compare.json").write_text(json.dumps(stale))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no arm was pretrained under them yet: pass --overwrite" in err and err.count("\n") == 1
    assert main([*argv, "--plan"]) == 2  # the plan refuses what the run refuses
    capsys.readouterr()
    assert main([*argv, "--plan", "--overwrite"]) == 0
    assert (
        "no arm was pretrained under them: --overwrite starts the comparison over" in capsys.readouterr().out
    )
    assert json.loads((out / "compare.json").read_text()) == stale  # a plan writes nothing
    _stop_before_pretraining(monkeypatch)
    with pytest.raises(RuntimeError, match="pretraining started"):
        main([*argv, "--overwrite"])
    assert json.loads((out / "compare.json").read_text())["budget"] == 1e12
    assert len(load_saved_tokenizer(out / "tokenizer")) > 5  # the stale vocabulary was replaced

    # an arm pretrained under the recorded settings: other ones are refused even with --overwrite
    (out / "checkpoints" / "electra" / "1of2").mkdir(parents=True)
    (out / "checkpoints" / "electra" / "1of2" / "cell.json").write_text("{}")
    other = _probe_only(tmp_path, small_corpus, out, micro_overrides, "2e12")
    assert main([*other, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "other budget (saved 1000000000000.0, now 2000000000000.0)" in err
    assert "--overwrite replaces a report, never pretrained arms" in err
    # another --vocab: every arm reads OUT/tokenizer, so it used to be ignored without a word
    tokenizer_copy = tmp_path / "tokenizer-copy"
    shutil.copytree(out / "tokenizer", tokenizer_copy)
    assert (
        main(
            [
                *_probe_only(tmp_path, small_corpus, out, micro_overrides, "1e12"),
                "--vocab",
                str(tokenizer_copy),
            ]
        )
        == 2
    )
    assert f'other vocab (saved null, now "{tokenizer_copy.resolve()}")' in capsys.readouterr().err


def test_plan_refuses_what_a_run_refuses(small_corpus, tmp_path, micro_overrides, capsys):
    """Before: --plan printed a plan for arms sharing a folder, an arm setting max_steps (silently replaced by the
    budget's steps), and a missing corpus; only the run refused (or, for max_steps, nothing did)."""
    out = tmp_path / "out"
    argv = _probe_only(tmp_path, small_corpus, out, micro_overrides, "1e12") + ["--plan"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--objectives", "a:electra,a:mlm"]) == 2
    assert "'a' and 'a' would share a folder" in capsys.readouterr().err
    assert main([*argv, "--objectives", "electra+max_steps=3"]) == 2
    err = capsys.readouterr().err
    assert "sets max_steps, which compare controls (--flops-budget" in err and err.count("\n") == 1
    missing = [tmp_path / "missing" if a == str(small_corpus) else a for a in argv]
    assert main([str(a) for a in missing]) == 2
    assert "corpus not found" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("key", ["max_steps", "flops_budget", "save_every", "keep_checkpoints", "vocab_size"])
def test_an_arm_or_set_may_not_give_what_compare_controls(
    key, small_corpus, tmp_path, micro_overrides, capsys
):
    from electra.app.compare.run import check_arms

    settings = CompareSettings(
        corpus="c", out=tmp_path, objectives=["mlm", f"electra+{key}=3"], tasks=[], glue_data=None
    )
    with pytest.raises(UserError, match=f"'electra\\+{key}=3' sets {key}, which compare controls"):
        check_arms(settings)
    argv = _probe_only(tmp_path, small_corpus, tmp_path / "out", micro_overrides, "1e12")
    assert main([*argv, "--plan", "--set", f"{key}=3"]) == 2
    assert f"--set {key}=...: compare controls {key}" in capsys.readouterr().err


def test_an_arms_warmup_is_kept_like_a_set_one(tmp_path):
    """Before: an arm's warmup_steps was cut to a tenth of the budget's steps, while --set warmup_steps was kept."""
    from electra.app.compare.run import objective_config
    from electra.app.compare.settings import parse_arm

    settings = CompareSettings(
        corpus="c", out=tmp_path, objectives=["electra"], tasks=[], glue_data=None, budget=1e12, checkpoints=1
    )
    config = objective_config(settings, parse_arm("electra+warmup_steps=5"), 8192)
    assert config.max_steps < 50 and config.warmup_steps == 5
    assert objective_config(settings, "electra", 8192).warmup_steps == max(1, config.max_steps // 10)


def test_a_lost_export_whose_checkpoint_was_pruned_is_refused_not_replaced_by_a_later_step(
    small_corpus, tmp_path, micro_overrides
):
    """Before: with OUT/checkpoints/mlm/1of2 gone (deleted, or its cell.json unreadable) after the second fraction
    had pruned the checkpoint it came from, the rerun exported the later step as the first fraction: the table
    showed fraction 0.50 at the full budget's step and FLOPs, beside the scores of the real first export."""
    settings, tokenizer_dir, _, per_step = _prepared(tmp_path, small_corpus, micro_overrides)
    settings.budget = 4 * per_step["mlm"]
    first = pretrain_objective(settings, "mlm", tokenizer_dir)
    assert [cell["step"] for cell in first] == [2, 4]
    # an export whose weights are gone, or whose cell.json is unreadable, is exported again while its checkpoint
    # is still there (before: a --model error when fine-tuning it, or a JSONDecodeError traceback)
    weights = settings.out / "checkpoints" / "mlm" / "2of2" / "mlm" / "model.safetensors"
    weights.unlink()
    assert pretrain_objective(settings, "mlm", tokenizer_dir) == first and weights.is_file()
    (settings.out / "checkpoints" / "mlm" / "2of2" / "cell.json").write_text('{"objective": "ml')
    assert pretrain_objective(settings, "mlm", tokenizer_dir) == first
    lost = settings.out / "checkpoints" / "mlm" / "1of2"
    shutil.rmtree(lost)
    with pytest.raises(UserError, match=f"{lost}: this export is missing or damaged.*step-00000004.*is past"):
        pretrain_objective(settings, "mlm", tokenizer_dir)
    assert not lost.exists()


def test_unreadable_records_in_out_are_one_line_or_redone(tmp_path, capsys):
    """Before: a results.json, compare.json or cell file cut short (a full disk, a crash of the machine: the atomic
    writes rename but do not sync) stopped every rerun with a JSONDecodeError traceback."""
    from electra.app.compare.rerun import check_manifest, check_report
    from electra.app.compare.run import collect_results

    settings = CompareSettings(
        corpus=str(tmp_path),
        out=tmp_path / "out",
        objectives=["mlm"],
        tasks=["rte"],
        glue_data=tmp_path,
        checkpoints=1,
        probes=["sst2"],
        probe_data=_write_sst2(tmp_path / "probe-data"),
    )
    finetune = glue_settings(settings, build_config("tiny"))
    cell_dir = settings.out / "glue" / "mlm" / "1of1"
    cell_dir.mkdir(parents=True)
    (cell_dir / "rte.json").write_text('{"seeds": [1], "rows": {"rte": {"med')
    probe_dir = settings.out / "probes" / "mlm" / "1of1"
    probe_dir.mkdir(parents=True)
    (probe_dir / "sst2.json").write_bytes(b"\xff\xfe")
    cell = dict(ONE_CELL)
    row = collect_results(settings, {"mlm": [cell]}, finetune)["objectives"]["mlm"]["cells"][0]
    assert row["scores"] == {} and row["average"] is None and row["probes"] == {}  # left out, to be redone

    for name, fix in (("results.json", "delete it and rerun"), ("compare.json", "delete it and rerun with")):
        (settings.out / name).write_text('{"tasks": ["rt')
        check = check_report if name == "results.json" else check_manifest
        with pytest.raises(UserError, match=f"{settings.out / name}: unreadable.*{fix}"):
            check(settings, finetune) if name == "results.json" else check(settings)
        (settings.out / name).unlink()


def test_a_budget_under_one_step_per_checkpoint_is_refused(small_corpus, tmp_path, micro_overrides, capsys):
    """Before: with --checkpoints 1 any budget, 1 FLOP included, was accepted (the step that overshoots counted as
    bought): every arm trained one step, billions of times its budget and at unequal FLOPs, and --plan put the
    checkpoint at step 0. Each fraction must buy a whole step, as the refusal's own advice says."""
    from electra.app.compare.run import objective_config

    settings = CompareSettings(
        corpus="c", out=tmp_path, objectives=["electra"], tasks=[], glue_data=None, budget=1.0, checkpoints=1
    )
    with pytest.raises(UserError, match="--flops-budget 1 buys only 0 step\\(s\\) of electra"):
        objective_config(settings, "electra", 8192)
    per_step = flop_report(build_config("tiny", overrides={"objective": "electra", "vocab_size": 8192}))
    settings.budget, settings.checkpoints = 2.5 * per_step.train_flops_per_step, 3
    with pytest.raises(UserError, match="buys only 2 step\\(s\\).*for 3 checkpoints"):
        objective_config(settings, "electra", 8192)
    settings.checkpoints = 2
    assert objective_config(settings, "electra", 8192).max_steps == 3
    argv = _probe_only(tmp_path, small_corpus, tmp_path / "out", micro_overrides, "1")
    argv[argv.index("--checkpoints") + 1] = "1"
    assert main([*argv, "--plan"]) == 2
    err = capsys.readouterr().err
    assert "buys only 0 step(s)" in err and err.count("\n") == 1


def test_a_second_run_into_a_live_out_is_refused(
    small_corpus, tmp_path, micro_overrides, capsys, monkeypatch
):
    """Before: a rerun started while the first still ran (another terminal, a restarted job) went to work beside
    it: pretraining was refused by the arm's own lock, but fine-tuning redid the same cells and the two raced to
    write OUT/tokenizer."""
    import electra.app.compare.run
    from electra.core.output_lock import output_lock

    def started(*args, **kwargs):
        raise RuntimeError("work started")

    monkeypatch.setattr(electra.app.compare.run, "prepare_tokenizer", started)
    out = tmp_path / "out"
    argv = _probe_only(tmp_path, small_corpus, out, micro_overrides, "1e12")
    with output_lock(out):
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{out}: a run is writing here now" in err and err.count("\n") == 1
    with pytest.raises(RuntimeError, match="work started"):  # once it has finished, the rerun goes ahead
        main(argv)
    assert not (out / ".electra.lock").exists()


def test_a_folder_that_is_no_comparison_keeps_what_a_run_would_replace(small_corpus, tmp_path, capsys):
    """Before: --out naming a folder of the user's (or a pretraining run's) went to work in it: its results.md and
    curve.png were replaced by the report, and its tokenizer/ was taken as the comparison's vocabulary."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.md").write_text("my notes")
    (out / "notes.txt").write_text("kept")
    argv = ["compare", "--corpus", str(small_corpus), "--out", str(out), "--glue-tasks", "none"]
    argv += ["--probes", "sst2", "--probe-data", str(tmp_path), "--flops-budget", "1e12"]
    for extra in ([], ["--overwrite"], ["--plan"]):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert f"{out} holds results.md but no compare.json" in err and err.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "results.md"]
    assert (out / "results.md").read_text() == "my notes"


def test_the_order_of_tasks_or_probes_is_no_other_evaluation():
    """Before: `--glue-tasks mrpc,rte` after `rte,mrpc` was refused as "other tasks", though it fine-tunes the same
    cells; the seeds' order is kept, since seed i of every task makes the per-seed averages."""
    from electra.app.compare.rerun import changed_settings

    saved = {"tasks": ["rte", "mrpc"], "probes": ["sst2", "pos"], "seeds": [1, 2]}
    assert (
        changed_settings(saved, {"tasks": ["mrpc", "rte"], "probes": ["pos", "sst2"], "seeds": [1, 2]}) == []
    )
    assert changed_settings(saved, {**saved, "seeds": [2, 1]}) == ["seeds (saved [1, 2], now [2, 1])"]


def test_an_arm_label_must_name_a_folder_of_its_own(small_corpus, tmp_path, micro_overrides, capsys):
    """Before: `..:electra` pretrained into OUT itself (OUT/pretrain/..: its config.json and run.json beside
    compare.json) and stopped on OUT's own lock; `.:mlm` pretrained into OUT/pretrain."""
    from electra.app.compare.settings import parse_arm

    for label in ("..", ".", "..."):
        with pytest.raises(UserError, match=f"the label '{re.escape(label)}' .* names no folder"):
            parse_arm(f"{label}:electra")
    assert parse_arm("v1.2:electra").slug == "v1.2"
    argv = _probe_only(tmp_path, small_corpus, tmp_path / "out", micro_overrides, "1e12")
    assert main([*argv, "--objectives", "..:mlm"]) == 2
    err = capsys.readouterr().err
    assert "the label '..' of '..:mlm' names no folder of its own" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_an_arms_fields_are_checked_before_the_vocabulary_is_trained(
    small_corpus, tmp_path, micro_overrides, capsys
):
    """Before: an unknown field or a bad value in an arm was refused only once the vocabulary was trained (OUT and
    its tokenizer cache written), and --plan blamed it on the vocabulary's size ("Counted with 600 pieces")."""
    out = tmp_path / "out"
    argv = _probe_only(tmp_path, small_corpus, out, micro_overrides, "1e12")
    for arm, said in (
        ("electra+foo=1", "unknown config key(s): foo"),
        ("mlm+mask_prob=2", "mask_prob must be"),
    ):
        for extra in ([], ["--plan"]):
            assert main([*argv, "--objectives", arm, *extra]) == 2
            err = capsys.readouterr().err
            assert said in err and "Counted with" not in err and err.count("\n") == 1, err
            assert not out.exists()


def test_two_arms_that_are_the_same_model_are_refused(small_corpus, tmp_path, micro_overrides, capsys):
    """Before: two labels (or spellings) of one objective and settings were each pretrained and fine-tuned: twice
    the compute for the same model, and two coinciding lines."""
    argv = _probe_only(tmp_path, small_corpus, tmp_path / "out", micro_overrides, "1e12") + ["--plan"]
    for arms, first, second in (
        ("electra,copy:electra", "electra", "copy"),
        (
            "electra+embedding-sharing=gdes,electra+embedding_sharing=gdes",
            "electra+embedding-sharing=gdes",
            "electra+embedding_sharing=gdes",
        ),
        ("mlm+mask_prob=0.15,mlm", "mlm+mask_prob=0.15", "mlm"),  # a field given at its default
    ):
        assert main([*argv, "--objectives", arms]) == 2
        err = capsys.readouterr().err
        assert f"'{first}' and '{second}' are the same arm" in err and err.count("\n") == 1, err
    assert main([*argv, "--objectives", "electra,seed2:electra+seed=2"]) == 0  # another seed is another model
    capsys.readouterr()


def test_out_or_cache_inside_the_corpus_folder_is_refused(small_corpus, tmp_path, micro_overrides, capsys):
    """Before: `--out CORPUS/cmp` read the comparison's own tokenizer and cache as corpus text: the first arm
    stopped after the vocabulary, on a tokenizer.json of OUT/cache that is no JSONL."""
    argv = _probe_only(tmp_path, small_corpus, tmp_path / "out", micro_overrides, "1e12") + ["--plan"]
    inside = small_corpus / "cmp"
    at_out = [str(inside) if a == str(tmp_path / "out") else a for a in argv]
    assert main(at_out) == 2
    err = capsys.readouterr().err
    assert f"--out {inside} is inside --corpus {small_corpus}" in err and err.count("\n") == 1
    assert main([*argv, "--cache-dir", str(small_corpus)]) == 2
    assert f"--cache-dir {small_corpus} is inside --corpus" in capsys.readouterr().err
    assert not inside.exists()


def test_a_cache_dir_that_is_a_file_is_refused_before_any_work(
    small_corpus, tmp_path, micro_overrides, capsys
):
    """Before: --plan accepted it, and the run stopped with a NotADirectoryError traceback."""
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    argv = _probe_only(tmp_path, small_corpus, tmp_path / "out", micro_overrides, "1e12")
    for extra in (["--plan"], []):
        assert main([*argv, "--cache-dir", str(a_file), *extra]) == 2
        err = capsys.readouterr().err
        assert f"--cache-dir {a_file} is a file; choose a directory" in err and err.count("\n") == 1
    assert a_file.read_text() == "mine"


@pytest.mark.parametrize(
    "flag, value, said",
    [
        ("--glue-batch-size", "0", "--glue-batch-size must be at least 1"),
        ("--glue-max-steps", "0", "--glue-max-steps must be at least 1"),
        ("--probe-max-train", "0", "--probe-max-train must be at least 1"),
        ("--flops-budget", "nan", "--flops-budget must be a positive, finite number"),
        ("--flops-budget", "inf", "--flops-budget must be a positive, finite number"),
        # 0 had been taken as "the default" in silence
        ("--glue-learning-rate", "0", "--glue-learning-rate must be a positive, finite number, got 0"),
        ("--glue-learning-rate", "nan", "--glue-learning-rate must be a positive, finite number"),
        # had been merged into one arm in silence
        ("--objectives", "electra,mlm,electra", "--objectives names electra more than once"),
    ],
)
def test_counts_and_budgets_are_refused_while_the_flags_are_read(
    flag, value, said, small_corpus, tmp_path, micro_overrides, capsys
):
    """Before: --plan accepted these; the run stopped at its first cell, after every arm had pretrained (a
    ZeroDivisionError for batch 0, --max-train for the probe), --glue-max-steps 0 fine-tuned by epochs, and a
    budget of nan or inf was a traceback."""
    argv = _probe_only(tmp_path, small_corpus, tmp_path / "out", micro_overrides, "1e12")
    argv[argv.index("--flops-budget") : argv.index("--flops-budget") + 2] = []
    assert main([*argv, flag, value, "--plan"]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_glue_rows_and_probe_data_are_read_before_any_work(tmp_path, small_corpus, shared_data, capsys):
    """Before: --plan and the run checked only that the task files exist; a malformed row, a missing probe file or
    a probe sample of one class stopped the run at its first cell, after every arm had pretrained."""
    glue = tmp_path / "glue"
    shutil.copytree(shared_data / "glue" / "RTE", glue / "RTE")
    argv = ["compare", "--corpus", str(small_corpus), "--out", str(tmp_path / "o"), "--glue-tasks", "rte"]
    argv += ["--glue-data", str(glue), "--flops-budget", "1e12", "--plan"]
    assert main(argv) == 0
    capsys.readouterr()
    (glue / "RTE" / "dev.tsv").write_text("garbage\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{glue / 'RTE' / 'dev.tsv'}:1: no column" in err and err.count("\n") == 1

    probe = ["compare", "--corpus", str(small_corpus), "--out", str(tmp_path / "o"), "--glue-tasks", "none"]
    probe += ["--probes", "sst2", "--probe-data", str(tmp_path / "data"), "--flops-budget", "1e12", "--plan"]
    (tmp_path / "data").mkdir()
    assert main(probe) == 2
    assert "glue/SST-2/train.tsv: not found; the sst2 probe reads" in capsys.readouterr().err
    _write_sst2(tmp_path / "data")
    assert main(probe) == 0
    capsys.readouterr()
    one_class = tmp_path / "data" / "glue" / "SST-2" / "train.tsv"
    one_class.write_text("sentence\tlabel\n" + "a good film\t1\n" * 5)
    assert main(probe) == 2
    assert "needs at least two classes" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_probe_cell_made_on_other_data_is_stale(tmp_path):
    """Before: a probe cell kept only its seeds and sample size, so after the probe's data changed (a corrected
    SST-2 file) the old accuracies stayed in the report, unlike a GLUE cell's."""
    from electra.app.compare.run import collect_results
    from electra.probes.inputs import get_probe
    from electra.probes.run import data_sha256

    data = _write_sst2(tmp_path / "data")
    settings = CompareSettings(
        corpus="c",
        out=tmp_path / "out",
        objectives=["mlm"],
        tasks=[],
        glue_data=None,
        checkpoints=1,
        seeds=[1],
        probes=["sst2"],
        probe_data=data,
    )
    folder = settings.out / "probes" / "mlm" / "1of1"
    folder.mkdir(parents=True)
    scores = {"median": 0.7, "min": 0.6, "max": 0.8, "accuracy": [0.7], "majority": 0.5}
    digests = data_sha256(get_probe("sst2"), data)
    (folder / "sst2.json").write_text(
        json.dumps({"seeds": [1], "max_train": None, "data": digests, **scores})
    )
    row = collect_results(settings, {"mlm": [dict(ONE_CELL)]}, None)["objectives"]["mlm"]["cells"][0]
    assert row["probes"]["sst2"]["median"] == 0.7
    dev = data / "glue" / "SST-2" / "dev.tsv"
    dev.write_text(dev.read_text() + "one more film\t1\n")
    row = collect_results(settings, {"mlm": [dict(ONE_CELL)]}, None)["objectives"]["mlm"]["cells"][0]
    assert row["probes"] == {}


def test_the_plan_counts_the_seeds_an_unfinished_cell_has_run(tmp_path, shared_data):
    """Before: a cell killed after some of its seeds, or a rerun with more --seeds, was counted as every seed
    left, though the run fine-tunes only the others."""
    from electra.app.compare.glue import seed_folder
    from electra.app.compare.plan import cells_done

    glue = tmp_path / "glue"
    shutil.copytree(shared_data / "glue" / "RTE", glue / "RTE")
    settings = CompareSettings(
        corpus="c", out=tmp_path / "out", objectives=["mlm"], tasks=["rte"], glue_data=glue, checkpoints=1
    )
    finetune = glue_settings(settings, build_config("tiny"))
    assert cells_done(settings, False, finetune)["glue"] == 0
    folder = seed_folder(settings.out / "glue" / "mlm" / "1of1", "rte", finetune)
    for seed in (1, 2, 7):  # seed 7 is not one of this run's
        (folder / "runs" / "rte" / f"seed-{seed}").mkdir(parents=True)
        (folder / "runs" / "rte" / f"seed-{seed}" / "result.json").write_text(json.dumps({"seed": seed}))
    (folder / "runs" / "rte" / "seed-3").mkdir()  # killed before it finished
    assert cells_done(settings, False, finetune)["glue"] == 2
    assert cells_done(settings, True, finetune)["glue"] == 0  # a run that starts over keeps none
    # seeds run on another model path (OUT moved) are fine-tuned again, so none of them counts
    (folder / "run.json").write_text(json.dumps({"model": str(tmp_path / "elsewhere")}))
    assert cells_done(settings, False, finetune)["glue"] == 0
