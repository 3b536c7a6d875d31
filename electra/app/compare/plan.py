"""`electra compare --plan`: what a run would do (steps per arm and fraction, fine-tuning runs and probe cells, and
how much of it is already on disk), computed without training or writing anything."""

from __future__ import annotations

import math

from electra.app.compare.arms import objective_config, per_step
from electra.app.compare.checks import check_inputs
from electra.app.compare.glue import current_cell, seeds_on_disk
from electra.app.compare.layout import fraction_name, glue_cell, probe_folder
from electra.app.compare.pretrain import exported_fractions
from electra.app.compare.probes import probes_on_disk
from electra.app.compare.report import probe_sample
from electra.app.compare.settings import Arm, CompareSettings
from electra.app.compare.vocab import given_tokenizer
from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.data.tokenization import load_saved_tokenizer
from electra.glue.settings import FinetuneSettings


def describe_plan(settings: CompareSettings) -> str:
    """What a run will do: steps per objective and fraction, and the number of fine-tuning runs (trains and writes
    nothing). It refuses what a run would refuse (`check_inputs`); the steps a budget buys are counted with the
    vocabulary the run would use, or, before one is trained, with tokenizer_vocab_size pieces (an upper bound: a
    trained vocabulary is at most that big, and a smaller one makes every step cheaper)."""
    base, finetune, _, restart = check_inputs(settings)
    vocab, source, estimated = _plan_vocabulary(settings, base, restart)
    lines = [f"budget {settings.budget:.3g} training FLOPs per objective; vocabulary {vocab} from {source}"]
    if restart:
        lines.append(
            f"{settings.out / 'compare.json'} records other pretraining settings, but no arm was pretrained under "
            "them: --overwrite starts the comparison over with these"
        )
    lines += [_arm_line(settings, arm, vocab, estimated) for arm in settings.arms]
    return "\n".join(lines + _evaluation_lines(settings, finetune, restart))


def _plan_vocabulary(settings: CompareSettings, base: PretrainConfig, restart: bool) -> tuple[int, str, bool]:
    """The vocabulary size the run would use, where it comes from, and whether it is an estimate (not trained
    yet)."""
    if (settings.out / "tokenizer" / "tokenizer.json").is_file() and not restart:
        return len(load_saved_tokenizer(settings.out / "tokenizer")), "OUT/tokenizer", False
    given = given_tokenizer(settings, base)
    if given is not None:
        return len(given), settings.vocab or "the frozen generator", False
    return (
        base.tokenizer_vocab_size,
        "tokenizer_vocab_size (the trained vocabulary may be a little smaller)",
        True,
    )


def _arm_line(settings: CompareSettings, arm: Arm, vocab: int, estimated: bool) -> str:
    """One arm's schedule: FLOPs per step, steps, warmup, the step of each checkpoint, the fractions exported."""
    try:
        config = objective_config(settings, arm, vocab)
    except UserError as exc:
        if not estimated:
            raise
        raise UserError(
            f"{exc} (Counted with {vocab} pieces, tokenizer_vocab_size: the vocabulary is not trained yet.)"
        ) from None
    step_flops = per_step(config)
    steps = [
        math.ceil(settings.budget * k / settings.checkpoints / step_flops - 1e-9)
        for k in range(1, settings.checkpoints + 1)
    ]
    return (
        f"{arm.label}: {step_flops:.4g} FLOPs/step (batch {config.train_batch_size} x {config.max_seq_length}), "
        f"{config.max_steps} steps, warmup {config.warmup_steps}, checkpoints at steps {steps}"
        + _done_of(exported_fractions(settings, arm), settings.checkpoints, "exported")
    )


def _evaluation_lines(settings: CompareSettings, finetune: FinetuneSettings, restart: bool) -> list[str]:
    """The fine-tuning runs and probe cells a run would do, and how many of them are on disk."""
    done = cells_done(settings, restart, finetune)
    runs = len(settings.objectives) * settings.checkpoints * len(settings.tasks) * len(settings.seeds)
    lines = [
        f"fine-tuning: {runs} runs ({len(settings.objectives)} objectives x {settings.checkpoints} checkpoints x "
        f"{len(settings.tasks)} tasks x {len(settings.seeds)} seeds)" + _done_of(done["glue"], runs, "done")
    ]
    if settings.probes:
        cells = len(settings.objectives) * settings.checkpoints + 1
        lines.append(
            f"probes: {', '.join(settings.probes)} on {cells} encoders (every checkpoint and a random one), "
            f"{len(settings.seeds)} seeds, {probe_sample(settings.probe_max_train)} training sentences each"
            + _done_of(done["probes"], cells * len(settings.probes), "(encoder, probe) cells done")
        )
    return lines


def _done_of(done: int, total: int, what: str) -> str:
    """The part of a plan a rerun finds already on disk, so that the plan of a resumed comparison counts only
    what is left."""
    return f"; {done} of {total} {what}, {total - done} left" if done else ""


def cells_done(settings: CompareSettings, restart: bool, finetune: FinetuneSettings) -> dict[str, int]:
    """The fine-tuning runs (seeds) and probe cells on disk that a run would keep (made with the current seeds and
    settings); none when the run starts over. The seeds of an unfinished cell count too: a rerun with more
    --seeds, or one killed inside a cell, fine-tunes only the others."""
    if restart:
        return {"glue": 0, "probes": 0}
    glue = probes = 0
    for arm in settings.arms:
        for i in range(1, settings.checkpoints + 1):
            name = fraction_name(i, settings.checkpoints)
            for task in settings.tasks:
                cell = glue_cell(settings, arm.slug, name, task)
                if current_cell(cell, settings, finetune, task) is not None:
                    glue += len(settings.seeds)
                else:
                    glue += seeds_on_disk(settings, arm.slug, name, task, finetune)
            probes += len(probes_on_disk(settings, probe_folder(settings, arm.slug, name)))
    return {"glue": glue, "probes": probes + len(probes_on_disk(settings, probe_folder(settings)))}
