"""`electra compare`: the ELECTRA paper's central experiment (score against pretraining FLOPs) on one machine.

Every objective is pretrained on the same corpus, with the same WordPiece vocabulary (trained once, saved to
OUT/tokenizer/) and the same cached examples, to the same budget of training FLOPs as `electra.objectives.flop_report`
counts them (generator included). Each run's learning-rate schedule spans its own budget, and a checkpoint is
exported at each of `--checkpoints` evenly spaced fractions of the budget. Every checkpoint is then fine-tuned on
each GLUE task with every seed, and the per-task median and the paper's average are tabulated (OUT/results.{md,json})
and plotted against training FLOPs (OUT/curve.png, one line per objective, like the paper's Figure 5.1).

An arm is an objective plus config fields (`electra+embedding_sharing=gdes`, `fast:electra+generator_from=DIR`,
`settings.parse_arm`), so generator and sharing variants are compared like objectives. Next to GLUE (or
instead of it: `--glue-tasks none`), `--probes` fits linear probes on every checkpoint's frozen features and on a
randomly initialised encoder.

Resumable at cell granularity: every pretraining fraction, fine-tuning cell and probe cell is written by rename,
so a killed run loses at most the cell in progress.

This package runs the comparison in order and gathers its public API; each part is a module of its own:

- `settings`: the settings and the arm syntax; `layout`: OUT's folders and records;
- `arms`: each arm's config fitted to the budget, and the checks on the list of arms;
- `checks`: every refusal made before anything is written; `rerun`: what a rerun into the same
  OUT must agree on (compare.json, results.json);
- `vocab`: the shared vocabulary; `pretrain`: pretraining and exporting the budget fractions;
- `glue`, `probes`: the fine-tuning and probe cells, and resuming them;
- `report`, `plot`: results.json, results.md and curve.png; `plan`: `--plan`.
"""

from __future__ import annotations

from typing import Any

from electra.app.compare.arms import arm_configs, check_arms, objective_config
from electra.app.compare.checks import check_inputs
from electra.app.compare.glue import finetune_cell, glue_settings
from electra.app.compare.plan import describe_plan
from electra.app.compare.plot import curve_figure, plot_curve
from electra.app.compare.pretrain import checkpoint_reaching, export_checkpoint, pretrain_objective
from electra.app.compare.probes import probe_cell
from electra.app.compare.report import collect_results, format_markdown, seed_averages, write_report
from electra.app.compare.rerun import record_manifest
from electra.app.compare.settings import CompareSettings
from electra.app.compare.vocab import prepare_tokenizer
from electra.core.config import PretrainConfig
from electra.core.output_lock import output_lock
from electra.data.tokenization import load_saved_tokenizer
from electra.glue.settings import FinetuneSettings

__all__ = [
    "CompareSettings",
    "check_arms",
    "check_inputs",
    "checkpoint_reaching",
    "collect_results",
    "curve_figure",
    "describe_plan",
    "export_checkpoint",
    "finetune_cell",
    "format_markdown",
    "glue_settings",
    "objective_config",
    "plot_curve",
    "prepare_tokenizer",
    "pretrain_objective",
    "probe_cell",
    "run_compare",
    "seed_averages",
    "write_report",
]


def run_compare(settings: CompareSettings) -> dict:
    """Run (or resume) the comparison in `settings.out` and return its results (as results.json holds them). One
    run at a time per OUT: a second one beside a live one would fine-tune the same cells and race it for
    OUT/tokenizer, so it is refused by OUT's lock."""
    base, finetune, manifest, restart = check_inputs(settings)
    with output_lock(settings.out):
        return _run_compare(settings, base, finetune, manifest, restart)


def _run_compare(
    settings: CompareSettings,
    base: PretrainConfig,
    finetune: FinetuneSettings,
    manifest: dict[str, Any],
    restart: bool,
) -> dict:
    """The vocabulary and the manifest, every arm pretrained, then the cells fraction by fraction (the report
    rewritten after each arm's fraction, so a long run shows its curve as it grows)."""

    # The steps each budget buys depend on the vocabulary, so they are checked once it is trained (or loaded) and
    # before OUT/tokenizer or OUT/compare.json is written: a refused run leaves nothing that binds the next one.
    def check(size: int) -> None:
        arm_configs(settings, size)
        # A new OUT's manifest comes before OUT/tokenizer: a folder holding one without compare.json is no
        # comparison's (`refuse_foreign_out`). A stale manifest is replaced only after it (below): a kill in
        # between must leave the old one, which still asks for --overwrite and so a new vocabulary.
        if not restart:
            record_manifest(settings, manifest)

    tokenizer_dir = prepare_tokenizer(settings, base, check=check, replace=restart)
    arm_configs(settings, len(load_saved_tokenizer(tokenizer_dir)))
    record_manifest(settings, manifest, replace=restart)
    cells = {arm.label: pretrain_objective(settings, arm, tokenizer_dir) for arm in settings.arms}
    results = collect_results(settings, cells, finetune)
    write_report(results, settings.out)
    for probe in settings.probes:
        probe_cell(settings, None, probe)
    for index in range(settings.checkpoints):
        for arm in settings.arms:
            for probe in settings.probes:
                probe_cell(settings, cells[arm.label][index], probe)
            for task in settings.tasks:
                finetune_cell(settings, cells[arm.label][index], task, finetune)
            results = collect_results(settings, cells, finetune)
            write_report(results, settings.out)
    print(format_markdown(results))
    return results
