"""What an `electra compare` run is: its settings and their defaults (no heavy imports: the CLI reads them)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.settings import COUNT, POSITIVE, check_declared, setting

# Chosen so that tiny, electra+mlm, sst2,mrpc,stsb,rte, 3 seeds fit in about an hour on 2 CPU cores: see the README
# ("Equal-compute comparison") for the measurement and the arithmetic.
DEFAULT_BUDGET = 6.0e13
DEFAULT_GLUE_MAX_TRAIN_EXAMPLES = 1000
DEFAULT_GLUE_EPOCHS = 3.0
# The paper has no fine-tuning recipe for our CPU sizes; its Small rate (3e-4, what their width would get) leaves a
# ~100-update fine-tuning of `tiny` at the majority class, 1e-3 does not (README, "Equal-compute comparison").
CPU_SIZE_GLUE_LEARNING_RATE = 1e-3
DEFAULT_OBJECTIVES = "electra,mlm"
DEFAULT_TASKS = "sst2,mrpc,stsb,rte"
# Settings that define the pretraining runs: a rerun into the same OUT must agree on them.
PRETRAINING_KEYS = ("corpus", "size", "overrides", "budget", "checkpoints", "vocab")
# Config fields compare sets itself for every arm (`arms.objective_config`,
# `pretrain.pretrain_objective`): one given in an arm or with --set would be replaced, so it is refused,
# naming what controls it instead.
COMPARE_CONTROLS = {
    "objective": "the arm's OBJECTIVE, the name before its first +",
    "max_steps": "--flops-budget: every arm runs the steps its budget buys",
    "flops_budget": "--flops-budget: each budget fraction stops at its share of it",
    "time_budget_minutes": "--flops-budget: every arm stops at its FLOPs, not after a time",
    "save_every": "--checkpoints: a checkpoint twice per budget fraction",
    "keep_checkpoints": "--checkpoints: a fraction's checkpoints are pruned once it is exported",
    "vocab_size": "the shared vocabulary, OUT/tokenizer or --vocab",
}


@dataclass(frozen=True)
class Arm:
    """One line of a comparison: an objective and the config fields it changes (`[LABEL:]OBJECTIVE[+KEY=VALUE]...`,
    e.g. `electra+embedding_sharing=gdes` or `fast:electra+generator_from=runs/gen`). The label names the arm in
    tables and plots and (made safe for a file name) its folders."""

    label: str
    objective: str
    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.+=-]+", "_", self.label).strip("_") or "arm"


def parse_arm(entry: str) -> Arm:
    entry = entry.strip()
    label, colon, spec = entry.partition(":")
    if not colon or "+" in label or "=" in label or "/" in label:
        label, spec = "", entry
    objective, *settings = spec.split("+")
    overrides = []
    for item in settings:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise UserError(f"--objectives: in the arm {entry!r}, {item!r} must look like key=value.")
        overrides.append((key.strip().replace("-", "_"), value.strip()))
    objective = objective.strip().lower()
    arm = Arm(
        label.strip() or f"{objective}{''.join('+' + item for item in settings)}", objective, tuple(overrides)
    )
    if not arm.slug.strip("."):
        # a label such as `..` would put the arm's runs in OUT itself (OUT/pretrain/..), beside the other arms
        raise UserError(
            f"--objectives: the label {arm.label!r} of {entry!r} names no folder of its own; give a label with a "
            "letter or digit."
        )
    return arm


@dataclass
class CompareSettings:
    """An `electra compare` run. The fields declared with `setting` carry their flag, help and range: the CLI
    builds those flags from here (`electra.core.flags.add_setting_flags`) and every instance is checked against the
    ranges when it is made. The rest are set by the CLI from flags it reads by hand (lists, paths, seeds)."""

    corpus: str
    out: Path
    objectives: list[str]
    tasks: list[str]
    glue_data: Path | None
    size: str = setting("tiny", "model size preset (tiny, mini, small, base, large)", flags=("--size",))
    budget: float = setting(
        DEFAULT_BUDGET,
        "training FLOPs per objective",
        within=POSITIVE,
        flags=("--flops-budget",),
        metavar="FLOPS_BUDGET",
    )
    checkpoints: int = setting(
        4, "evenly spaced budget fractions to evaluate", within=COUNT, flags=("--checkpoints",)
    )
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    overrides: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = setting(
        None, "tokenizer/example cache (default OUT/cache)", flags=("--cache-dir",)
    )
    # The flag's 0 ("all", "the paper's") is None here.
    glue_max_train_examples: int | None = setting(
        DEFAULT_GLUE_MAX_TRAIN_EXAMPLES,
        "fixed random subset of each task's train set; 0 = all",
        flags=("--glue-max-train-examples",),
    )
    glue_epochs: float | None = setting(
        DEFAULT_GLUE_EPOCHS, "fine-tuning epochs; 0 = the paper's", flags=("--glue-epochs",)
    )
    glue_max_steps: int | None = setting(
        None, "fine-tuning updates (overrides epochs)", within=COUNT, flags=("--glue-max-steps",)
    )
    glue_batch_size: int = setting(32, "fine-tuning batch size", within=COUNT, flags=("--glue-batch-size",))
    glue_learning_rate: float | None = setting(
        None,
        f"fine-tuning peak rate (default {CPU_SIZE_GLUE_LEARNING_RATE:g} for tiny/mini, the paper's by width "
        "for small/base/large)",
        within=POSITIVE,
        flags=("--glue-learning-rate",),
    )
    vocab: str | None = setting(
        None,
        "tokenizer every arm uses (default: train one on the corpus, or a frozen generator's)",
        flags=("--vocab",),
    )
    probes: list[str] = field(
        default_factory=list
    )  # `electra.probes.inputs.PROBES` names, run on every checkpoint
    probe_data: Path | None = None  # the folder holding glue/ and corpus/
    probe_max_train: int | None = setting(
        None,
        "training sentences each probe seed draws (default: the probe's own, sst2 10000, pos 2000)",
        within=COUNT,
        flags=("--probe-max-train",),
    )
    overwrite: bool = False  # replace a report made with other evaluation settings (the same ones resume it)

    def __post_init__(self) -> None:
        check_declared(self, "compare")

    @property
    def arms(self) -> list[Arm]:
        return [parse_arm(entry) for entry in self.objectives]
