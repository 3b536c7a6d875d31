"""bench/electra_vs_mlm.py end to end at `tiny` on data built here: both objectives pretrained to one FLOP budget,
probed and fine-tuned, one table and one figure; a rerun resumes, skips a missing data folder in one line, and
starts no evaluation cell once its time limit is spent."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "electra_vs_mlm.py"
BUDGET = 1.5e11  # a few steps of tiny: ELECTRA costs at most 5.8e10 FLOPs a step, MLM 3.6e10 (8,192 pieces)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_electra_vs_mlm", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _data(root: Path) -> dict[str, Path]:
    """SST-2, a Brown-style POS folder and GLUE's RTE, each a few rows in the layout the readers expect."""
    sst2 = root / "SST-2"
    sst2.mkdir(parents=True)
    rows = "".join(f"a {'fine' if i % 2 else 'dull'} film, take {i}\t{i % 2}\n" for i in range(24))
    for split in ("train", "dev"):
        (sst2 / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)
    brown = root / "brown"
    brown.mkdir()
    words = [
        ("the", "at"),
        ("committee", "nn-tl"),
        ("met", "vbd"),
        ("on", "in"),
        ("tuesday", "nr"),
        (".", "."),
    ]
    lines = [" ".join(f"{w}/{t}" for w, t in words[i % 3 :]) for i in range(30)]
    (brown / "ca01").write_text("\n".join(lines) + "\n")
    rte = root / "glue" / "RTE"
    rte.mkdir(parents=True)
    labels = ("entailment", "not_entailment")
    pairs = "".join(
        f"{i}\tThe storm crossed the coast on day {i}.\tA storm {'crossed' if i % 2 else 'missed'} the coast.\t"
        f"{labels[i % 2]}\n"
        for i in range(16)
    )
    for split in ("train", "dev"):
        (rte / f"{split}.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + pairs)
    return {"sst2": sst2, "pos": brown, "glue": root / "glue"}


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_equal_budgets_one_table_one_figure_and_a_timed_out_rerun(tmp_path, small_corpus, capsys):
    data = _data(tmp_path / "data")
    out = tmp_path / "study"
    argv = ["--size", "tiny", "--flops-budget", str(BUDGET), "--checkpoints", "1", "--seeds", "1"]
    argv += ["--corpus", str(small_corpus), "--out", str(out), "--glue-tasks", "rte", "--glue-max-steps", "2"]
    argv += ["--sst2", str(data["sst2"]), "--pos", str(data["pos"]), "--glue-data", str(data["glue"])]
    record = _bench().main(argv)

    rows = {row["objective"]: row for row in record["rows"]}
    assert list(rows) == ["electra", "mlm"]
    for row in rows.values():
        # each run stops at the first step whose FLOPs reach the budget: at most one step past it
        assert BUDGET <= row["train_flops"] < BUDGET + row["flops_per_step"]
        assert row["steps"] * row["flops_per_step"] == pytest.approx(row["train_flops"])
        assert row["train_seconds"] > 0
        assert 0.0 <= row["probes"]["sst2"] <= 1.0 and 0.0 <= row["probes"]["pos"] <= 1.0
        assert 0.0 <= row["glue"]["rte"] <= 1.0 and row["glue_average"] == row["glue"]["rte"]
    # the same budget bought ELECTRA fewer steps than MLM (its generator and discriminator both run)
    assert rows["electra"]["flops_per_step"] > rows["mlm"]["flops_per_step"]
    assert rows["electra"]["steps"] < rows["mlm"]["steps"]
    assert abs(rows["electra"]["train_flops"] - rows["mlm"]["train_flops"]) < max(
        row["flops_per_step"] for row in rows.values()
    )
    assert set(record["random_encoder"]) == {"sst2", "pos"} and record["skipped"] == []

    table = (out / "electra_vs_mlm.md").read_text().splitlines()
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    assert header == [
        "objective",
        "train FLOPs",
        "steps",
        "FLOPs/step",
        "train wall (min)",
        "probe sst2",
        "probe pos",
        "rte",
        "GLUE avg",
    ]
    body = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:5]]
    assert [cells[0] for cells in body] == ["electra", "mlm", "random encoder"]
    assert all(len(cells) == len(header) for cells in body)
    assert body[0][2] == str(rows["electra"]["steps"]) and body[1][2] == str(rows["mlm"]["steps"])
    assert body[0][5] == f"{100 * rows['electra']['probes']['sst2']:.1f}"
    assert json.loads((out / "electra_vs_mlm.json").read_text()) == record
    assert _png_size(out / "electra_vs_mlm.png") == (1320, 924)  # 12 x 8.4 inches at 110 dpi
    capsys.readouterr()

    # A rerun resumes: nothing pretrains again. With the Brown folder gone its probe is skipped in one line, and
    # with other seeds (every cell stale) and no time left, no evaluation cell starts; the table is still written.
    exports = sorted(out.glob("checkpoints/*/1of1/discriminator/model.safetensors"))
    stamps = [path.stat().st_mtime_ns for path in exports]
    again = [*argv, "--time-limit", "1e-6"]
    again[again.index("--pos") + 1] = str(tmp_path / "no-such-folder")
    again[again.index("--seeds") + 1] = "2"
    rerun = _bench().main(again)
    printed = capsys.readouterr().out
    assert f"skipping the pos probe: --pos {tmp_path / 'no-such-folder'} is not a folder" in printed
    assert [path.stat().st_mtime_ns for path in exports] == stamps
    assert [row["train_flops"] for row in rerun["rows"]] == [rows[k]["train_flops"] for k in rows]
    assert rerun["skipped"] == [
        "probe sst2 on electra 1of1",
        "probe sst2 on mlm 1of1",
        "probe sst2 on random encoder",
        "glue rte on electra 1of1",
        "glue rte on mlm 1of1",
    ]
    assert "no time left for probe sst2 on electra 1of1" in printed
    assert all(row["probes"] == {"sst2": None} and row["glue_average"] is None for row in rerun["rows"])
    assert "probe pos" not in (out / "electra_vs_mlm.md").read_text()


def test_missing_data_folders_are_skipped_and_the_corpus_is_the_librarys(tmp_path, capsys):
    """No probe or GLUE data: each part is named once as skipped, nothing is trained when the settings are made,
    and without --corpus the runs read the library's default corpus (on this CPU in fp32)."""
    from electra.data.embedded_corpus import ensure_embedded_corpus

    bench = _bench()
    args = bench.parse_args(["--out", str(tmp_path / "out"), "--glue-data", str(tmp_path / "absent")])
    settings = bench.study_settings(args, tmp_path / "out")
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "electra_vs_mlm: skipping the sst2 probe: --sst2 not given",
        "electra_vs_mlm: skipping the pos probe: --pos not given",
        f"electra_vs_mlm: skipping GLUE: --glue-data {tmp_path / 'absent'} is not a folder",
    ]
    assert settings.probes == [] and settings.tasks == [] and settings.objectives == ["electra", "mlm"]
    assert settings.corpus == str(ensure_embedded_corpus()) and settings.size == "tiny"
    assert settings.budget == bench.DEFAULT_BUDGETS["tiny"]
    assert settings.overrides["mixed_precision"] == "no"  # no GPU here: fp32
    assert not (tmp_path / "out").exists()
