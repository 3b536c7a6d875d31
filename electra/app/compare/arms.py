"""The arms of a comparison and their budgets: each arm's pretraining config, fitted to the equal-FLOP budget, and
the checks that make a list of arms one comparison (registered objectives, distinct models, distinct folders).

Every arm runs with the same batch; its learning-rate schedule spans its own budget (max_steps = the steps the
budget buys), and each of the `--checkpoints` budget fractions must buy at least one whole step.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from electra.app.compare.settings import COMPARE_CONTROLS, Arm, CompareSettings, parse_arm
from electra.core.config import PretrainConfig, with_frozen_generator
from electra.core.errors import UserError
from electra.objectives import build_config, flop_report, get_objective, objective_names
from electra.training.pretraining import size_to_budget

# Settings that shape the shared vocabulary: an arm may not override them, or its ids would mean other pieces.
VOCABULARY_KEYS = ("text_form", "lowercase", "tokenizer_vocab_size")


def objective_config(settings: CompareSettings, arm: Arm | str, vocab_size: int) -> PretrainConfig:
    """The arm's PretrainConfig with its schedule fitted to the budget (same batch for every arm). Refuses a budget
    whose every fraction does not buy at least one whole step."""
    arm = parse_arm(arm) if isinstance(arm, str) else arm
    config = arm_fields(settings, arm)
    config.vocab_size = vocab_size
    keep_warmup = "warmup_steps" in settings.overrides or "warmup_steps" in dict(arm.overrides)
    steps = size_to_budget(config, settings.budget, keep_warmup=keep_warmup)
    step_flops = per_step(config)
    # Whole steps: `steps` counts the step that overshoots (at least 1), which would let a budget of 1 FLOP run
    # every arm one step, far over its budget and at unequal FLOPs.
    bought = math.floor(settings.budget / step_flops + 1e-9)
    if bought < settings.checkpoints:
        raise UserError(
            f"--flops-budget {settings.budget:.3g} buys only {bought} step(s) of {arm.label} ({step_flops:.3g} "
            f"FLOPs each); give at least {settings.checkpoints * step_flops:.3g} for {settings.checkpoints} "
            "checkpoints."
        )
    config.save_every = max(1, math.ceil(steps / (2 * settings.checkpoints)))
    config.keep_checkpoints = 1_000_000  # pruned by compare, once a fraction is exported
    return config.validate()


def arm_fields(settings: CompareSettings, arm: Arm) -> PretrainConfig:
    """The arm's config before compare fits it to the budget and the vocabulary: --set, then the arm's fields."""
    overrides = {**settings.overrides, **dict(arm.overrides), "objective": arm.objective}
    return build_config(settings.size, None, with_frozen_generator(overrides))


def per_step(config: PretrainConfig) -> float:
    """Training FLOPs of one step, generator included, as `electra.objectives.flop_report` counts them."""
    return float(flop_report(config).train_flops_per_step)


def arm_configs(settings: CompareSettings, vocab_size: int) -> dict[str, Any]:
    """Every arm's config for this vocabulary: refuses a budget that buys an arm fewer steps than checkpoints."""
    return {arm.label: objective_config(settings, arm, vocab_size) for arm in settings.arms}


def check_arms(settings: CompareSettings) -> None:
    """Every arm names a registered objective that has an encoder to evaluate, its fields are config fields with
    valid values, no two arms are the same model, and two arms never share a folder. Runs before the vocabulary is
    trained, so that a bad field is blamed on the arm rather than on the vocabulary's size."""
    slugs: dict[str, str] = {}
    recipes: dict[str, str] = {}
    for arm in settings.arms:
        _check_arm(settings, arm)
        # An arm that repeats another (another label or spelling, or a field at its default) would pretrain and
        # fine-tune the same model twice; building its config also refuses an unknown field or a bad value.
        recipe = json.dumps(asdict(arm_fields(settings, arm)), sort_keys=True, default=str)
        if recipe in recipes:
            raise UserError(
                f"--objectives: {recipes[recipe]!r} and {arm.label!r} are the same arm (objective and config "
                "fields), so both would train the same model; drop one, or make them differ (e.g. +seed=2)."
            )
        recipes[recipe] = arm.label
        if arm.slug in slugs:
            raise UserError(
                f"--objectives: {slugs[arm.slug]!r} and {arm.label!r} would share a folder; label one."
            )
        slugs[arm.slug] = arm.label


def _check_arm(settings: CompareSettings, arm: Arm) -> None:
    """One arm on its own: a registered objective with an encoder to evaluate, and no field that compare sets
    itself or that shapes the shared vocabulary."""
    if arm.objective not in objective_names():
        raise UserError(f"--objectives: {arm.objective!r} is not one of {', '.join(objective_names())}.")
    if get_objective(arm.objective).finetune_part is None and (settings.tasks or settings.probes):
        raise UserError(
            f"--objectives: {arm.objective!r} trains a scorer with no encoder to fine-tune or probe; "
            "compare it with `electra rescore`, or drop the arm."
        )
    controlled = [key for key, _ in arm.overrides if key in COMPARE_CONTROLS]
    if controlled:
        raise UserError(
            f"--objectives: the arm {arm.label!r} sets {controlled[0]}, which compare controls "
            f"({COMPARE_CONTROLS[controlled[0]]}); drop it from the arm."
        )
    shaping = [key for key, _ in arm.overrides if key in VOCABULARY_KEYS]
    if shaping:
        raise UserError(
            f"--objectives: the arm {arm.label!r} sets {', '.join(shaping)}, but every arm reads one shared "
            f"vocabulary (OUT/tokenizer); give it to all arms with --set {shaping[0]}=..."
        )
