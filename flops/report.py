"""Plain-text tables for `electra flops`: one configuration, or the paper's figures beside ours."""

from __future__ import annotations

from typing import Any

from electra.flops.analytic import FlopReport


def sci(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:.{digits - 1}e}"


def format_report(report: FlopReport, config: Any, measured: dict[str, Any] | None = None) -> str:
    gen = (
        f"generator={config.generator} (hidden {config.generator_hidden_size}, FFN {config.generator_intermediate_size},"
        f" heads {config.generator_num_attention_heads}, layers {config.generator_layers})"
        if report.plan is None or report.plan.generator is not None
        else "no generator"
    )
    p = report.params
    lines = [
        f"objective={report.objective}  {gen}",
        f"discriminator: hidden {config.hidden_size}, {config.num_hidden_layers} layers, FFN {config.intermediate_size},"
        f" {config.num_attention_heads} heads, embedding {config.embedding_size}, vocab {config.vocab_size}",
        f"sequence length {report.seq_len}; output head charged for {report.predicted_positions:g} positions",
        "",
        f"parameters          discriminator {p['discriminator'] / 1e6:.2f}M   generator {p['generator'] / 1e6:.2f}M"
        f"   total {p['total'] / 1e6:.2f}M",
        f"inference FLOPs     {sci(report.inference_flops)} per sequence of length "
        f"{min(128, report.seq_len)} (kept encoder + per-token head)",
        f"training FLOPs      {sci(report.train_flops_per_sequence)} per sequence   "
        f"{sci(report.train_flops_per_step)} per step (batch {report.train_batch_size})   "
        f"{sci(report.train_flops_total)} per run ({report.max_steps:,} steps)",
        "",
        f"{'component':<28}{'train FLOPs/seq':>18}{'share':>8}{'inference FLOPs/seq':>22}",
    ]
    keys = list(report.breakdown) + [k for k in report.inference_breakdown if k not in report.breakdown]
    for key in keys:
        train = report.breakdown.get(key)
        share = f"{100 * train / report.train_flops_per_sequence:.1f}%" if train else "-"
        lines.append(f"{key:<28}{sci(train):>18}{share:>8}{sci(report.inference_breakdown.get(key)):>22}")
    lines.append(
        "conventions: multiply-add = 2 FLOPs, backward = forward, one-hot embedding lookups (ELECTRA paper)."
    )
    if measured is not None:
        lines += [
            "",
            f"measured (one training step of the objective's model under FlopCounterMode, {measured['device']}, "
            f"batch {measured['batch_size']} of length {measured['seq_len']}, "
            f"{measured['predicted_positions']:g} predicted slots per row): forward matmuls "
            f"{sci(measured['measured_forward'])} vs analytic {sci(measured['analytic_forward'])} per sequence "
            f"(ratio {measured['ratio']:.4f}); backward/forward {measured['backward_to_forward']:.3f}",
        ]
        if not measured.get("startup_flop_check", True):
            lines.append(
                "note: this objective's steps differ by design (its plan charges the run's average), so the "
                "ratio of one step is not expected to be 1; pretraining skips its start-up check."
            )
    return "\n".join(lines)


def format_paper(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'model':<40}{'train (paper)':>14}{'train (ours)':>14}{'diff':>8}"
        f"{'infer (paper)':>15}{'infer (ours)':>14}{'params paper/ours':>19}  status"
    )
    lines = [header, "-" * len(header)]
    table = None
    for row in rows:
        if row["table"] != table:
            table = row["table"]
            lines.append(f"[{table}]")
        diff = row.get("train_rel_diff")
        params = f"{row['paper_params_m']:g}M/" + (
            "-" if row["ours_params_m"] is None else f"{row['ours_params_m']:.1f}M"
        )
        lines.append(
            f"{row['name']:<40}{sci(row['paper_train_flops'], 2):>14}{sci(row['ours_train_flops']):>14}"
            f"{'-' if diff is None else f'{100 * diff:+.1f}%':>8}{sci(row['paper_infer_flops'], 2):>15}"
            f"{sci(row['ours_infer_flops']):>14}{params:>19}  {row['status']}"
        )
        if row["note"]:
            lines.append(f"{'':<4}note: {row['note']}")
    lines.append(
        "ours: electra.flops.analytic.count_flops (the objective's FlopPlan) on the named size preset and overrides (`electra flops --size S --set k=v`)."
    )
    return "\n".join(lines)
