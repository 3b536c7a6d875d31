"""The optimizer every training run uses: AdamW over parameter groups with one no-decay rule, optional layer-wise
learning-rate decay, and one warmup-then-linear-decay schedule.

Layer-wise decay (ELECTRA's fine-tuning recipe, paper Table 5.2 / appendix A) gives layers closer to the input lower
rates. The rule implemented by default is the one the paper describes, for a model with n Transformer layers:

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
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

# Parameters whose name matches get no weight decay (the reference's exclude_from_weight_decay list: LayerNorm
# weights and biases, and every bias, the two-tower generator's `output_bias` included).
NO_DECAY_PATTERN = re.compile(r"LayerNorm|layer_norm|bias")


def no_decay(name: str) -> bool:
    """True for a parameter that weight decay must not shrink (see NO_DECAY_PATTERN)."""
    return bool(NO_DECAY_PATTERN.search(name))


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


def parameter_groups(model: nn.Module, lr: float, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups, decayed then not (by `no_decay`), at one learning rate: pretraining's optimizer groups."""
    decay, plain = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (plain if no_decay(name) else decay).append((name, parameter))
    return [
        {
            "name": name,
            "params": [p for _, p in members],
            "param_names": [n for n, _ in members],
            "lr": lr,
            "weight_decay": rate,
        }
        for name, members, rate in (("decay", decay, weight_decay), ("no_decay", plain, 0.0))
        if members
    ]


def layerwise_lr_groups(
    model: nn.Module,
    base_lr: float,
    layer_decay: float,
    weight_decay: float = 0.0,
    original_off_by_one: bool = False,
) -> list[dict[str, Any]]:
    """Optimizer parameter groups with layer-wise decayed learning rates (see the module docstring for the rule).

    Each group is a dict torch optimizers accept: `params`, `lr`, `weight_decay`, plus `name` (embeddings,
    layer_0 ... layer_{n-1}, head; with a `/no_decay` suffix for parameters `no_decay` exempts when weight_decay
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
        decayed = weight_decay > 0 and not no_decay(name)
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


def build_adamw(
    groups: list[dict[str, Any]],
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    weight_decay: float = 0.0,
) -> torch.optim.AdamW:
    """AdamW with bias correction (the reference omits it), fused where torch has the kernel (CUDA and CPU): on a
    2-core CPU the fused step takes 8.6 ms for ELECTRA-Small's 13.5M parameters against 31-41 ms for `foreach`."""
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(p.device.type in ("cuda", "cpu") for p in params)
    return torch.optim.AdamW(
        groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused or None
    )


def lr_schedule(shape: str, warmup_steps: int, total_steps: int) -> Callable[[float], float]:
    """The learning-rate multiplier of update number s (0-based; a fraction where `TimeBudgetClock` reads it), for
    `LambdaLR`.

    Both shapes ramp linearly over the warmup, (s+1)/warmup, so the first update already moves the weights:

    * `linear` (pretraining): after the warmup, linear decay from the peak to 0 at `total_steps`.
    * `reference` (fine-tuning, as ELECTRA's optimization.py: polynomial decay to 0 over all steps, times the
      warmup ramp): min(1, (s+1)/warmup) * max(0, 1 - s/total). With warmup at 10% of the run the two shapes
      differ by at most 10% of the peak rate, at the end of the warmup.

    `shape` is one of `electra.core.config.LR_SCHEDULES`, checked where the settings declare it (the config's
    `lr_schedule` choices; the fine-tuners pass "reference" themselves); it is not checked again here.
    """
    total = max(1, int(total_steps))
    if shape == "linear":
        warmup = max(1, int(warmup_steps))

        def linear(step: float) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return max(0.0, (total - step) / max(1, total - warmup))

        return linear
    warmup = max(0, int(warmup_steps))

    def reference(step: float) -> float:
        ramp = 1.0 if warmup == 0 else min(1.0, (step + 1) / warmup)
        return ramp * max(0.0, 1.0 - step / total)

    return reference


class TimeBudgetClock:
    """Reads a step schedule on the wall clock, so that its decay ends where a time budget does.

    `max_steps` sized on one host is wrong on every other: a slower one hits the time budget with the learning rate
    still high, a faster one idles at zero. With this clock the decay ends at max_steps or at the budget,
    whichever comes first, on any host. The warmup stays in updates; after it, update s reads the schedule at
    max(s, w + (total - w) · (t(s) - t_w) / (budget - t_w)), where w is the warmup, t_w the training time at its
    end and t(s) the time projected for s from the seconds per update measured since the run (or its resumption)
    began, so the rate leaves its peak continuously. The engine re-anchors the projection at every log step with
    figures equal on every process, so all processes follow one learning rate; between log steps nothing is
    measured and no process waits.
    """

    def __init__(self, warmup_steps: int, total_steps: int, budget_seconds: float):
        """`budget_seconds` is positive: the config declares `time_budget_minutes` so, and checks it there."""
        self.warmup, self.total = max(0, int(warmup_steps)), max(1, int(total_steps))
        self.budget = budget_seconds
        self.seconds_per_step: float | None = None
        self.warmup_seconds: float | None = None  # t_w, fixed once the warmup is over
        self._start = self._anchor = (0, 0.0)

    def start(self, step: int, seconds: float) -> None:
        """Where this invocation begins: `seconds` of training already spent (by earlier invocations) at `step`."""
        self._start = self._anchor = (step, seconds)
        if self.warmup == 0 and self.warmup_seconds is None:
            self.warmup_seconds = seconds

    def observe(self, step: int, seconds: float) -> None:
        """Training time spent at `step` (the same figure on every process): the projection's new anchor."""
        start_step, start_seconds = self._start
        if step > start_step:
            self.seconds_per_step = (seconds - start_seconds) / (step - start_step)
        self._anchor = (step, seconds)
        if self.warmup_seconds is None and step >= self.warmup and self.seconds_per_step is not None:
            self.warmup_seconds = seconds - (step - self.warmup) * self.seconds_per_step

    def seconds_at(self, step: int) -> float | None:
        """The training time projected for `step`; None before any update has been timed."""
        if self.seconds_per_step is None:
            return None
        anchor_step, anchor_seconds = self._anchor
        return anchor_seconds + (step - anchor_step) * self.seconds_per_step

    def effective_step(self, step: int) -> float:
        """The point of the step schedule that update `step` reads."""
        seconds = self.seconds_at(step)
        if step < self.warmup or seconds is None or self.warmup_seconds is None:
            return step
        left = self.budget - self.warmup_seconds
        done = 1.0 if left <= 0 else (seconds - self.warmup_seconds) / left
        return max(float(step), self.warmup + (self.total - self.warmup) * done)

    def finished(self, step: int) -> bool:
        """Whether the schedule is over at `step` (its learning rate would be zero): the run should stop there."""
        return self.effective_step(step) >= self.total

    def end_step(self) -> int | None:
        """The update at which the schedule is projected to end (for the progress bar); None until measured."""
        if self.seconds_per_step is None or self.seconds_per_step <= 0:
            return None
        anchor_step, anchor_seconds = self._anchor
        return min(
            self.total, anchor_step + math.ceil((self.budget - anchor_seconds) / self.seconds_per_step)
        )

    def wrap(self, schedule: Callable[[float], float]) -> Callable[[int], float]:
        """`schedule` (a multiplier of the step, for `LambdaLR`) read on this clock."""
        return lambda step: schedule(self.effective_step(step))

    def state_dict(self) -> dict[str, Any]:
        return {"seconds_per_step": self.seconds_per_step, "warmup_seconds": self.warmup_seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A resumed run projects at the rate it had measured, until its own first log step re-measures it."""
        self.seconds_per_step = state.get("seconds_per_step")
        self.warmup_seconds = state.get("warmup_seconds")


def schedule_on_clock(
    shape: str, warmup_steps: int, total_steps: int, clock: str, budget_seconds: float | None
) -> tuple[Callable[[int], float], TimeBudgetClock | None]:
    """The learning-rate multiplier for `LambdaLR`, and the clock the engine must feed (None: updates only).

    `clock` is one of `electra.core.config.SCHEDULE_CLOCKS`, and the "time" clock comes with a positive
    `budget_seconds`: the config's declarations and its `validate` check both where the run's settings are made."""
    schedule = lr_schedule(shape, warmup_steps, total_steps)
    if clock == "steps":
        return schedule, None
    timer = TimeBudgetClock(warmup_steps, total_steps, budget_seconds)
    return timer.wrap(schedule), timer


def warmup_steps_of(fraction: float, total_steps: int) -> int:
    """Warmup as a fraction of the run, rounded up (the fine-tuners' 10%)."""
    return math.ceil(fraction * total_steps)


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
