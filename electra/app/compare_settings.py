"""What an `electra compare` run is: its settings and their defaults (no heavy imports: the CLI reads them)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.core.errors import UserError

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
# Config fields compare sets itself for every arm (`compare_arms.objective_config`,
# `compare_pretrain.pretrain_objective`): one given in an arm or with --set would be replaced, so it is refused,
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
    corpus: str
    out: Path
    objectives: list[str]
    tasks: list[str]
    glue_data: Path | None
    size: str = "tiny"
    budget: float = DEFAULT_BUDGET
    checkpoints: int = 4
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    overrides: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None
    glue_max_train_examples: int | None = DEFAULT_GLUE_MAX_TRAIN_EXAMPLES
    glue_epochs: float | None = DEFAULT_GLUE_EPOCHS
    glue_max_steps: int | None = None
    glue_batch_size: int = 32
    # None: CPU_SIZE_GLUE_LEARNING_RATE for tiny/mini, the paper's rate by width otherwise
    glue_learning_rate: float | None = None
    vocab: str | None = (
        None  # a tokenizer every arm uses (needed by a frozen generator's arm); default: train one
    )
    probes: list[str] = field(
        default_factory=list
    )  # `electra.probes.run.PROBES` names, run on every checkpoint
    probe_data: Path | None = None  # the folder holding glue/ and corpus/
    probe_max_train: int | None = None  # training sentences per probe seed; None: each probe's own default
    overwrite: bool = False  # replace a report made with other evaluation settings (the same ones resume it)

    @property
    def arms(self) -> list[Arm]:
        return [parse_arm(entry) for entry in self.objectives]
