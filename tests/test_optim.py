"""The one optimizer every run uses: the no-decay rule, layer-wise learning rates group by group, the schedules."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, ElectraConfig, ElectraForPreTraining

from electra.training.optim import (
    build_adamw,
    describe_lr_groups,
    layerwise_lr_groups,
    lr_schedule,
    no_decay,
    parameter_groups,
    schedule_on_clock,
    warmup_steps_of,
)


def _electra(layers: int = 3) -> ElectraForPreTraining:
    torch.manual_seed(0)
    config = ElectraConfig(
        vocab_size=50,
        embedding_size=16,  # != hidden: the model has an embeddings_project
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    return ElectraForPreTraining(config)


def _by_name(groups):
    return {g["name"]: g for g in groups}


def test_paper_rule_three_layers_group_by_group():
    groups = _by_name(layerwise_lr_groups(_electra(), base_lr=1e-3, layer_decay=0.5))
    assert list(groups) == ["embeddings", "layer_0", "layer_1", "layer_2", "head"]
    # head and top layer: full rate; each layer below one more factor 0.5; embeddings one step further.
    expected = {"head": 1e-3, "layer_2": 1e-3, "layer_1": 5e-4, "layer_0": 2.5e-4, "embeddings": 1.25e-4}
    for name, lr in expected.items():
        assert groups[name]["lr"] == pytest.approx(lr, rel=1e-12), name
        assert groups[name]["weight_decay"] == 0.0

    emb = set(groups["embeddings"]["param_names"])
    assert "electra.embeddings.word_embeddings.weight" in emb
    assert "electra.embeddings.LayerNorm.bias" in emb
    assert {"electra.embeddings_project.weight", "electra.embeddings_project.bias"} <= emb
    assert len(emb) == 7
    for k in range(3):
        names = groups[f"layer_{k}"]["param_names"]
        assert len(names) == 16 and all(n.startswith(f"electra.encoder.layer.{k}.") for n in names)
    assert sorted(groups["head"]["param_names"]) == sorted(
        f"discriminator_predictions.{m}.{p}"
        for m in ("dense", "dense_prediction")
        for p in ("weight", "bias")
    )


def test_original_off_by_one_rule_three_layers():
    # Reference: lr * decay ** (n + 2 - depth), embeddings depth 0, layer k depth k+1, head depth n+2 (= 5).
    groups = _by_name(layerwise_lr_groups(_electra(), 1e-3, 0.5, original_off_by_one=True))
    expected = {
        "head": 1e-3,
        "layer_2": 2.5e-4,
        "layer_1": 1.25e-4,
        "layer_0": 6.25e-5,
        "embeddings": 3.125e-5,
    }
    for name, lr in expected.items():
        assert groups[name]["lr"] == pytest.approx(lr, rel=1e-12), name


def test_every_parameter_in_exactly_one_group_and_decay_split():
    model = _electra()
    groups = layerwise_lr_groups(model, 1e-3, 0.8, weight_decay=0.01)
    seen = [n for g in groups for n in g["param_names"]]
    assert sorted(seen) == sorted(n for n, _ in model.named_parameters())
    by = _by_name(groups)
    assert "electra.encoder.layer.1.output.LayerNorm.weight" in by["layer_1/no_decay"]["param_names"]
    assert "electra.encoder.layer.1.output.dense.bias" in by["layer_1/no_decay"]["param_names"]
    assert "electra.encoder.layer.1.output.dense.weight" in by["layer_1"]["param_names"]
    assert by["layer_1"]["weight_decay"] == 0.01 and by["layer_1/no_decay"]["weight_decay"] == 0.0
    assert by["layer_1"]["lr"] == by["layer_1/no_decay"]["lr"] == pytest.approx(1e-3 * 0.8)


def test_bert_pooler_and_classifier_are_head():
    config = BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    groups = _by_name(layerwise_lr_groups(BertForSequenceClassification(config), 1e-4, 0.9))
    assert set(groups["head"]["param_names"]) == {
        "bert.pooler.dense.weight",
        "bert.pooler.dense.bias",
        "classifier.weight",
        "classifier.bias",
    }
    assert groups["embeddings"]["lr"] == pytest.approx(1e-4 * 0.81)
    assert groups["layer_0"]["lr"] == pytest.approx(1e-4 * 0.9)


def test_reference_schedule_warmup_times_decay_from_the_start():
    f = lr_schedule("reference", warmup_steps=2, total_steps=10)
    # (s+1)/2 ramp for s < 2, times (1 - s/10)
    expected = [0.5, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
    assert [f(s) for s in range(11)] == pytest.approx(expected)
    assert f(0) == pytest.approx(0.5 * 1.0)
    assert f(1) == pytest.approx(1.0 * 0.9)
    assert f(5) == pytest.approx(0.5)
    assert f(10) == 0.0


def test_one_adam_step_moves_each_group_by_its_rate():
    """Adam's first update is lr * g / (|g| + eps) ~ lr per coordinate: the largest change per group shows the
    learning rate that group really got."""
    model = _electra()
    model.train(False)
    optimizer = build_adamw(layerwise_lr_groups(model, 1e-2, 0.5), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_schedule("reference", warmup_steps_of(0.1, 10), total_steps=10)
    )
    assert scheduler.get_last_lr()[-1] == pytest.approx(1e-2)  # warmup = ceil(0.1 * 10) = 1 step
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(0, 50, (4, 12))
    model(input_ids=ids, labels=torch.randint(0, 2, (4, 12))).loss.backward()
    optimizer.step()
    scheduler.step()
    params = dict(model.named_parameters())
    for group in optimizer.param_groups:
        moved = max((params[n] - before[n]).abs().max().item() for n in group["param_names"])
        assert moved == pytest.approx(group["initial_lr"], rel=0.02), group["name"]
    assert scheduler.get_last_lr()[-1] == pytest.approx(1e-2 * 0.9)
    table = describe_lr_groups(optimizer.param_groups)
    assert "embeddings" in table and "0.00125" in table and "head" in table


def test_linear_schedule_warmup_then_decay_from_the_peak():
    f = lr_schedule("linear", warmup_steps=2, total_steps=10)
    # (s+1)/2 ramp for s < 2, then (10 - s) / (10 - 2): the peak at the end of warmup, 0 at s = 10
    expected = [0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8, 0.0]
    assert [f(s) for s in range(11)] == pytest.approx(expected)
    # a schedule outside LR_SCHEDULES is refused by the config's declaration (tests/test_config.py), once


def test_the_time_clock_ends_the_decay_at_the_budget_on_a_slow_host():
    """Sized for 1,000 updates, budget 100 s, but this host takes 0.4 s an update: the decay must end at s = 250."""
    multiplier, clock = schedule_on_clock("linear", 10, 1000, "time", budget_seconds=100.0)
    steps_only = lr_schedule("linear", 10, 1000)
    clock.start(0, 0.0)
    assert [multiplier(s) for s in range(40)] == [steps_only(s) for s in range(40)]  # nothing timed yet
    clock.observe(20, 8.0)  # 0.4 s an update, so the warmup ended at 4 s
    assert clock.warmup_seconds == pytest.approx(4.0) and clock.end_step() == 250
    assert multiplier(5) == steps_only(5) and multiplier(10) == pytest.approx(
        1.0
    )  # warmup in updates, then peak
    # after it, the decay runs over the 96 s left: at s = 125 (50 s) it has done 46/96 of it
    assert multiplier(125) == pytest.approx(1 - 46 / 96)
    assert multiplier(250) == 0.0 and clock.finished(250) and not clock.finished(249)
    clock.observe(100, 50.0)  # slower since: 50 s over 100 updates, 0.5 s an update; re-anchored at 50 s
    assert clock.seconds_at(150) == pytest.approx(75.0) and clock.end_step() == 200
    assert multiplier(150) == pytest.approx(1 - 71 / 96)
    assert clock.finished(200) and not clock.finished(199)


def test_the_time_clock_on_a_fast_host_is_the_step_schedule_and_resumes_where_it_was():
    multiplier, clock = schedule_on_clock("linear", 10, 1000, "time", budget_seconds=100.0)
    steps_only = lr_schedule("linear", 10, 1000)
    clock.start(0, 0.0)
    clock.observe(50, 2.5)  # 0.05 s an update: 1,000 updates take 50 s, half the budget
    assert [multiplier(s) for s in range(1001)] == [steps_only(s) for s in range(1001)]
    assert not clock.finished(999) and clock.finished(1000) and clock.end_step() == 1000
    # a resumed run projects from where it stopped, at the rate it had measured (0.1 s an update)
    again, resumed = schedule_on_clock("linear", 10, 1000, "time", budget_seconds=100.0)
    resumed.load_state_dict({"seconds_per_step": 0.1, "warmup_seconds": 1.0})
    resumed.start(600, 80.0)  # 80 s of 100 already spent: 20 s left buy 200 updates, so the decay ends at 800
    assert (
        resumed.seconds_at(700) == pytest.approx(90.0) and resumed.finished(800) and not resumed.finished(799)
    )
    assert again(700) == pytest.approx(1 - 89 / 99)
    assert schedule_on_clock("linear", 10, 1000, "steps", None)[1] is None
    # the time clock without a budget is refused where the config is checked (tests/test_config.py), once


def test_one_no_decay_rule_for_pretraining_and_fine_tuning():
    """LayerNorm parameters and every bias are exempt, wherever "bias" sits in the name: the two-tower
    generator's `output_bias` too (it was decayed during pretraining when the rule was a `.bias` suffix)."""
    assert no_decay("generator.output_bias") and no_decay("x.dense.bias") and no_decay("a.LayerNorm.weight")
    assert not no_decay("x.dense.weight") and not no_decay("embeddings.word_embeddings.weight")
    model = _electra()
    model.register_parameter("output_bias", torch.nn.Parameter(torch.zeros(50)))
    plain = {g["name"]: set(g["param_names"]) for g in parameter_groups(model, 1e-3, 0.01)}
    layerwise = layerwise_lr_groups(model, 1e-3, 0.8, weight_decay=0.01)
    exempt_layerwise = {n for g in layerwise if g["weight_decay"] == 0.0 for n in g["param_names"]}
    assert "output_bias" in plain["no_decay"] and "output_bias" in exempt_layerwise
    assert plain["no_decay"] == exempt_layerwise
    assert {g["weight_decay"] for g in parameter_groups(model, 1e-3, 0.01)} == {0.01, 0.0}


def test_fused_cpu_adamw_takes_the_same_steps_as_foreach():
    """The CPU run uses torch's fused AdamW kernel; it must move weights as the per-tensor formula does."""
    torch.manual_seed(0)
    weights = [torch.randn(64, 32), torch.randn(32)]
    copies = [[torch.nn.Parameter(w.clone()) for w in weights] for _ in range(2)]
    groups = [
        [{"params": [ps[0]], "weight_decay": 0.01}, {"params": [ps[1]], "weight_decay": 0.0}] for ps in copies
    ]
    fused = build_adamw(groups[0], lr=1e-2, weight_decay=0.01)
    plain = torch.optim.AdamW(groups[1], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, foreach=True)
    assert fused.defaults["fused"] is True
    for _ in range(5):
        grads = [torch.randn_like(w) for w in weights]
        for ps, opt in zip(copies, (fused, plain)):
            for p, g in zip(ps, grads):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(*copies):
        assert torch.allclose(a, b, rtol=0, atol=1e-6)
