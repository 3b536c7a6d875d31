"""What a finished pretraining run publishes: the export's parts with their model cards, and summary.json. The
cards' facts are all read from the run (`electra.export.model_card` renders them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from electra.core.config import PretrainConfig
from electra.core.files import write_json_atomically
from electra.core.version import __version__
from electra.data.tokenization import text_form_of
from electra.export.layout import read_export
from electra.export.model_card import CardFacts, write_export_cards
from electra.objectives import get_objective
from electra.training.run_folder import RunInputs, corpus_sample, tokenizer_sha256


def card_facts(
    config: PretrainConfig,
    inputs: RunInputs,
    model: Any,
    tokenizer: Any,
    result: Any,
    examples: str,
    held_out: Any,
) -> CardFacts:
    """What the export's model cards state, all read from the run (electra.export.model_card renders them)."""
    objective = get_objective(config.objective)
    encoder = objective.kept_encoder(model)
    shape = (
        f"hidden {config.hidden_size}, {config.num_hidden_layers} layers, {config.num_attention_heads} heads, "
        f"intermediate {config.intermediate_size}, embeddings {config.embedding_size}, "
        f"{config.max_position_embeddings} positions; {sum(p.numel() for p in encoder.parameters()):,} parameters"
    )
    generator = "none"
    if model.generator is not None:
        generator = f"{config.generator}, {sum(p.numel() for p in model.generator.parameters()):,} parameters"
    held = f", {len(held_out):,} held out for eval/..." if held_out is not None else ""
    mfu = f", MFU {result.metrics['mfu']:.1%} in the last logged window" if "mfu" in result.metrics else ""
    rows = [
        ("objective", f"`{config.objective}`: {objective.summary}"),
        ("generator", generator),
        (
            "corpus",
            f"`{Path(inputs.corpus).name}`, sha256 of names, sizes and first 64 KiB "
            f"`{corpus_sample(inputs.corpus)[:16]}`; {examples} for training{held}",
        ),
        (
            "vocabulary",
            f"{len(tokenizer):,} WordPiece pieces, "
            f"{'words form' if text_form_of(tokenizer) == 'words' else 'lowercased' if config.lowercase else 'cased'}, "
            f"sha256 `{tokenizer_sha256(tokenizer)[:16]}`",
        ),
        ("model", shape),
        ("steps", f"{result.step:,} of {config.max_steps:,} (stopped by {result.stop_reason})"),
        (
            "batch",
            f"{config.train_batch_size} sequences of up to {config.max_seq_length} tokens, "
            f"learning rate {config.learning_rate:g}, warmup {config.warmup_steps:,}, seed {config.seed}",
        ),
        (
            "compute",
            f"{result.flops:.3g} training FLOPs (the ELECTRA paper's accounting), {result.seconds / 60:.1f} "
            f"minutes, precision {config.mixed_precision}{mfu}",
        ),
        ("software", f"electra {__version__}"),
    ]
    # in the table already, or how fast the machine ran rather than what the model learnt
    run_figures = ("learning_rate", "flops", "elapsed_seconds", "tokens_per_second", "mfu")
    metrics = {f"train/{k}": v for k, v in result.metrics.items() if k not in run_figures}
    if result.evaluations:
        metrics.update({f"eval/{k}": v for k, v in result.evaluations[-1].items() if k != "step"})
    return CardFacts(
        title=f"{Path(inputs.output_dir).name}: `{config.objective}` pretraining",
        summary=f"An encoder pretrained with the `{config.objective}` objective by the `electra` library "
        "(ELECTRA / Electric). Fine-tune the discriminator (or the masked LM of the `mlm` baseline); "
        "`export.json` beside it says which part is which.",
        facts=rows,
        metrics=metrics,
        tags=(config.objective, "pretraining"),
    )


def export_run(
    model: Any, tokenizer: Any, output_dir: Path, facts: CardFacts, summary: dict[str, Any], task: Any
) -> dict[str, Path]:
    """The trained parts in the export layout, with their model cards, and summary.json; returns the parts."""
    written = model.export(output_dir, tokenizer)
    write_export_cards(output_dir, written, read_export(output_dir).kinds, facts)
    summary = dict(summary, exports={k: str(v) for k, v in written.items()})
    if task.flop_check is not None:
        summary["flop_counter_check"] = task.flop_check
    write_json_atomically(output_dir / "summary.json", summary)
    return written
