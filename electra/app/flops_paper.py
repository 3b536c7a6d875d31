"""The ELECTRA paper's published compute figures, and our counter's figures for the same runs.

Sources: ELECTRA paper (Clark et al., ICLR 2020) Table 1 (small and base models; the dissertation's Table 5.3) and
Table 2 (large models; Table 5.4), "Train / Infer FLOPs" and "Params" columns. Each row that belongs to the
BERT/ELECTRA family carries the configuration that reproduces it: a size preset of `electra.core.config`, overrides,
and the output-position rule. Other architectures (ELMo's BiLSTMs, XLNet's two-stream attention) are listed but
not reproduced; the paper measured those with TensorFlow's profiler, not with its script.

ELECTRA-Small is the interesting row. The released Small recipe uses a generator of 1/4 width (hidden 64, FFN 256,
1 head), which costs 1.29e18 under the paper's conventions, not the published 1.4e18. A generator of 1/2 width
(hidden 128, FFN 512, 2 heads) gives 1.42e18, and so do the "50% / 25% / 12.5% / 6.25% trained" rows
(7.1e17, 3.6e17, 1.8e17, 8.9e16 = 1.42e18 / 2, 4, 8, 16; a 1.29e18 run would give 6.5e17 ... 8.1e16). BERT-Small's
1.45M steps were also chosen to match 1.42e18. So the published figure corresponds to the 1/2-width generator, not
to the 1/4 one of the released configuration (nor to the same-size generator of the released checkpoint, 1.92e18,
see google-research/electra issue #39).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from electra.objectives import build_config, flop_report

TABLE_SMALL_BASE = "paper Table 1 / dissertation Table 5.3"
TABLE_LARGE = "paper Table 2 / dissertation Table 5.4"
TOLERANCE = 0.03


@dataclass(frozen=True)
class PaperModel:
    name: str
    table: str
    train_flops: float
    infer_flops: float | None  # one length-128 sequence; the large-model table has none
    params: float  # millions, as published
    size: str | None = None  # None: another architecture, not reproduced
    overrides: dict[str, Any] = field(default_factory=dict)
    output_positions: str = "ceil"
    expect_match: bool = True  # False: we reproduce the run but the published figure differs, see `note`
    note: str = ""


_HALF = {"generator_hidden_multiplier": 0.5}

PAPER_MODELS: tuple[PaperModel, ...] = (
    PaperModel(
        "ELMo", TABLE_SMALL_BASE, 3.3e18, 2.6e10, 96, note="not reproduced (other architecture: BiLSTM)"
    ),
    PaperModel(
        "GPT",
        TABLE_SMALL_BASE,
        4.0e19,
        3.0e10,
        117,
        "base",
        dict(objective="mlm", vocab_size=40000, train_batch_size=128, max_steps=960_800),
        output_positions="all",
        note="counted as the paper did: a Base-shaped encoder with an output softmax at every position",
    ),
    PaperModel(
        "BERT-Small", TABLE_SMALL_BASE, 1.4e18, 3.7e9, 14, "small", dict(objective="mlm", max_steps=1_450_000)
    ),
    PaperModel(
        "BERT-Base", TABLE_SMALL_BASE, 6.4e19, 2.9e10, 110, "base", dict(objective="mlm", max_steps=1_000_000)
    ),
    PaperModel(
        "ELECTRA-Small (released 1/4 generator)",
        TABLE_SMALL_BASE,
        1.4e18,
        3.7e9,
        14,
        "small",
        expect_match=False,
        note="the 64-wide generator costs 1.29e18; the published 1.4e18 is the 1/2 generator",
    ),
    PaperModel(
        "ELECTRA-Small (1/2 generator)",
        TABLE_SMALL_BASE,
        1.4e18,
        3.7e9,
        14,
        "small",
        dict(_HALF),
        note="generator_hidden_multiplier=0.5 (hidden 128) reproduces the published figure",
    ),
    PaperModel(
        "ELECTRA-Small 50% trained",
        TABLE_SMALL_BASE,
        7.1e17,
        3.7e9,
        14,
        "small",
        dict(_HALF, max_steps=500_000),
    ),
    PaperModel(
        "ELECTRA-Small 25% trained",
        TABLE_SMALL_BASE,
        3.6e17,
        3.7e9,
        14,
        "small",
        dict(_HALF, max_steps=250_000),
    ),
    PaperModel(
        "ELECTRA-Small 12.5% trained",
        TABLE_SMALL_BASE,
        1.8e17,
        3.7e9,
        14,
        "small",
        dict(_HALF, max_steps=125_000),
    ),
    PaperModel(
        "ELECTRA-Small 6.25% trained",
        TABLE_SMALL_BASE,
        8.9e16,
        3.7e9,
        14,
        "small",
        dict(_HALF, max_steps=62_500),
    ),
    PaperModel("ELECTRA-Base", TABLE_SMALL_BASE, 6.4e19, 2.9e10, 110, "base"),
    PaperModel(
        "BERT-Large",
        TABLE_LARGE,
        1.9e20,
        None,
        335,
        "large",
        dict(objective="mlm", mask_prob=0.15, train_batch_size=256, max_steps=1_000_000),
    ),
    PaperModel(
        "RoBERTa-100K",
        TABLE_LARGE,
        6.4e20,
        None,
        356,
        "large",
        dict(objective="mlm", mask_prob=0.15, vocab_size=50265, train_batch_size=8000, max_steps=100_000),
    ),
    PaperModel(
        "RoBERTa-500K",
        TABLE_LARGE,
        3.2e21,
        None,
        356,
        "large",
        dict(objective="mlm", mask_prob=0.15, vocab_size=50265, train_batch_size=8000, max_steps=500_000),
    ),
    PaperModel(
        "XLNet", TABLE_LARGE, 3.9e21, None, 360, note="not reproduced (other architecture: two-stream XLNet)"
    ),
    PaperModel(
        "BERT (ours, 400K steps)",
        TABLE_LARGE,
        7.1e20,
        None,
        335,
        "large",
        dict(objective="mlm", mask_prob=0.15, max_steps=400_000),
        expect_match=False,
        note="the paper prints ELECTRA-400K's 7.1e20 for its matched BERT; the script has no entry for it, and in "
        "its conventions the run (batch 2048 x 400K, length 512, no generator) costs 6.1e20",
    ),
    PaperModel("ELECTRA-400K", TABLE_LARGE, 7.1e20, None, 335, "large", dict(max_steps=400_000)),
    PaperModel("ELECTRA-1.75M", TABLE_LARGE, 3.1e21, None, 335, "large", dict(max_steps=1_750_000)),
)


def _relative(ours: float | None, paper: float | None) -> float | None:
    if ours is None or paper is None:
        return None
    return ours / paper - 1.0


def reproduce(model: PaperModel) -> dict[str, Any]:
    """Our figures for one published row (None for rows of other architectures), with relative differences."""
    row: dict[str, Any] = {
        "name": model.name,
        "table": model.table,
        "paper_train_flops": model.train_flops,
        "paper_infer_flops": model.infer_flops,
        "paper_params_m": model.params,
        "ours_train_flops": None,
        "ours_infer_flops": None,
        "ours_params_m": None,
        "note": model.note,
        "status": "not reproduced",
    }
    if model.size is None:
        return row
    config = build_config(model.size, overrides=model.overrides)
    report = flop_report(config, output_positions=model.output_positions)
    row.update(
        size=model.size,
        overrides=dict(model.overrides),
        ours_train_flops=report.train_flops_total,
        ours_infer_flops=report.inference_flops if model.infer_flops is not None else None,
        ours_params_m=report.params["discriminator"] / 1e6,
    )
    row["train_rel_diff"] = _relative(row["ours_train_flops"], model.train_flops)
    row["infer_rel_diff"] = _relative(row["ours_infer_flops"], model.infer_flops)
    within = abs(row["train_rel_diff"]) <= TOLERANCE and (
        row["infer_rel_diff"] is None or abs(row["infer_rel_diff"]) <= TOLERANCE
    )
    row["status"] = "ok" if within else ("differs (see note)" if not model.expect_match else "MISMATCH")
    return row


def reproduce_all() -> list[dict[str, Any]]:
    return [reproduce(model) for model in PAPER_MODELS]
