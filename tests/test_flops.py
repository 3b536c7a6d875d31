"""FLOP accounting: hand-worked toy counts, the paper's published figures, and analytic vs measured agreement."""

from __future__ import annotations

import json
import re

import pytest
import torch

from electra.app.flops_paper import PAPER_MODELS, reproduce, reproduce_all
from electra.core.errors import UserError
from electra.flops.analytic import finetune_flops
from electra.flops.measured import (
    build_reference_model,
    flop_counter,
    fvcore_forward_flops,
    matmul_flops_of_config,
    measure_training_step,
    random_batch,
)
from electra.flops.shapes import predicted_positions
from electra.objectives import build_config, flop_report, get_objective


# ------------------------------------------------------------------------------------------ hand-worked toy
def toy_config(**extra):
    """One layer, widths small enough to count by hand. s=4, vocab 10, embedding 4, hidden 8, FFN 16, 2 heads;
    generator 1/2: hidden 4, FFN 8, 1 head (embedding 4 = generator width, so no generator projection)."""
    values = dict(
        hidden_size=8,
        num_hidden_layers=1,
        intermediate_size=16,
        num_attention_heads=2,
        embedding_size=4,
        vocab_size=10,
        max_position_embeddings=8,
        max_seq_length=4,
        generator_hidden_multiplier=0.5,
        mask_prob=0.25,  # ceil(0.25 * 4) = 1 predicted position
        train_batch_size=3,
        max_steps=5,
    )
    values.update(extra)
    return build_config("tiny", overrides=values)


# Per-token costs worked out by hand (FLOPs for one token, then x 4 tokens):
# discriminator embeddings: word one-hot 2*4*10=80, position+type one-hot 2*4*(4+2)=48, add 8, LayerNorm 20,
#   dropout 16, projection 4->8 2*4*8=64, its bias 8                                      = 244 -> 976
# discriminator attention: qkv 3*2*8*8=384, qkv bias 24, scores 2*8*4=64, scale 4*2=8, softmax 5*4*2=40,
#   probs dropout 4*4*2=32, weighted values 64, output 128, bias 8, dropout 32, residual 8, LN flat 5
#                                                                                         = 797 -> 3188
# discriminator FFN: 2*8*16=256, bias 16, GELU 8*16=128, 256, bias 8, dropout 32, residual 8, LN 40 = 744 -> 2976
# discriminator head: dense 2*8*8=128, bias 8, GELU 64, logit 2*8=16                      = 216 -> 864
# generator embeddings: the same lookups, no projection: 80+48+8+20+16                     = 172 -> 688
# generator attention (width 4, 1 head): 96+12+32+4+20+16+32+32+4+16+4+5                  = 273 -> 1092
# generator FFN (4 -> 8): 64+8+64+64+4+16+4+20                                             = 244 -> 976
# generator head, at the 1 predicted position: dense 2*4*4=32, bias 4, GELU 32, LN 20, output 2*4*10=80,
#   softmax 5*10=50, target 2*10=20                                                        = 238 -> 238
HAND_FORWARD = {
    "discriminator.embeddings": 976,
    "discriminator.attention": 3188,
    "discriminator.feed_forward": 2976,
    "discriminator.head": 864,
    "generator.embeddings": 688,
    "generator.attention": 1092,
    "generator.feed_forward": 976,
    "generator.head": 238,
}
# Real matmuls only: discriminator 4 tokens x (64 + 384 + 64 + 64 + 128 + 256 + 256 + 128 + 16) = 5440,
# generator 4 x (96 + 32 + 32 + 32 + 64 + 64) + 1 x (32 + 80) = 1392.
HAND_MATMUL = 5440 + 1392
# Parameters: discriminator embeddings (10+8+2)*4 + 8 = 88, projection 4*8+8 = 40, attention 3*(64+8)+(64+8)+16
# = 304, FFN (128+16)+(128+8)+16 = 296, head 64+8+8+1 = 81 -> 809. Generator (shares embeddings): attention
# 3*(16+4)+(16+4)+8 = 88, FFN (32+8)+(32+4)+8 = 84, head 16+4+8+10 = 38 -> 210.
HAND_PARAMS = {"discriminator": 809, "generator": 210, "total": 1019}


def _plan(config):
    """What the config's objective declares it computes (the analytic count and the reference model use it)."""
    return get_objective(config.objective).flop_plan(config)


def test_toy_components_match_hand_count():
    report = flop_report(toy_config())
    assert report.predicted_positions == 1
    assert report.breakdown == {key: 2 * value for key, value in HAND_FORWARD.items()}  # backward = forward
    assert report.train_flops_per_sequence == 2 * 10998
    assert report.train_flops_per_step == 3 * 2 * 10998
    assert report.train_flops_total == 5 * 3 * 2 * 10998
    assert report.inference_flops == 976 + 3188 + 2976 + 864  # kept encoder + per-token head, no generator
    assert report.matmul_flops("train") == HAND_MATMUL
    assert report.params == HAND_PARAMS


def test_toy_measured_matches_hand_count():
    """FlopCounterMode on the transformers modules sees exactly the hand-counted matmuls; backward is 2x."""
    config = toy_config()
    model = build_reference_model(config, _plan(config))
    measured = measure_training_step(model, random_batch(config, 4), backward=True)
    assert measured["forward"] == HAND_MATMUL
    assert measured["backward"] == 2 * HAND_MATMUL
    assert measured["paper_convention_train"] == 2 * HAND_MATMUL
    assert sum(p.numel() for p in model.parameters()) == HAND_PARAMS["total"]


def test_exact_layernorm_option_adds_the_quirk_back():
    quirky = flop_report(toy_config())
    exact = flop_report(toy_config(), paper_quirks=False)
    # LayerNorm after attention: 5 flat -> 5*8 (discriminator) and 5*4 (generator) per token, 4 tokens, x2 train
    assert exact.train_flops_per_sequence - quirky.train_flops_per_sequence == 2 * 4 * ((40 - 5) + (20 - 5))


def test_objectives_charge_what_they_run():
    electra = flop_report(toy_config())
    mlm = flop_report(toy_config(objective="mlm"))
    # MLM baseline: discriminator-size encoder with a masked-LM head (dense 8->4) at the 1 predicted position
    assert mlm.breakdown["discriminator.head"] == 2 * (2 * 8 * 4 + 4 + 32 + 20 + 80 + 50 + 20)
    assert "generator.head" not in mlm.breakdown
    assert mlm.inference_flops == electra.inference_flops
    unigram = flop_report(toy_config(generator="unigram"))
    assert unigram.train_flops_per_sequence == 2 * (976 + 3188 + 2976 + 864)
    electric = flop_report(toy_config(objective="electric"))
    # energy head = ELECTRA's head + one add per token; two towers; cloze head on 2x4 states at all 4 positions
    assert electric.breakdown["discriminator.head"] == 2 * (864 + 4)
    assert (
        electric.breakdown["generator_ltr.attention"]
        == electric.breakdown["generator_rtl.attention"]
        == 2 * 1092
    )
    assert electric.breakdown["generator.head"] == 2 * 4 * (2 * 8 * 4 + 4 + 32 + 20 + 80 + 50 + 20)


def test_predicted_position_rules():
    assert predicted_positions(0.15, 128) == 20  # the paper's 20 of 128
    assert predicted_positions(0.15, 128, "reference") == 19  # int((0.15 + 0.005) * 128)
    assert predicted_positions(0.15, 512, "paper") == 80
    assert predicted_positions(0.25, 512, "paper") == 80  # the script ignores mask_prob
    assert predicted_positions(0.15, 512) == 77
    assert predicted_positions(0.15, 120) == 18  # exact products are not rounded up
    assert predicted_positions(0.15, 128, 7) == 7
    with pytest.raises(UserError):
        predicted_positions(0.15, 128, "most")


def test_budget_helpers():
    report = flop_report(toy_config())
    per_step = 3 * 2 * 10998
    assert report.flops_for_steps(7) == 7 * per_step
    assert report.steps_within_budget(7 * per_step) == 7
    assert report.steps_within_budget(7 * per_step - 1) == 6


# ------------------------------------------------------------------------------------------ paper figures
# The paper prints FLOPs to two significant figures (1.4e18 stands for 1.35e18 to 1.45e18): 3% holds every
# rounding of a figure that matches, and is written here, not read from the code under test.
TOLERANCE = 0.03
# What `electra flops --paper` must say of each row of the paper's tables (written out, not read from the rows'
# own flags): ok within TOLERANCE; "differs (see note)" where we reproduce the run but the printed figure is
# another one; "not reproduced" for other architectures.
EXPECTED_STATUS = {
    "ELMo": "not reproduced",
    "GPT": "ok",
    "BERT-Small": "ok",
    "BERT-Base": "ok",
    "ELECTRA-Small (released 1/4 generator)": "differs (see note)",
    "ELECTRA-Small (1/2 generator)": "ok",
    "ELECTRA-Small 50% trained": "ok",
    "ELECTRA-Small 25% trained": "ok",
    "ELECTRA-Small 12.5% trained": "ok",
    "ELECTRA-Small 6.25% trained": "ok",
    "ELECTRA-Base": "ok",
    "BERT-Large": "ok",
    "RoBERTa-100K": "ok",
    "RoBERTa-500K": "ok",
    "XLNet": "not reproduced",
    "BERT (ours, 400K steps)": "differs (see note)",
    "ELECTRA-400K": "ok",
    "ELECTRA-1.75M": "ok",
}


def _row(name: str) -> dict:
    return reproduce(next(model for model in PAPER_MODELS if model.name == name))


@pytest.mark.parametrize(
    "name, train, infer",
    [
        ("ELECTRA-Small (1/2 generator)", 1.4e18, 3.7e9),
        ("BERT-Small", 1.4e18, 3.7e9),
        ("ELECTRA-Base", 6.4e19, 2.9e10),
        ("BERT-Base", 6.4e19, 2.9e10),
        ("ELECTRA-400K", 7.1e20, None),
        ("ELECTRA-1.75M", 3.1e21, None),
        ("BERT-Large", 1.9e20, None),
    ],
)
def test_paper_figures_within_tolerance(name, train, infer):
    row = _row(name)
    assert row["ours_train_flops"] == pytest.approx(train, rel=TOLERANCE)
    if infer is not None:
        assert row["ours_infer_flops"] == pytest.approx(infer, rel=TOLERANCE)


def test_electra_small_published_figure_needs_the_half_width_generator():
    released = flop_report(build_config("small"))  # 1/4 generator: hidden 64
    half = flop_report(build_config("small", overrides={"generator_hidden_multiplier": 0.5}))
    assert released.train_flops_total == pytest.approx(1.29e18, rel=0.01)
    assert half.train_flops_total == pytest.approx(1.42e18, rel=0.01)
    assert released.inference_flops == pytest.approx(3.7e9, rel=TOLERANCE)
    assert released.params["discriminator"] == pytest.approx(14e6, rel=0.05)


def test_every_reproducible_row_is_ok_and_others_are_listed():
    rows = reproduce_all()
    assert {row["name"]: row["status"] for row in rows} == EXPECTED_STATUS
    for row in rows:
        if row["status"] == "ok":
            assert abs(row["train_rel_diff"]) <= TOLERANCE, row
            assert row["infer_rel_diff"] is None or abs(row["infer_rel_diff"]) <= TOLERANCE, row
        elif row["status"] == "not reproduced":
            assert "other architecture" in row["note"]
        else:  # reproduced, and the printed figure is not ours: the note says why, and it really differs
            assert row["note"] and abs(row["train_rel_diff"]) > TOLERANCE, row


# -------------------------------------------------------------------------------- analytic vs measured
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"objective": "mlm"},
        {"objective": "electric"},
        {"objective": "electra-tt"},
        {"generator": "unigram"},
        {"embedding_sharing": "none"},
        {"embedding_sharing": "gdes"},
        {"embedding_sharing": "all", "generator_hidden_multiplier": 1.0},
    ],
)
def test_tiny_measured_matches_analytic_on_cpu(overrides):
    """Real kernels on CPU, SDPA attention (the CPU flash kernel FlopCounterMode misses without our mapping)."""
    config = build_config("tiny", overrides=overrides)
    result = matmul_flops_of_config(
        config, _plan(config), seq_len=32, backward=True, attn_implementation="sdpa", device="cpu"
    )
    assert result["ratio"] == pytest.approx(1.0, abs=0.02)
    assert result["ratio"] == pytest.approx(1.0, abs=1e-9)  # the same integer positions: exact, in fact
    assert result["backward_to_forward"] == pytest.approx(
        2.0, abs=0.05
    )  # autograd: ~2x; the paper charges 1x
    assert result["params_measured"] == result["params_analytic"]


@pytest.mark.parametrize("size", ["tiny", "small", "base"])
def test_measured_matches_analytic_at_training_length(size):
    """Full-size modules on the meta device (shapes only, no compute), forward and backward, eager attention."""
    config = build_config(size)
    result = matmul_flops_of_config(config, _plan(config), backward=True)
    assert result["seq_len"] == config.max_seq_length
    assert result["ratio"] == pytest.approx(1.0, abs=0.02)
    assert result["backward_to_forward"] == pytest.approx(2.0, abs=0.01)
    assert result["params_measured"] == result["params_analytic"]


def test_flop_counter_sees_cpu_sdpa():
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    with flop_counter() as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 2 * (2 * 2 * 3 * 16 * 16 * 8)  # scores + weighted values


def test_fvcore_agrees_with_flop_counter_mode():
    """fvcore counts a multiply-add as 1; doubled, its matmul count equals FlopCounterMode's (eager attention)."""
    config = build_config("tiny")
    model = build_reference_model(config, _plan(config), seq_len=32).eval()
    batch = random_batch(config, 32)
    with torch.no_grad():
        doubled = fvcore_forward_flops(
            model, (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        )
    assert doubled == flop_report(config, seq_len=32).matmul_flops("train")


# ------------------------------------------------------------------------------------------- fine-tuning
def test_finetune_counts_match_transformers_heads():
    from transformers import (
        BertConfig,
        ElectraConfig,
        ElectraForQuestionAnswering,
        ElectraForSequenceClassification,
    )

    shape = dict(
        vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    electra = ElectraConfig(**shape)
    ids = torch.randint(0, 100, (2, 24))
    for model_cls, head, labels in (
        (ElectraForSequenceClassification, "sequence", 3),
        (ElectraForQuestionAnswering, "token", 2),  # start and end logits
    ):
        model = model_cls(ElectraConfig(**shape, num_labels=labels)).eval()
        with flop_counter() as counter, torch.no_grad():
            model(input_ids=ids)
        report = finetune_flops(electra, seq_len=24, num_sequences=10, num_labels=labels, head=head)
        assert counter.get_total_flops() / 2 == report.matmul_forward_flops_per_sequence
        assert report.train_flops == 2 * 10 * report.forward_flops_per_sequence
    bert = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    same = finetune_flops(bert, seq_len=24, num_sequences=1)
    unfactorised = finetune_flops(
        ElectraConfig(**{**shape, "embedding_size": 32}), seq_len=24, num_sequences=1
    )
    assert same.forward_flops_per_sequence == unfactorised.forward_flops_per_sequence
    assert finetune_flops(build_config("small"), 128, 1).forward_flops_per_sequence > 0
    with pytest.raises(UserError):
        finetune_flops({"hidden_size": 8}, 16, 1)


# ----------------------------------------------------------------------------------------------------- CLI
def test_cli_json_matches_counter(capsys):
    from electra.app.cli import main

    assert main(["flops", "--size", "small", "--set", "generator_hidden_multiplier=0.5", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    expected = flop_report(build_config("small", overrides={"generator_hidden_multiplier": 0.5}))
    assert payload["train_flops_total"] == pytest.approx(expected.train_flops_total)
    assert payload["inference_flops"] == pytest.approx(expected.inference_flops)
    assert sum(payload["breakdown"].values()) == pytest.approx(payload["train_flops_per_sequence"])


def test_cli_table_config_file_and_seq_len(tmp_path, capsys):
    from electra.app.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024}))
    assert main(["flops", "--size", "tiny", "--config", str(path), "--seq-len", "64", "--measure"]) == 0
    out = capsys.readouterr().out
    assert "discriminator.attention" in out and "sequence length 64" in out
    # the objective's real step: its metrics (the generator entropy's dot products) add a few hundredths of 1%
    ratio = float(re.search(r"\(ratio ([0-9.]+)\)", out).group(1))
    assert ratio == pytest.approx(1.0, abs=0.002)


def test_cli_paper_table_prints_both_small_figures(capsys):
    from electra.app.cli import main

    assert main(["flops", "--paper"]) == 0
    out = capsys.readouterr().out
    assert "1.29e+18" in out and "1.42e+18" in out
    assert "not reproduced" in out and "ELECTRA-400K" in out


def test_cli_bad_input_is_a_user_error(capsys):
    from electra.app.cli import main

    assert main(["flops", "--set", "hiden_size=3"]) == 2
    assert main(["flops", "--output-positions", "most"]) == 2
    assert main(["flops", "--seq-len", "4096"]) == 2
    assert "error" in capsys.readouterr().err


# --------------------------------------------------------------------- the library's own modules, measured
def _tokenizer(size: int = 200):
    from transformers import ElectraTokenizerFast

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    tokenizer = ElectraTokenizerFast(vocab={token: i for i, token in enumerate(tokens)})
    assert len(tokenizer) == size
    return tokenizer


def _full_batch(tokenizer, seq_len: int, batch_size: int = 2) -> dict[str, torch.Tensor]:
    """[CLS] A [SEP] B [SEP], no padding: n = seq_len - 3 candidates per row."""
    ids = torch.randint(5, len(tokenizer), (batch_size, seq_len))
    ids[:, 0], ids[:, seq_len // 2], ids[:, -1] = (
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        tokenizer.sep_token_id,
    )
    types = torch.zeros_like(ids)
    types[:, seq_len // 2 + 1 :] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": types}


@pytest.mark.parametrize("objective", ["electra", "mlm", "cloze"])
def test_library_pretraining_model_matches_analytic(objective):
    """`electra.training.model.build_pretraining_model` under FlopCounterMode vs the analytic matmul count.

    Its masking picks round(mask_prob * n) of the n = seq_len - 3 non-special tokens per row; the analytic count
    is asked for that many predicted positions.
    """
    from electra.training.model import build_pretraining_model

    tokenizer = _tokenizer()
    config = build_config("tiny", overrides={"objective": objective, "max_seq_length": 64})
    model = build_pretraining_model(config, tokenizer)
    seq_len, batch_size = 64, 2
    measured = measure_training_step(model, _full_batch(tokenizer, seq_len, batch_size), backward=True)
    k = round(config.mask_prob * (seq_len - 3))
    report = flop_report(config, seq_len=seq_len, output_positions=k)
    assert measured["forward"] / batch_size == pytest.approx(report.matmul_flops("train"), rel=0.02)
    assert measured["backward_to_forward"] == pytest.approx(2.0, abs=0.05)
    trainable = sum(p.numel() for p in model.parameters())
    assert trainable == report.params["total"]


def test_library_two_tower_generator_matches_analytic():
    from electra.generators.two_tower import TwoTowerGenerator

    config = build_config("tiny", overrides={"objective": "electric", "max_seq_length": 64})
    generator = TwoTowerGenerator(config).eval()
    ids = torch.randint(5, config.vocab_size, (1, 64))
    with flop_counter() as counter, torch.no_grad():
        generator(ids)  # logits at every position, as Electric's noise probabilities need
    report = flop_report(config, seq_len=64)
    assert counter.get_total_flops() == pytest.approx(
        report.matmul_flops("train", network="generator"), rel=0.02
    )


@pytest.mark.parametrize("objective", ["electra", "electric", "cloze"])
def test_startup_check_on_a_padded_batch(objective):
    """Padding changes no matmul of a step: ELECTRA's generator head runs on K slots per row (fillers included)
    and Electric's two-tower head at every position, so the check counts by the batch's shape alone."""
    from electra.flops.measured import startup_check
    from electra.generators.fused_nll import plain_head
    from electra.training.model import build_pretraining_model

    tokenizer = _tokenizer(4000)  # a vocabulary large enough for the two-tower head to matter
    config = build_config("tiny", overrides={"max_seq_length": 48, "objective": objective})
    model = build_pretraining_model(config, tokenizer)
    batch = _full_batch(tokenizer, 48, batch_size=3)
    batch["attention_mask"][1, 30:] = 0  # a shorter row: fewer picked positions, the same matmuls
    batch["input_ids"][1, 30:] = tokenizer.pad_token_id
    with (
        plain_head()
    ):  # as pretraining runs it: the model's own FLOPs, not Electric's re-projected sample rows
        result = startup_check(model, batch, config, _plan(config))
    assert result["ok"], result
    assert result["predicted_positions"] == 7  # K = round(0.15 * 48) slots in every row


def test_a_preset_counts_the_vocabulary_pretraining_trains(capsys):
    """Before: `electra flops --size tiny` counted a 30,522 vocabulary (4.98M parameters) where pretraining trains
    8,192 (2.10M)."""
    from electra.app.cli import main
    from electra.core.outputs import SpecialIds
    from electra.training.model import PretrainingModel

    assert main(["flops", "--size", "tiny", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    config = build_config("tiny")
    assert config.vocab_size == config.tokenizer_vocab_size == 8192
    model = PretrainingModel(config, SpecialIds(0, 2, 3, 4))
    assert report["params"]["total"] == sum(p.numel() for p in model.parameters())
    assert build_config("tiny", overrides={"vocab_size": 30522}).vocab_size == 30522  # an explicit size stays


# ------------------------------------------- every objective and generator: the count is what the step runs
def _built_in_objectives() -> list[str]:
    """The library's own objectives (tests/test_objective_registry.py registers a toy one of its own)."""
    from electra.objectives import objective_names

    return [
        n for n in objective_names() if type(get_objective(n)).__module__.startswith("electra.objectives")
    ]


GENERATORS = ("mlm", "two-tower", "unigram")
# The (objective, generator) pairs a config accepts, written out: a pair `build_config` starts to refuse fails
# test_exactly_these_combinations_are_accepted instead of vanishing from the parametrized checks below.
COMBINATIONS = [
    *(("electra", g) for g in GENERATORS),
    ("electra-tt", "two-tower"),
    ("mlm", "mlm"),
    ("electric", "two-tower"),
    *(("electra-15", g) for g in GENERATORS),
    *(("replace-mlm", g) for g in GENERATORS),
    *(("all-tokens-mlm", g) for g in GENERATORS),
    ("electra-adversarial", "mlm"),
    ("electra-two-stage", "mlm"),
    ("cloze", "two-tower"),
]


def test_exactly_these_combinations_are_accepted():
    assert {o for o, _ in COMBINATIONS} == set(_built_in_objectives())
    for objective in _built_in_objectives():
        for generator in GENERATORS:
            overrides = {"objective": objective, "generator": generator}
            if (objective, generator) in COMBINATIONS:
                build_config("tiny", overrides=overrides)
            else:
                with pytest.raises(UserError):
                    build_config("tiny", overrides=overrides)


@pytest.mark.parametrize("objective, generator", COMBINATIONS)
def test_startup_check_agrees_for_every_objective_and_generator(objective, generator):
    """The library's own model, one step on a batch with a short padded row, against the analytic count.

    Before: ELECTRA (and Replace/All-Tokens MLM, ELECTRA-15) with a two-tower generator were charged the
    two-tower head at every position where `corrupt` runs it at the K masked slots (ratio 0.67 at length 128);
    All-Tokens MLM was charged its vocabulary head at padding it never runs on (0.80 on short examples)."""
    from electra.flops.measured import startup_check
    from electra.generators.fused_nll import plain_head
    from electra.training.model import build_pretraining_model

    if not get_objective(objective).startup_flop_check:
        assert objective == "electra-two-stage"  # measured stage by stage below
        pytest.skip(
            f"{objective}'s steps differ by design: test_two_stage_electra_is_measured_stage_by_stage"
        )
    tokenizer = _tokenizer(2000)
    config = build_config(
        "tiny", overrides={"objective": objective, "generator": generator, "max_seq_length": 48}
    )
    torch.manual_seed(0)
    token_counts = torch.ones(len(tokenizer)) if generator == "unigram" else None
    model = build_pretraining_model(config, tokenizer, token_counts=token_counts)
    batch = _full_batch(tokenizer, 48, batch_size=3)
    batch["attention_mask"][1, 12:] = 0  # a short example: a quarter of the row is padding
    batch["input_ids"][1, 11] = tokenizer.sep_token_id
    batch["input_ids"][1, 12:] = tokenizer.pad_token_id
    with plain_head():
        result = startup_check(model, batch, config, _plan(config))
    assert result["ratio"] == pytest.approx(1.0, abs=0.02), result
    assert result["ok"]


def test_two_stage_electra_is_measured_stage_by_stage():
    """ELECTRA two-stage runs the generator alone (trained) for its first steps, then the frozen generator forward
    and the discriminator trained. Each stage's measured forward matches the analytic count of the networks it
    runs, and the run is charged the average worked here: per sequence, first * 2G + (1 - first) * (G + 2D), with
    G and D the analytic forward FLOPs of the generator and the discriminator (2 = a forward and the paper's
    backward; the frozen generator's 1 = forward only)."""
    from electra.flops.measured import executed_report, measure_training_step
    from electra.generators.fused_nll import plain_head
    from electra.training.model import build_pretraining_model

    tokenizer = _tokenizer(2000)
    overrides = {"objective": "electra-two-stage", "max_seq_length": 48, "max_steps": 10}
    config = build_config("tiny", overrides={**overrides, "two_stage_generator_steps": 3})
    torch.manual_seed(0)
    model = build_pretraining_model(config, tokenizer)
    batch = _full_batch(tokenizer, 48, batch_size=3)
    executed = executed_report(config, _plan(config), batch)
    with plain_head(), torch.no_grad():
        first_stage = measure_training_step(model, batch, backward=False)["forward"]
        model.two_stage_calls.fill_(3)  # the generator's 3 steps are done
        second_stage = measure_training_step(model, batch, backward=False)["forward"]
    assert first_stage == pytest.approx(3 * executed.matmul_flops("train", "generator"), rel=0.02)
    assert second_stage == pytest.approx(3 * executed.matmul_flops("train"), rel=0.02)
    assert second_stage > 1.8 * first_stage  # the discriminator is the generator's size here

    report = flop_report(config)
    forward = {
        part: sum(t.flops for t in report.train_terms if t.network == part)
        for part in ("generator", "discriminator")
    }
    first = 3 / 10
    expected = first * 2 * forward["generator"] + (1 - first) * (
        forward["generator"] + 2 * forward["discriminator"]
    )
    assert report.train_flops_per_sequence == pytest.approx(expected, rel=1e-9)


def test_electra_with_a_two_tower_generator_is_charged_as_electra_tt():
    """`--objective electra --generator two-tower` trains exactly ELECTRA-TT: the same count (before: 7.75e10 vs
    6.24e10 per step at tiny), the generator's vocabulary projection at the predicted positions only."""
    plain = flop_report(build_config("tiny", overrides={"generator": "two-tower"}))
    tt = flop_report(build_config("tiny", overrides={"objective": "electra-tt"}))
    assert plain.train_flops_per_step == tt.train_flops_per_step
    assert plain.breakdown == tt.breakdown
    for objective in ("replace-mlm", "all-tokens-mlm", "electra-15"):
        config = build_config("tiny", overrides={"objective": objective, "generator": "two-tower"})
        assert _plan(config).two_tower_head_at == "predicted"
    # Electric's noise (and the cloze loss) needs the head at every position
    assert _plan(build_config("tiny", overrides={"objective": "electric"})).two_tower_head_at == "candidates"


@pytest.mark.parametrize("objective, generator", COMBINATIONS)
def test_reference_modules_match_the_analytic_count_for_every_plan(objective, generator):
    """The transformers reference modules mirror every FlopPlan (before: the kept model's masked-LM heads and the
    cloze objective's head-less plan were built as ELECTRA's, measured/analytic 0.57 to 1.32)."""
    config = build_config("tiny", overrides={"objective": objective, "generator": generator})
    result = matmul_flops_of_config(config, _plan(config), seq_len=32, backward=True)
    assert result["ratio"] == pytest.approx(1.0, abs=1e-9)
    assert result["params_measured"] == result["params_analytic"]


@pytest.mark.parametrize(
    "objective", ["cloze", "replace-mlm", "all-tokens-mlm", "electra", "electra-tt", "electric", "mlm"]
)
def test_cli_measure_runs_the_objectives_step(objective, capsys):
    """`electra flops --measure` measures what the objective's training step runs (before: 1.3203 for cloze,
    0.9013 for replace-mlm, 0.5664 for all-tokens-mlm)."""
    from electra.app.cli import main

    args = ["flops", "--set", f"objective={objective}", "--seq-len", "32", "--measure", "--json"]
    assert main(args) == 0
    measured = json.loads(capsys.readouterr().out)["measured"]
    assert measured["ratio"] == pytest.approx(1.0, abs=0.02), measured
    assert measured["backward_to_forward"] == pytest.approx(2.0, abs=0.1)
    assert main(args[:-1]) == 0
    assert "one training step of the objective's model" in capsys.readouterr().out


def test_cli_measure_notes_an_objective_whose_steps_differ(capsys):
    from electra.app.cli import main

    assert main(["flops", "--set", "objective=electra-two-stage", "--seq-len", "16", "--measure"]) == 0
    assert "steps differ by design" in capsys.readouterr().out


def test_all_tokens_head_counted_at_the_real_tokens_of_a_padded_batch():
    """The logged count charges every position (the paper's full-length accounting); what a padded batch
    executes is the vocabulary head at its real tokens only, which the start-up check counts."""
    from electra.flops.measured import executed_report

    config = build_config("tiny", overrides={"objective": "all-tokens-mlm", "max_seq_length": 8})
    ids = torch.full((2, 8), 7)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0  # 8 + 4 real tokens: 6 per row
    executed = executed_report(config, _plan(config), {"input_ids": ids, "attention_mask": mask})
    full = flop_report(config, seq_len=8, output_positions=executed.predicted_positions)
    head = [t for t in full.train_terms if t.network == "discriminator" and t.component == "head"]
    per_position = sum(t.flops for t in head if t.kind == "matmul") / 8
    assert full.matmul_flops("train") - executed.matmul_flops("train") == pytest.approx(2 * per_position)


@pytest.mark.parametrize("seq_len", [0, -1])
def test_a_sequence_length_below_one_is_refused(seq_len, capsys):
    """Before: `--seq-len 0` silently counted max_seq_length (128)."""
    from electra.app.cli import main

    with pytest.raises(UserError, match="at least 1"):
        flop_report(build_config("tiny"), seq_len=seq_len)
    assert main(["flops", "--seq-len", str(seq_len)]) == 2
    err = capsys.readouterr().err
    assert "--seq-len must be at least 1" in err and len(err.strip().splitlines()) == 1
    assert main(["flops", "--seq-len", "3", "--measure"]) == 2
    assert flop_report(build_config("tiny"), seq_len=1).seq_len == 1


# ----------------------------------------------------------------------------------------- export scoring
@pytest.mark.parametrize(
    "objective, generator, expected",
    [
        ("electra", "two-tower", ["electra-tt", "cloze"]),  # before: ["cloze"]
        ("electra-tt", "two-tower", ["electra-tt", "cloze"]),
        ("electra", "mlm", ["mlm"]),
        ("electra", "unigram", []),
        ("electra-15", "two-tower", ["cloze"]),  # its discriminator is not the one electra-tt reads
    ],
)
def test_export_scoring_of_an_electra_discriminator(objective, generator, expected):
    from electra.core.outputs import SpecialIds
    from electra.training.model import PretrainingModel

    config = build_config("tiny", overrides={"objective": objective, "generator": generator})
    counts = torch.ones(config.vocab_size) if generator == "unigram" else None
    model = PretrainingModel(config, SpecialIds(0, 2, 3, 4), token_counts=counts)
    assert list(get_objective(objective).scoring(model)) == expected


# ------------------------------------------------------------------------------------------------ docs
def test_flops_page_states_every_paper_row_that_differs():
    """The site's "Counting FLOPs" page (docs/flops.md, once README's "Counting compute") names each `--paper` row
    outside the tolerance with both figures and the difference `electra flops --paper` prints (before: it said all
    agreed within 3%)."""
    from pathlib import Path

    from electra.flops.report import sci  # the table's format

    page = (Path(__file__).resolve().parents[1] / "docs" / "flops.md").read_text()
    flat = " ".join(page.split())
    assert "all agree within 3%" not in flat
    differing = [row for row in reproduce_all() if row["status"] == "differs (see note)"]
    assert len(differing) == 2
    for row in differing:
        name = row["name"].split(" (")[0] if row["name"].startswith("ELECTRA-Small") else row["name"]
        assert name in flat, name
        assert sci(row["ours_train_flops"]).replace("e+", "e") in flat, row["name"]  # the page writes 1.29e18
        assert f"{100 * row['train_rel_diff']:.1f}%".replace("-", "−") in flat, row["name"]


@pytest.mark.parametrize(
    "extra",
    [
        ["--measure"],
        ["--set", "generator_hidden_multiplier=0.5"],
        ["--seq-len", "64"],
        ["--output-positions", "all"],
    ],
)
def test_paper_refuses_the_options_it_would_ignore(extra, tmp_path, capsys):
    """Before: `--paper` printed its fixed table and dropped these without a word, so `--paper --measure` measured
    nothing and `--paper --set ...` looked like the table of the user's configuration."""
    from electra.app.cli import main

    assert main(["flops", "--paper", *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"--paper takes no {extra[0]}" in captured.err
    config = tmp_path / "config.json"
    config.write_text("{}")
    assert main(["flops", "--paper", "--config", str(config)]) == 2
    assert "--paper takes no --config" in capsys.readouterr().err


def test_cli_counts_a_continued_runs_checkpoint_shape(tmp_path, capsys):
    """Before: `electra flops --set init_from=DIR` (or a --config naming it) counted the --size preset's shape,
    not DIR's that `electra pretrain` would train, and a DIR that did not exist was not noticed."""
    from transformers import ElectraConfig, ElectraForPreTraining

    from electra.app.cli import main

    checkpoint = tmp_path / "checkpoint"
    tokenizer = _tokenizer()
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    config = ElectraConfig(vocab_size=len(tokenizer), embedding_size=32, max_position_embeddings=64, **shape)
    ElectraForPreTraining(config).save_pretrained(str(checkpoint), safe_serialization=True)
    tokenizer.save_pretrained(str(checkpoint))
    assert main(["flops", "--set", f"init_from={checkpoint}", "--json"]) == 0
    counted = json.loads(capsys.readouterr().out)
    # the checkpoint's own discriminator, parameter for parameter (tiny's preset has 1.9M), at its length 64
    model = ElectraForPreTraining(config)
    assert counted["params"]["discriminator"] == sum(p.numel() for p in model.parameters())
    assert counted["seq_len"] == 64
    file = tmp_path / "run.json"
    file.write_text(json.dumps({"init_from": str(checkpoint)}))
    assert main(["flops", "--config", str(file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inference_flops"] == counted["inference_flops"]
    assert main(["flops", "--set", f"init_from={tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'missing'}: not a directory" in err
