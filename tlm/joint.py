"""Stage 1's task for the engine: the task and the LM objective trained jointly, weighted by TLM's fixed weights,
MT-TARTAN's uniform ones or META-TARTAN's learned ones (`electra.tlm.tartan`).

The `plan` a `JointTask` reads holds the run's resolved numbers: `batch_size` (per process), `seed`, `collate`,
`external_collate`, `rank`, `world`, `rho1`, `rho2`, `accelerator`, `eval_batch_size`, `num_labels`,
`weighting`, `meta_lr`, `meta_head_steps`, `meta_head_lr`, `eval_every` and `balance_losses`, as
`electra.tlm.settings.TLMSettings` checked them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from electra.core.outputs import StepOutput
from electra.tlm.evaluation import evaluate
from electra.tlm.interleave import interleave
from electra.tlm.model import FlopCounter, TLMModel
from electra.tlm.tartan import (
    LossScales,
    MetaWeights,
    check_finite,
    combine,
    fit_meta_head,
    fixed_weights,
    flat,
    surrogate_loss,
)
from electra.tlm.task_data import batches_forever
from electra.training.task import Task


def active_terms(model: TLMModel, rho1: int, rho2: float) -> list[str]:
    """The loss terms a joint step has: the task, and the LM on task texts (ρ2 > 0) and on external texts (ρ1 > 0)."""
    terms = ["task"]
    if model.lm is not None and rho2 > 0:
        terms.append("lm_internal")
    if model.lm is not None and rho1 > 0:
        terms.append("lm_external")
    return terms


class JointTask(Task):
    """Stage 1: one task batch and ρ1 external batches per step, every loss term in one forward.

    The terms are weighted as `plan["weighting"]` says (`electra.tlm.tartan`): TLM's fixed weights, MT-TARTAN's uniform
    ones, or META-TARTAN's learned ones (which also draw one dev batch per step for the meta gradient). With
    `plan["eval_every"]` the task is evaluated on dev during training, for early stopping on the end task.
    """

    progress_keys = {"task": "task", "lm_internal": "lm_int", "lm_external": "lm_ext"}

    def __init__(
        self,
        model: TLMModel,
        internal_rows: Any,
        external_rows: Any,
        plan: dict[str, Any],
        counter: FlopCounter,
        dev_rows: Sequence[dict] = (),
    ):
        self.model, self.internal_rows, self.external_rows = model, internal_rows, external_rows
        self.plan, self.counter, self.dev_rows = plan, counter, dev_rows
        self.terms = active_terms(model, plan["rho1"], plan["rho2"])
        self.meta = MetaWeights(self.terms, plan["meta_lr"]) if plan["weighting"] == "meta" else None
        self.weights = None if self.meta else fixed_weights(plan["weighting"], self.terms, plan["rho2"])
        self.scales = LossScales() if plan.get("balance_losses") else None
        if self.meta is not None:
            self.progress_keys = {**self.progress_keys, **{f"w_{t}": f"w_{t[:6]}" for t in self.terms}}

    def batches(self, start: int) -> Iterator[tuple]:
        p = self.plan
        internal = batches_forever(
            self.internal_rows, p["batch_size"], p["seed"], p["collate"], p["rank"], p["world"], start
        )
        external: Iterator[dict] = iter(())
        if p["rho1"] > 0:
            external = batches_forever(
                self.external_rows,
                p["batch_size"],
                p["seed"] + 1,
                p["external_collate"],
                p["rank"],
                p["world"],
                start * p["rho1"],
            )
        joint = interleave(internal, external, p["rho1"])
        if self.meta is None:
            return joint
        dev = batches_forever(self.dev_rows, p["batch_size"], p["seed"] + 3, p["collate"], start=start)
        return ((internal, externals, dev_batch) for (internal, externals), dev_batch in zip(joint, dev))

    def step(self, model: TLMModel, batch: tuple) -> StepOutput:
        if self.meta is not None:
            return self._meta_step(model, *batch)
        internal, externals = batch
        parts = model(internal, externals, self.weights)
        loss = parts["loss"]
        if self.scales is not None:  # the same terms of the same forward, each divided by its running mean
            balanced = self.scales.divide({name: parts[name] for name in self.terms})
            loss = sum(self.weights[name] * balanced[name] for name in self.terms)
        return StepOutput(loss, {**{k: v.detach() for k, v in parts.items()}, "loss": loss.detach()})

    def _meta_step(self, model: TLMModel, internal: dict, externals: Sequence[dict], dev: dict) -> StepOutput:
        """META-TARTAN (`electra.tlm.tartan`): per-term gradients, meta gradient through φ*, weight update, surrogate loss."""
        p = self.plan
        raw, features = model.losses(internal, externals, "lm_internal" in self.terms)
        terms = self.scales.divide(raw) if self.scales is not None else raw
        parameters = [q for q in model.parameters() if q.requires_grad]
        body_ids = {id(q) for q in model.classifier.electra.parameters()}
        body = [i for i, q in enumerate(parameters) if id(q) in body_ids]
        gradients = {
            name: torch.autograd.grad(terms[name], parameters, allow_unused=True) for name in self.terms
        }
        head_loss = fit_meta_head(
            model.meta_head, features[:, :1], internal["labels"], p["meta_head_steps"], p["meta_head_lr"]
        )
        dev_loss = nn.functional.cross_entropy(
            model.meta_head(
                model.classifier.electra(
                    input_ids=dev["input_ids"],
                    attention_mask=dev["attention_mask"],
                    token_type_ids=dev["token_type_ids"],
                ).last_hidden_state
            ).float(),
            dev["labels"],
        )
        body_parameters = [parameters[i] for i in body]
        meta_gradient = flat(
            torch.autograd.grad(dev_loss, body_parameters, allow_unused=True), body_parameters
        )
        cosines = self.meta.update(
            meta_gradient,
            [flat([gradients[name][i] for i in body], body_parameters) for name in self.terms],
        )
        check_finite(cosines, "META-TARTAN")
        weights = dict(zip(self.terms, self.meta.weights().tolist()))
        self.meta.history.append([weights[name] for name in self.terms])
        update = combine(gradients, weights, len(parameters))
        surrogate = surrogate_loss(parameters, update)
        total = sum(weights[name] * terms[name].detach() for name in self.terms)
        metrics = {"loss": total, "meta_head": head_loss, "dev_meta": dev_loss.detach()}
        metrics.update({name: raw[name].detach() for name in self.terms})
        metrics.update({f"w_{name}": total.new_tensor(weights[name]) for name in self.terms})
        metrics.update(
            {f"cos_{name}": c.to(total.device, total.dtype) for name, c in zip(self.terms, cosines)}
        )
        return StepOutput(surrogate - surrogate.detach() + total, metrics)

    def tokens(self, batch: tuple) -> int:
        internal, externals = batch[0], batch[1]
        return internal["input_ids"].numel() + sum(b["input_ids"].numel() for b in externals)

    def flops(self, micro_batches: Sequence[tuple]) -> float:
        total = 0.0
        for batch in micro_batches:
            internal, externals = batch[0], batch[1]
            external_tokens = sum(b["input_ids"].numel() for b in externals)
            total += self.counter.step(
                internal["input_ids"].numel(), external_tokens, "lm_internal" in self.terms
            )
            if self.meta is not None:  # the dev batch's forward and backward through the body
                total += self.counter.task_rate * batch[2]["input_ids"].numel()
        return total * self.plan["world"]

    def evaluate(self, model: TLMModel) -> dict[str, float] | None:
        p = self.plan
        if not p.get("eval_every"):
            return None
        return evaluate(
            p["accelerator"],
            model.classifier,
            self.dev_rows,
            p["eval_batch_size"],
            p["collate"],
            p["num_labels"],
        )

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"meta": self.meta.state_dict()} if self.meta is not None else {}
        if self.scales is not None:
            state["loss_scales"] = self.scales.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.meta is not None:
            self.meta.load_state_dict(state.get("meta", {}))
        if self.scales is not None:
            self.scales.load_state_dict(state.get("loss_scales", {}), self.plan["accelerator"].device)
