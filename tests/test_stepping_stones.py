"""The efficiency-analysis objectives: each loss on exactly its positions, hand-checked numbers, honest FLOPs."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import electra.objectives.replaced_token as replaced_token_module
import electra.objectives.stepping_stones as stepping_stones_module
from electra.core.outputs import SpecialIds
from electra.discriminators.masked_lm import copy_mechanism_nll
from electra.discriminators.replaced_token import replaced_token_loss
from electra.flops.measured import startup_check
from electra.nn.masking import Picked
from electra.objectives import build_config, flop_report, get_objective
from electra.training.model import PretrainingModel

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4)
VOCAB = 50


def _model(objective: str, micro: dict) -> PretrainingModel:
    config = build_config("tiny", overrides=dict(micro, objective=objective))
    config.vocab_size = VOCAB
    torch.manual_seed(0)
    return PretrainingModel(config, SPECIAL).eval()  # eval: no dropout, so captured tensors can be replayed


def _batch():
    """Two rows: [CLS] a b [SEP] c d e [SEP] and a shorter one with padding; hand-picked masked positions."""
    input_ids = torch.tensor(
        [[2, 11, 12, 3, 13, 14, 15, 3], [2, 21, 22, 23, 3, 0, 0, 0]],
    )
    attention_mask = (input_ids != 0).long()
    token_type_ids = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1], [0] * 8])
    positions = torch.zeros_like(input_ids, dtype=torch.bool)
    positions[0, 2] = positions[0, 5] = positions[1, 1] = True
    return input_ids, attention_mask, token_type_ids, positions


def test_electra_15_loss_by_hand_and_blind_to_other_positions():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]], requires_grad=True)
    is_replaced = torch.tensor([[False, True, False, True]])
    positions = torch.tensor([[False, True, True, False]])
    loss = replaced_token_loss(logits, is_replaced, positions)  # what electra-15 averages over
    # picked: logit -1 labelled replaced (-log sigmoid(-1)), logit 0.5 labelled original (-log(1 - sigmoid(0.5)))
    expected = (math.log(1 + math.exp(1.0)) + math.log(1 + math.exp(0.5))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert logits.grad[0, 0] == 0 and logits.grad[0, 3] == 0
    assert logits.grad[0, 1] != 0 and logits.grad[0, 2] != 0


def test_copy_mechanism_by_hand():
    # softmax of [0, ln 2, 0] is [1/4, 1/2, 1/4]; copy logit 0 is D = 1/2.
    token_logits = torch.tensor([[0.0, math.log(2.0), 0.0], [0.0, math.log(2.0), 0.0]])
    copy_logits = torch.zeros(2)
    inputs = torch.tensor([1, 2])
    targets = torch.tensor([1, 0])
    nll = copy_mechanism_nll(token_logits, copy_logits, inputs, targets)
    # row 0 input == target: p = 1/2 + 1/2 * 1/2 = 3/4; row 1 input != target: p = 1/2 * 1/4 = 1/8
    assert nll.tolist() == pytest.approx([-math.log(0.75), math.log(8.0)], rel=1e-6)


def _step(model, monkeypatch, input_ids, attention_mask, token_type_ids, positions):
    """The objective's training step with the masking draw replaced by hand-picked positions."""
    for module in (replaced_token_module, stepping_stones_module):
        monkeypatch.setattr(module, "pick_positions", lambda *args, **kwargs: Picked.from_mask(positions))
    return model(input_ids, attention_mask, token_type_ids)


def _capture(module, store: dict, name: str, pre: bool = False):
    if pre:
        return module.register_forward_pre_hook(
            lambda mod, args, kwargs: store.__setitem__(
                name, kwargs.get("input_ids", args[0] if args else None)
            ),
            with_kwargs=True,
        )
    return module.register_forward_hook(lambda mod, args, out: store.__setitem__(name, (args[0], out)))


def test_electra_15_step_scores_only_the_picked_positions(micro_overrides, monkeypatch):
    model = _model("electra-15", micro_overrides)
    input_ids, attention_mask, token_type_ids, positions = _batch()
    seen: dict = {}
    _capture(model.discriminator.model.electra, seen, "corrupted", pre=True)
    _capture(model.discriminator.model.discriminator_predictions, seen, "head")
    torch.manual_seed(1)
    output = _step(model, monkeypatch, input_ids, attention_mask, token_type_ids, positions)
    corrupted, logits = seen["corrupted"], seen["head"][1]
    assert torch.equal(corrupted[~positions], input_ids[~positions])  # only picked positions were replaced
    labels = (corrupted != input_ids).float()
    expected = F.binary_cross_entropy_with_logits(logits[positions], labels[positions])
    assert output.metrics["discriminator_loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    everywhere = F.binary_cross_entropy_with_logits(
        logits[attention_mask.bool()], labels[attention_mask.bool()]
    )
    assert everywhere.item() != pytest.approx(expected.item(), rel=1e-3)


def test_replace_mlm_step_uses_samples_not_mask_and_predicts_the_picked_positions(
    micro_overrides, monkeypatch
):
    model = _model("replace-mlm", micro_overrides)
    input_ids, attention_mask, token_type_ids, positions = _batch()
    seen: dict = {}
    _capture(model.discriminator.model.electra, seen, "corrupted", pre=True)
    _capture(model.discriminator.model.generator_predictions, seen, "head")
    model.discriminator.model.electra.register_forward_hook(
        lambda mod, args, out: seen.__setitem__("corrupted_states", out.last_hidden_state)
    )
    torch.manual_seed(1)
    output = _step(model, monkeypatch, input_ids, attention_mask, token_type_ids, positions)
    corrupted = seen["corrupted"]
    assert torch.equal(corrupted[~positions], input_ids[~positions])
    assert not (corrupted == SPECIAL.mask).any()  # generator samples, never [MASK]
    rows = seen["head"][0]
    picked = Picked.from_mask(positions)
    assert rows.shape[0] == picked.index.numel()  # the MLM head ran on the picked slots (K per row) ...
    valid = picked.valid.reshape(-1)
    torch.testing.assert_close(
        rows[valid], seen["corrupted_states"][positions]
    )  # ... holding those positions
    logits = model.discriminator.model.generator_lm_head(seen["head"][1])[valid]
    expected = F.cross_entropy(logits, input_ids[positions])
    assert output.metrics["mlm_loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert output.loss.item() == pytest.approx(
        expected.item() + output.metrics["generator_loss"].item(), rel=1e-5
    )


def test_all_tokens_mlm_predicts_every_real_token_with_the_copy_mixture(micro_overrides, monkeypatch):
    model = _model("all-tokens-mlm", micro_overrides)
    input_ids, attention_mask, token_type_ids, positions = _batch()
    seen: dict = {}
    _capture(model.discriminator.model.electra, seen, "corrupted", pre=True)
    _capture(model.discriminator.model.generator_predictions, seen, "head")
    _capture(model.discriminator.copy_head, seen, "copy")
    torch.manual_seed(1)
    output = _step(model, monkeypatch, input_ids, attention_mask, token_type_ids, positions)
    corrupted = seen["corrupted"]
    ordinary = attention_mask.bool()  # every real token, [CLS] and [SEP] included; never padding
    assert seen["head"][0].shape[0] == int(ordinary.sum()) == 13
    assert torch.equal(corrupted[~positions], input_ids[~positions])
    # the paper's mixture, in probability space: D on the input token plus (1 - D) times the softmax
    probs = torch.softmax(model.discriminator.model.generator_lm_head(seen["head"][1]), dim=-1)
    copy = torch.sigmoid(seen["copy"][1].squeeze(-1))
    mixture = (1 - copy).unsqueeze(1) * probs + copy.unsqueeze(1) * F.one_hot(corrupted[ordinary], VOCAB)
    expected = -mixture.gather(1, input_ids[ordinary].unsqueeze(1)).log().mean()
    assert output.metrics["all_tokens_loss"].item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("objective", ["electra-15", "replace-mlm", "all-tokens-mlm"])
def test_training_steps_lower_the_loss_and_exports_load(objective, micro_overrides, tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import AutoModel, PreTrainedTokenizerFast

    from electra.export.layout import finetune_dir

    model = _model(objective, micro_overrides).train()
    input_ids, attention_mask, token_type_ids, positions = _batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    # 15 steps: the same masking every step lets ELECTRA-15's generator learn the masked tokens by about step 20;
    # its samples then become the originals, the discriminator's labels flip and its loss spikes (the objective's
    # own dynamics, at a step that depends on the dropout masks' random stream)
    for _ in range(15):
        torch.manual_seed(3)  # the same masking and samples every step: the loss must fall
        loss = model(input_ids, attention_mask, token_type_ids).loss
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[-1] < 0.7 * losses[0]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"[PAD]": 0, "[UNK]": 1}, "[UNK]"))
    )
    model.export(tmp_path, tokenizer)
    encoder = AutoModel.from_pretrained(str(finetune_dir(tmp_path)))
    assert encoder.config.hidden_size == model.config.hidden_size


@pytest.mark.parametrize("objective", ["electra-15", "replace-mlm", "all-tokens-mlm"])
def test_analytic_flops_match_the_real_model(objective, micro_overrides):
    model = _model(objective, micro_overrides)
    ids = torch.randint(5, VOCAB, (2, 48))
    ids[:, 0], ids[:, 20], ids[:, -1] = 2, 3, 3
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    check = startup_check(model, batch, model.config, get_objective(objective).flop_plan(model.config))
    assert check["ok"], check


def test_flop_counts_compose_from_mlm_and_electra(micro_overrides):
    def breakdown(objective: str) -> dict[str, float]:
        config = build_config("tiny", overrides=dict(micro_overrides, objective=objective))
        config.vocab_size = VOCAB
        return flop_report(config).breakdown

    electra, mlm = breakdown("electra"), breakdown("mlm")
    assert breakdown("electra-15") == electra
    replace = breakdown("replace-mlm")
    for key in replace:
        assert replace[key] == pytest.approx((mlm if key.startswith("discriminator") else electra)[key])
    all_tokens = breakdown("all-tokens-mlm")
    assert all_tokens["discriminator.head"] > 5 * replace["discriminator.head"]  # every position, not 15%
