"""TARTAN's task weights (Dery et al., 2022): MT-TARTAN weighs the end task and every auxiliary objective alike,
META-TARTAN learns the weights from how well each objective's gradient on the shared body agrees with a meta
gradient of the end task's dev loss (the paper's Algorithm 1, appendix A.3).

Per META-TARTAN step, on the body parameters θ_body (the encoder the classifier and the LM objectives share):

    g_i     = ∇θ_body L_i           for the end task and each auxiliary objective, each on its own batch
    φ*      ← a separate copy of the end-task head, fitted on the step's training batch with the body frozen
    g_meta  = ∇θ_body L_dev(θ_body, φ*)   on a dev batch of the end task
    w_i     ← w_i + η · cos(g_meta, g_i)
    update  = Σ_i softmax(w)_i · ∇θ L_i   (every parameter; heads only receive their own term)

The per-term gradients are taken with `torch.autograd.grad`, and the engine's single backward is given a surrogate
loss Σ_p ⟨p, update_p⟩ whose gradient is exactly that update, so the engine's clipping, optimizer and checkpoints are
the same as for every other task. The cosine makes the update scale-free: a term with a large loss but a gradient
that points away from the end task's dev improvement loses weight.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from electra.core.errors import UserError
from electra.core.files import save_figure_atomically

WEIGHTS_FILE = "task_weights.csv"
WEIGHTS_PLOT = "task_weights.png"
# Loss terms of the joint model and what TARTAN calls them.
TERM_LABELS = {"task": "end task", "lm_internal": "TAPT (task texts)", "lm_external": "DAPT (domain texts)"}


def fixed_weights(weighting: str, terms: Sequence[str], rho2: float) -> dict[str, float]:
    """MT-TARTAN's uniform weights for `weighting` "uniform", else TLM's (task 1, ρ2 on the task texts' LM loss, 1
    on the retrieved texts'). META-TARTAN's are learned (`MetaWeights`); the weighting is one of
    `electra.tlm.declared.WEIGHTINGS`, checked where the settings are built (`electra.tlm.settings.TLMSettings`)."""
    if weighting == "uniform":
        return {name: 1.0 / len(terms) for name in terms}
    return {name: (rho2 if name == "lm_internal" else 1.0) for name in terms}


class LossScales:
    """Running means of each term's value, to divide the terms by before weighting ("balanced" losses).

    Uniform weights presume terms of comparable size. ELECTRA's loss (generator MLM + 50 × discriminator BCE) is
    about 26 on a tiny model where the task's cross-entropy starts at ln(classes) ≈ 1.4, so with raw losses the LM
    terms own the shared body's gradient and the end task barely moves it (measured: README, "TARTAN"). Divided by
    their own running mean every term enters at scale ~1, and the weights mean what they say. The means are
    detached tensors on the device (no host sync per step); the first step uses its own values.
    """

    def __init__(self, momentum: float = 0.98):
        self.momentum = momentum
        self.means: dict[str, torch.Tensor] = {}

    def divide(self, terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Update the means with these values and return every term divided by its mean."""
        for name, value in terms.items():
            current = value.detach().float()
            old = self.means.get(name)
            self.means[name] = current if old is None else self.momentum * old + (1 - self.momentum) * current
        return {name: value / self.means[name].clamp_min(1e-8) for name, value in terms.items()}

    def state_dict(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.means.items()}

    def load_state_dict(self, state: dict[str, float], device: torch.device | str = "cpu") -> None:
        self.means = {name: torch.tensor(value, device=device) for name, value in state.items()}


class MetaWeights:
    """META-TARTAN's weight logits w over the loss terms: start equal (uniform softmax), move by η·cos each step.
    η (`lr`, `--meta-lr`) is positive, checked where the settings are built (`electra.tlm.settings.TLMSettings`)."""

    def __init__(self, terms: Sequence[str], lr: float):
        self.terms = list(terms)
        self.lr = lr
        self.logits = torch.zeros(len(self.terms), dtype=torch.float64)
        self.history: list[list[float]] = []  # per step: the softmax weights used for that step's update

    def weights(self) -> torch.Tensor:
        return torch.softmax(self.logits, dim=0)

    def update(self, meta_gradient: torch.Tensor, gradients: Sequence[torch.Tensor]) -> torch.Tensor:
        """w_i += η·cos(g_meta, g_i); returns the cosines. A zero gradient (a term that does not touch the body)
        has cosine 0 and keeps its weight."""
        if len(gradients) != len(self.terms):
            raise ValueError(f"{len(gradients)} gradients for {len(self.terms)} terms")
        meta = meta_gradient.double()
        cosines = torch.stack([F.cosine_similarity(meta, g.double(), dim=0, eps=1e-12) for g in gradients])
        self.logits = self.logits + self.lr * cosines.cpu()
        return cosines

    def state_dict(self) -> dict[str, Any]:
        return {"terms": self.terms, "logits": self.logits.tolist(), "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.logits = torch.tensor(state["logits"], dtype=torch.float64)
            self.history = [list(row) for row in state["history"]]


def flat(gradients: Sequence[torch.Tensor | None], parameters: Sequence[nn.Parameter]) -> torch.Tensor:
    """One vector of the gradients, zeros where a parameter got none."""
    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).reshape(-1).float()
            for g, p in zip(gradients, parameters)
        ]
    )


def fit_meta_head(
    head: nn.Module, features: torch.Tensor, labels: torch.Tensor, steps: int, lr: float
) -> torch.Tensor:
    """Plain SGD on the meta head alone (features detached: the body is frozen); returns the last training loss.

    SGD keeps no optimizer state, so the head is the whole of what a checkpoint must keep."""
    features = features.detach()
    parameters = list(head.parameters())
    loss = features.new_zeros(())
    for _ in range(steps):
        for parameter in parameters:  # kept out of the engine's optimizer: gradients only here
            parameter.requires_grad_(True)
        loss = F.cross_entropy(head(features).float(), labels)
        grads = torch.autograd.grad(loss, parameters)
        with torch.no_grad():
            for parameter, grad in zip(parameters, grads):
                parameter.requires_grad_(False)
                parameter.sub_(lr * grad)
    return loss.detach()


def surrogate_loss(parameters: Sequence[nn.Parameter], update: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """Σ_p ⟨p, u_p⟩: its gradient with respect to every p is u_p (the u are constants)."""
    terms = [(p * u.detach().to(p.dtype)).sum() for p, u in zip(parameters, update) if u is not None]
    return torch.stack(terms).sum() if terms else parameters[0].new_zeros(())


def combine(
    gradients: dict[str, Sequence[torch.Tensor | None]], weights: dict[str, float], count: int
) -> list[torch.Tensor | None]:
    """Σ_i w_i·g_i per parameter (None where no term reaches it)."""
    combined: list[torch.Tensor | None] = [None] * count
    for name, grads in gradients.items():
        for index, grad in enumerate(grads):
            if grad is None:
                continue
            scaled = weights[name] * grad
            combined[index] = scaled if combined[index] is None else combined[index] + scaled
    return combined


def write_weight_history(history: Sequence[Sequence[float]], terms: Sequence[str], directory: Path) -> Path:
    """`task_weights.csv` (one row per step) and `task_weights.png` (the paper's Figures 3-4: weights over time)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / WEIGHTS_FILE
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", *terms])
        for step, row in enumerate(history, start=1):
            writer.writerow([step, *(f"{w:.6f}" for w in row)])
    if history:
        plot_weights(history, terms, directory / WEIGHTS_PLOT)
    return path


def plot_weights(history: Sequence[Sequence[float]], terms: Sequence[str], output: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axis = plt.subplots(figsize=(6.5, 3.6), dpi=120)
    steps = range(1, len(history) + 1)
    for index, term in enumerate(terms):
        axis.plot(steps, [row[index] for row in history], label=TERM_LABELS.get(term, term))
    axis.axhline(1.0 / len(terms), color="grey", linewidth=0.8, linestyle=":", label="uniform")
    axis.set_xlabel("step")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_ylabel("weight (softmax)")
    axis.set_title("META-TARTAN task weights")
    low = min(min(row) for row in history)
    high = max(max(row) for row in history)
    margin = max(0.02, 0.1 * (high - low))
    axis.set_ylim(max(0.0, low - margin), min(1.0, high + margin))
    axis.legend(fontsize=8)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    try:
        save_figure_atomically(figure, output)
    finally:
        plt.close(figure)
    return output


def check_finite(cosines: torch.Tensor, step_description: str) -> None:
    if not all(math.isfinite(float(c)) for c in cosines):
        raise UserError(
            f"{step_description}: a task-weight update is not finite; lower --meta-lr or the learning rate."
        )
