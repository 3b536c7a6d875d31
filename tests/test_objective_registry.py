"""One registry is the only list of objectives, and a new objective is one class: proven with a toy defined here.

The toy, "uniform replacement detection", is ELECTRA without a generator: 15% of the tokens are replaced by tokens
drawn uniformly from the vocabulary and the discriminator learns to spot them. Nothing outside this file knows it,
yet it trains through the public API, its FLOPs are counted from its declaration, it exports, the CLI offers it.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import ElectraForPreTraining

import electra
from discriminators.replaced_token import ReplacedTokenDiscriminator, replaced_token_loss
from electra.config import load_saved_config
from electra.errors import UserError
from electra.hf_configs import discriminator_hf_config
from electra.masking import choose_positions
from electra.metrics import discriminator_metrics
from electra.outputs import StepOutput
from flops.analytic import FlopPlan


@electra.register_objective
class UniformReplacementDetection(electra.Objective):
    name = "toy-uniform-rtd"
    summary = "replaced-token detection against uniformly random replacements (a test objective)"

    def build(self, model, token_counts=None):
        model.discriminator = ReplacedTokenDiscriminator(
            discriminator_hf_config(model.config, model.special.pad)
        )

    def step(self, model, input_ids, attention_mask, token_type_ids):
        positions = choose_positions(input_ids, attention_mask, model.special_ids, model.config.mask_prob)
        random_tokens = torch.randint(5, model.config.vocab_size, input_ids.shape, device=input_ids.device)
        corrupted = torch.where(positions, random_tokens, input_ids)
        is_replaced = corrupted != input_ids
        logits = model.discriminator(corrupted, attention_mask, token_type_ids)
        loss = replaced_token_loss(logits, is_replaced, attention_mask)
        metrics = {"loss": loss.detach(), **discriminator_metrics(logits, is_replaced, attention_mask)}
        return StepOutput(loss, metrics)

    def flop_plan(self, config):
        return FlopPlan(head="binary", generator=None)


def test_the_registry_is_the_one_list_of_names():
    names = electra.objective_names()
    assert names[0] == "electra" and "toy-uniform-rtd" in names
    assert {"electra", "mlm", "electric", "electra-tt", "electra-15", "replace-mlm", "all-tokens-mlm"} <= set(
        names
    )
    from electra.pretrain_cli import OBJECTIVE_CHOICES

    assert "toy-uniform-rtd" in OBJECTIVE_CHOICES and list(OBJECTIVE_CHOICES) == list(names)
    with pytest.raises(UserError, match="objective='nope' is not one of electra, "):
        electra.build_config("tiny", overrides={"objective": "nope"})
    with pytest.raises(ValueError, match="already registered"):

        @electra.register_objective
        class Impostor(electra.Objective):
            name = "electra"


def test_a_toy_objective_trains_three_steps_through_the_public_api(small_corpus, tmp_path, micro_overrides):
    config = electra.build_config(
        "tiny", overrides={**micro_overrides, "objective": "toy-uniform-rtd", "max_steps": 3, "log_every": 1}
    )
    report = electra.flop_report(config)
    assert report.params["generator"] == 0  # counted from its declaration: no generator
    run = electra.pretrain(
        config,
        output_dir=tmp_path / "run",
        corpus=small_corpus,
        cache_dir=str(tmp_path / "cache"),
        num_proc=1,
    )
    assert run.step == 3 and run.stop_reason == "max_steps"
    assert math.isfinite(run.metrics["loss"]) and 0.0 <= run.metrics["discriminator_auc"] <= 1.0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["flop_counter_check"]["ok"], summary["flop_counter_check"]
    ran = load_saved_config(tmp_path / "run" / "config.json")  # the run's own, with its vocabulary's size
    assert run.metrics["flops"] == pytest.approx(3 * electra.flop_report(ran).train_flops_per_step)

    export = electra.read_export(tmp_path / "run")
    assert export.objective == "toy-uniform-rtd" and list(export.parts) == ["discriminator"]
    assert export.scoring == {}  # nothing here can score text, and the manifest says so
    model = ElectraForPreTraining.from_pretrained(str(electra.finetune_dir(tmp_path / "run")))
    assert model.config.electra_objective == "toy-uniform-rtd"

    # From Python a refusal names the function's arguments, not the command line's flags.
    with pytest.raises(UserError) as refused:
        electra.pretrain(
            config, output_dir=tmp_path / "run", corpus=small_corpus, cache_dir=str(tmp_path / "cache")
        )
    assert "pass resume=True to continue it, overwrite=True to delete" in str(refused.value)
    assert "--" not in str(refused.value)


def test_the_lazy_package_names_exactly_the_api():
    import electra.api

    assert set(electra.API) == set(electra.api.__all__)
