"""The fine-tuning optimizer every downstream task shares: AdamW with layer-wise learning-rate decay.

ELECTRA fine-tunes with lower learning rates for layers closer to the input (paper, Table 5.2 / appendix A).
The rule implemented here is the one the paper describes, written out for a model with n Transformer layers:

    head (task layer, BERT pooler, anything outside the encoder)   base_lr
    encoder layer k (0-based, k = 0 .. n-1)                        base_lr * decay ** (n - 1 - k)
    embeddings (word/position/type, their LayerNorm, the
    embeddings_project of factorised models)                       base_lr * decay ** n

so the top layer trains at the head's full rate and every step down multiplies by `decay` once.

The reference implementation (google-research/electra, `model/optimization.py`, `_get_layer_lrs`) gives depth 0 to
the embeddings, k + 1 to layer k and n + 2 to the task head, then uses base_lr * decay ** (n + 2 - depth): no
parameter has depth n + 1, so every encoder layer and the embeddings get one decay factor squared too many (the top
layer trains at decay**2 of the head's rate). `original_off_by_one=True` reproduces that rule, for matching
published numbers exactly.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import nn

# Parameters whose name matches get no weight decay (as the reference's exclude_from_weight_decay list).
NO_DECAY_PATTERN = re.compile(r"LayerNorm|layer_norm|bias")


def find_base_encoder(model: nn.Module) -> tuple[str, nn.Module]:
    """The (prefix, module) of the BERT-style encoder inside `model`: the first module with `embeddings` and
    `encoder.layer`. Works for ElectraModel/BertModel themselves, the HF heads (`.electra`, `.bert`) and wrappers."""
    for name, module in model.named_modules():
        encoder = getattr(module, "encoder", None)
        if hasattr(module, "embeddings") and isinstance(getattr(encoder, "layer", None), nn.ModuleList):
            return name, module
    raise ValueError(
        f"{type(model).__name__} has no BERT/ELECTRA-style encoder (a module with .embeddings and .encoder.layer)"
    )


def _layer_exponents(n_layers: int, original_off_by_one: bool) -> dict[str, int]:
    """Group name -> power of `decay` applied to base_lr."""
    if original_off_by_one:
        depths = {"embeddings": 0, "head": n_layers + 2}
        depths.update({f"layer_{k}": k + 1 for k in range(n_layers)})
        return {group: n_layers + 2 - depth for group, depth in depths.items()}
    exponents = {"embeddings": n_layers, "head": 0}
    exponents.update({f"layer_{k}": n_layers - 1 - k for k in range(n_layers)})
    return exponents


def _group_of(name: str, prefix: str) -> str:
    """Which layer-wise group the parameter `name` (as in model.named_parameters()) belongs to."""
    inner = (
        name[len(prefix) + 1 :]
        if prefix and name.startswith(prefix + ".")
        else (name if not prefix else None)
    )
    if inner is None:
        return "head"
    if inner.startswith("embeddings.") or inner.startswith("embeddings_project."):
        return "embeddings"
    match = re.match(r"encoder\.layer\.(\d+)\.", inner)
    if match:
        return f"layer_{int(match.group(1))}"
    return "head"


def layerwise_lr_groups(
    model: nn.Module,
    base_lr: float,
    layer_decay: float,
    weight_decay: float = 0.0,
    original_off_by_one: bool = False,
) -> list[dict[str, Any]]:
    """Optimizer parameter groups with layer-wise decayed learning rates (see the module docstring for the rule).

    Each group is a dict torch optimizers accept: `params`, `lr`, `weight_decay`, plus `name` (embeddings,
    layer_0 ... layer_{n-1}, head; with a `/no_decay` suffix for LayerNorm and bias parameters when weight_decay
    > 0) and `param_names`. Groups run from the input upwards; frozen parameters are left out.
    """
    prefix, base = find_base_encoder(model)
    n_layers = len(base.encoder.layer)
    exponents = _layer_exponents(n_layers, original_off_by_one)
    order = ["embeddings"] + [f"layer_{k}" for k in range(n_layers)] + ["head"]
    buckets: dict[tuple[str, bool], list[tuple[str, nn.Parameter]]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decayed = weight_decay > 0 and not NO_DECAY_PATTERN.search(name)
        buckets.setdefault((_group_of(name, prefix), decayed), []).append((name, param))
    groups = []
    for group in order:
        for decayed in (True, False):
            members = buckets.get((group, decayed))
            if not members:
                continue
            label = group if decayed or weight_decay <= 0 else f"{group}/no_decay"
            groups.append(
                {
                    "name": label,
                    "params": [p for _, p in members],
                    "param_names": [n for n, _ in members],
                    "lr": base_lr * layer_decay ** exponents[group],
                    "weight_decay": weight_decay if decayed else 0.0,
                }
            )
    return groups


def linear_warmup_decay(total_steps: int, warmup_steps: int):
    """LR multiplier for update number s (0-based): min(1, (s+1)/warmup) * max(0, 1 - s/total).

    The first update already moves the weights (at 1/warmup of the rate) and the last one (s = total-1) still has
    a positive rate; the rate would reach 0 at s = total, as the reference's polynomial decay to 0 does.
    """
    total = max(1, int(total_steps))
    warmup = max(0, int(warmup_steps))

    def factor(step: int) -> float:
        ramp = 1.0 if warmup == 0 else min(1.0, (step + 1) / warmup)
        return ramp * max(0.0, 1.0 - step / total)

    return factor


def build_finetune_optimizer(
    model: nn.Module,
    lr: float,
    layer_decay: float,
    total_steps: int,
    warmup_fraction: float = 0.1,
    weight_decay: float = 0.0,
    adam_epsilon: float = 1e-6,
    original_off_by_one: bool = False,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (betas 0.9/0.999, eps 1e-6: the paper's fine-tuning settings) over layer-wise groups, plus a linear
    warmup (warmup_fraction of total_steps, rounded up) and linear decay to 0 schedule. Call scheduler.step()
    after every optimizer.step()."""
    groups = layerwise_lr_groups(model, lr, layer_decay, weight_decay, original_off_by_one)
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(p.is_cuda for p in params)
    optimizer = torch.optim.AdamW(
        groups, lr=lr, betas=(0.9, 0.999), eps=adam_epsilon, weight_decay=weight_decay, fused=fused or None
    )
    warmup_steps = math.ceil(warmup_fraction * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_warmup_decay(total_steps, warmup_steps))
    return optimizer, scheduler


def describe_lr_groups(groups: list[dict[str, Any]]) -> str:
    """A plain-text table of the groups (name, peak learning rate, weight decay, tensors, parameters), to log
    before training so the layer-wise rates can be checked by eye."""
    rows = [("group", "lr", "weight_decay", "tensors", "parameters")]
    for group in groups:
        # Optimizer param_groups hold the current (scheduled) lr; "initial_lr" is the peak once a scheduler exists.
        lr = group.get("initial_lr", group["lr"])
        n_params = sum(p.numel() for p in group["params"])
        rows.append(
            (
                str(group.get("name", "?")),
                f"{lr:.4g}",
                f"{group.get('weight_decay', 0.0):g}",
                str(len(group["params"])),
                f"{n_params:,}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(w) if j == 0 else cell.rjust(w) for j, (cell, w) in enumerate(zip(row, widths))
            )
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
