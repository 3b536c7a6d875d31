"""PLL scorers against one-by-one reference computations, and the model-directory loader's dispatch."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
    ElectraTokenizerFast,
)

from electra.core.errors import UserError
from electra.pll.scoring import ClozeScorer, ElectraTTScorer, ElectricScorer, MaskedLMScorer, load_scorer

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "un",
    "##believ",
    "##able",
    "dog",
    "a",
    "ran",
    "big",
    "##ger",
]
SENTENCES = ["the cat sat on the mat", "a dog ran", "the unbelievable bigger dog sat on a mat", "cat"]
CPU = torch.device("cpu")


def tokenizer():
    return ElectraTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)})


def electra_config(**kw):
    base = dict(
        vocab_size=len(VOCAB),
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    return ElectraConfig(**{**base, **kw})


def one_by_one_pll(model, tok, sentence, extra_masks=lambda ids, p: []):
    """The definition: mask position p (and any extra positions), run the whole model, read log p(x_p)."""
    ids = tok(sentence)["input_ids"]
    total = []
    for p in range(1, len(ids) - 1):
        masked = list(ids)
        for q in [p, *extra_masks(ids, p)]:
            masked[q] = tok.mask_token_id
        logits = model(input_ids=torch.tensor([masked])).logits[0, p]
        total.append(torch.log_softmax(logits, -1)[ids[p]].item())
    return total


@pytest.mark.parametrize("arch", ["electra", "bert"])
def test_masked_lm_pll_equals_one_by_one(arch):
    torch.manual_seed(0)
    if arch == "electra":
        model = ElectraForMaskedLM(electra_config()).eval()
    else:
        model = BertForMaskedLM(
            BertConfig(
                vocab_size=len(VOCAB),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                max_position_embeddings=32,
            )
        ).eval()
    tok = tokenizer()
    with torch.no_grad():
        expected = [one_by_one_pll(model, tok, s) for s in SENTENCES]
    for batch_size in (1, 5, 64):  # sub-batching of the masked copies must not change anything
        results = MaskedLMScorer(model, tok, CPU, batch_size=batch_size).score(SENTENCES)
        for res, exp in zip(results, expected):
            assert [v for _, v in res.tokens] == pytest.approx(exp, abs=1e-5)
            assert res.pll == pytest.approx(sum(exp), abs=1e-4)


def test_within_word_masking_and_word_sums():
    torch.manual_seed(1)
    model = ElectraForMaskedLM(electra_config()).eval()
    tok = tokenizer()
    sentence = "the unbelievable dog"  # [CLS] the un ##believ ##able dog [SEP]
    word_ids = tok(sentence).word_ids()

    def later_pieces(ids, p):
        return [q for q in range(p + 1, len(ids) - 1) if word_ids[q] == word_ids[p]]

    def other_pieces(ids, p):
        return [q for q in range(1, len(ids) - 1) if q != p and word_ids[q] == word_ids[p]]

    with torch.no_grad():
        l2r = one_by_one_pll(model, tok, sentence, later_pieces)
        whole = one_by_one_pll(model, tok, sentence, other_pieces)
    got_l2r = MaskedLMScorer(model, tok, CPU, within_word="l2r").score([sentence])[0]
    got_whole = MaskedLMScorer(model, tok, CPU, within_word="whole").score([sentence])[0]
    assert [v for _, v in got_l2r.tokens] == pytest.approx(l2r, abs=1e-5)
    assert [v for _, v in got_whole.tokens] == pytest.approx(whole, abs=1e-5)
    # Word level: three words, the middle one the sum of its three pieces.
    assert [w for w, _ in got_l2r.words] == ["the", "unbelievable", "dog"]
    assert got_l2r.words[1][1] == pytest.approx(sum(l2r[1:4]), abs=1e-5)
    # "l2r" and "none" differ only on the pieces followed by a piece of the same word.
    plain = MaskedLMScorer(model, tok, CPU).score([sentence])[0]
    assert plain.tokens[3][1] == pytest.approx(got_l2r.tokens[3][1], abs=1e-6)  # ##able: last piece
    assert plain.tokens[1][1] != pytest.approx(got_l2r.tokens[1][1], abs=1e-6)


def write_manifest(root, objective):
    """export.json as `electra.export.layout` writes it, for the parts saved so far: the scoring methods are what the
    objective declares, among those whose parts exist."""
    from electra.objectives import build_config
    from electra.training.model import build_pretraining_model

    parts = sorted(d.name for d in root.iterdir() if d.is_dir())
    small = dict(
        hidden_size=32, num_hidden_layers=1, intermediate_size=64, num_attention_heads=2, embedding_size=16
    )
    model = build_pretraining_model(
        build_config("tiny", overrides={"objective": objective, **small}), tokenizer()
    )
    declared = model.objective.scoring(model)
    manifest = {
        "format": 1,
        "objective": objective,
        "finetune": "discriminator",
        "parts": {name: {"dir": name, "kind": ""} for name in parts},
        "scoring": {m: names for m, names in declared.items() if all(n in parts for n in names)},
    }
    (root / "export.json").write_text(json.dumps(manifest))


def save_electric_run(root, objective="electric", seed=0):
    """A run directory as `electra pretrain` exports it (the pll contract: parts and export.json)."""
    torch.manual_seed(seed)
    disc = ElectraForPreTraining(electra_config())
    disc.config.electra_objective = objective
    disc.save_pretrained(root / "discriminator")
    tokenizer().save_pretrained(root / "discriminator")
    write_manifest(root, objective)
    return disc.eval()


def test_electric_scores_are_the_negative_energies(tmp_path):
    disc = save_electric_run(tmp_path)
    tok = tokenizer()
    scorer = load_scorer(tmp_path, batch_size=3)
    assert isinstance(scorer, ElectricScorer)
    results = scorer.score(SENTENCES)
    with torch.no_grad():
        for sentence, res in zip(SENTENCES, results):
            ids = tok(sentence, return_tensors="pt")["input_ids"]
            neg_energy = disc(input_ids=ids).logits[0, 1:-1]  # one sentence alone: no padding
            assert [v for _, v in res.tokens] == pytest.approx(neg_energy.tolist(), abs=1e-5)
            assert res.pll == pytest.approx(neg_energy.sum().item(), abs=1e-4)


def save_two_tower(root):
    from electra.generators.two_tower import TwoTowerGenerator
    from electra.objectives import build_config

    cfg = build_config(
        "tiny",
        overrides=dict(
            vocab_size=len(VOCAB),
            embedding_size=16,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
            max_seq_length=32,
        ),
    )
    gen = TwoTowerGenerator(cfg)
    gen.save_pretrained(root / "generator")
    if (root / "export.json").is_file():
        write_manifest(root, json.loads((root / "export.json").read_text())["objective"])
    return gen.eval()


def test_electra_tt_scores_follow_the_estimate(tmp_path):
    disc = save_electric_run(tmp_path, objective="electra-tt")
    gen = save_two_tower(tmp_path)
    scorer = load_scorer(tmp_path)
    assert isinstance(scorer, ElectraTTScorer)
    tok = tokenizer()
    res = scorer.score(SENTENCES)
    with torch.no_grad():
        for sentence, got in zip(SENTENCES, res):
            ids = tok(sentence, return_tensors="pt")["input_ids"]
            logit = disc(input_ids=ids).logits[0]
            log_q = torch.log_softmax(gen(ids)[0], -1)
            n = ids.shape[1] - 2
            k = math.ceil(0.15 * n)
            for j, p in enumerate(range(1, n + 1)):
                d = torch.sigmoid(-logit[p]).item()  # P(original)
                q = log_q[p, ids[0, p]].exp().item()
                assert got.tokens[j][1] == pytest.approx(math.log(k * q * d / (n * (1 - d))), abs=1e-4)


def test_cloze_scores_are_the_generator_log_probabilities(tmp_path):
    """`--method cloze`: log q(x_t | x_\\t) of the two-tower generator alone, batched with padding."""
    save_electric_run(tmp_path / "run")
    gen = save_two_tower(tmp_path / "run")
    scorer = load_scorer(tmp_path / "run", method="cloze", batch_size=2)
    assert isinstance(scorer, ClozeScorer)
    tok = tokenizer()
    with torch.no_grad():
        for sentence, got in zip(SENTENCES, scorer.score(SENTENCES)):
            ids = tok(sentence, return_tensors="pt")["input_ids"]
            log_q = torch.log_softmax(gen(ids)[0], -1)  # one sentence alone: no padding
            want = [log_q[p, ids[0, p]].item() for p in range(1, ids.shape[1] - 1)]
            assert [v for _, v in got.tokens] == pytest.approx(want, abs=1e-4)
            assert got.pll == pytest.approx(sum(want), abs=1e-3)
    plain = tmp_path / "no_generator"
    save_electric_run(plain)
    with pytest.raises(UserError, match="needs a two-tower generator"):
        load_scorer(plain, method="cloze")


def test_loader_dispatch_and_clear_errors(tmp_path):
    # A plain ELECTRA run: its discriminator cannot score, its MLM generator can.
    torch.manual_seed(0)
    run = tmp_path / "electra_run"
    save_electric_run(run, objective="electra")
    with pytest.raises(UserError, match="nothing here can score"):
        load_scorer(run)
    with pytest.raises(
        UserError, match="needs an Electric discriminator .its discriminator was trained as 'electra'"
    ):
        load_scorer(run, method="electric")
    ElectraForMaskedLM(electra_config()).save_pretrained(run / "generator")
    tokenizer().save_pretrained(run / "generator")
    write_manifest(run, "electra")
    assert isinstance(load_scorer(run), MaskedLMScorer)
    assert isinstance(load_scorer(run / "generator"), MaskedLMScorer)  # a part of the export
    # An Electric run has no masked LM; asking for one is an error naming the directory.
    electric = tmp_path / "electric_run"
    save_electric_run(electric)
    with pytest.raises(UserError, match="electric_run: cannot score with --method mlm: it needs a masked LM"):
        load_scorer(electric, method="mlm")
    # A directory that is not an export answers from what it holds: an Electric discriminator alone scores.
    assert isinstance(load_scorer(electric / "discriminator"), ElectricScorer)
    (electric / "export.json").unlink()
    assert isinstance(load_scorer(electric / "discriminator"), ElectricScorer)
    with pytest.raises(UserError, match="does not exist"):
        load_scorer(tmp_path / "missing")
    # A broken config.json is a one-line error, not a traceback.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="config.json: not valid JSON"):
        load_scorer(broken)
    assert (
        json.loads((electric / "discriminator" / "config.json").read_text())["electra_objective"]
        == "electric"
    )
