"""Cross-View Training's tagger (electra.tagging.cvt_*): each auxiliary module sees only its view, the unlabeled
loss never trains the primary module, the labeled loss is the smoothed cross-entropy, a saved tagger comes back the
same, and `electra tag-bilstm` runs end to end on tiny files."""

from __future__ import annotations

import json
import math

import pytest
import torch

from electra.app.cli import main
from electra.tagging.cvt_model import (
    AUXILIARY_MODULES,
    CvtTagger,
    CvtTaggerConfig,
    build_vocabulary,
    cvt_loss,
    load_tagger,
    make_batch,
    reverse_within,
    save_tagger,
    supervised_loss,
    teacher_probabilities,
)
from electra.tagging.cvt_settings import CvtSettings
from electra.tagging.unlabeled import read_unlabeled, tokenize

SENTENCE = ["The", "old", "cat", "sat", "on", "mats", "."]
OTHER = ["A", "dog", "ran", "to", "1,500", "extraordinarily", "tall", "trees", "!"]
LABELS = ["O", "B-NP", "I-NP", "E-NP", "S-NP"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_tagger(seed: int = 0, modules=AUXILIARY_MODULES):
    torch.manual_seed(seed)
    vocab = build_vocabulary([SENTENCE, OTHER], LABELS, min_count=1)
    config = CvtTaggerConfig(
        len(vocab.words),
        len(vocab.chars),
        len(LABELS),
        word_dim=8,
        char_dim=5,
        char_filters=4,
        lstm1=12,
        lstm2=6,
        projection=10,
        modules=modules,
    )
    return CvtTagger(config).eval(), vocab


def _logits(model, vocab, sentence, module):
    """The module's logits for `sentence`, run in a batch beside a longer sentence (padding must not leak)."""
    batch = make_batch([sentence, OTHER], vocab, model.config.max_word_length)
    with torch.no_grad():
        return model(batch, 0.0, AUXILIARY_MODULES)[module][0]


# (module, positions it must not see, a position it must see) for the word at t
VIEWS = {
    "fwd": (lambda t, n: range(t + 1, n), lambda t: t),
    "future": (lambda t, n: range(t, n), lambda t: t - 1),
    "bwd": (lambda t, n: range(0, t), lambda t: t),
    "past": (lambda t, n: range(0, t + 1), lambda t: t + 1),
}


@pytest.mark.parametrize("module", sorted(VIEWS))
def test_no_auxiliary_module_sees_what_its_view_hides(module):
    model, vocab = tiny_tagger()
    n = len(SENTENCE)
    hidden, visible = VIEWS[module]
    for t in range(1, n - 1):
        base = _logits(model, vocab, SENTENCE, module)[t + 1]  # position t+1: the frame's <start> is 0
        for i in hidden(t, n):
            changed = list(SENTENCE)
            changed[i] = "extraordinarily"  # another word, spelling and length
            torch.testing.assert_close(_logits(model, vocab, changed, module)[t + 1], base, rtol=0, atol=1e-6)
        changed = list(SENTENCE)
        changed[visible(t)] = "extraordinarily"
        moved = (_logits(model, vocab, changed, module)[t + 1] - base).abs().max()
        assert moved > 1e-4, f"{module} at {t} does not react to word {visible(t)}, which it should see"


def test_primary_and_full_modules_see_the_whole_sentence():
    model, vocab = tiny_tagger()
    for module in ("primary", "full"):
        base = _logits(model, vocab, SENTENCE, module)[2]
        for i in (0, len(SENTENCE) - 1):
            changed = list(SENTENCE)
            changed[i] = "extraordinarily"
            assert (_logits(model, vocab, changed, module)[2] - base).abs().max() > 1e-4


def test_a_sentence_scores_the_same_alone_and_beside_longer_ones():
    model, vocab = tiny_tagger()
    alone = make_batch([SENTENCE], vocab, 20)
    with torch.no_grad():
        single = model(alone, 0.0, AUXILIARY_MODULES)
    words = slice(1, len(SENTENCE) + 1)  # the real words (`past` at `<end>` would read past the frame)
    for module, logits in single.items():
        torch.testing.assert_close(
            _logits(model, vocab, SENTENCE, module)[words], logits[0, words], atol=1e-6, rtol=0
        )


def test_reverse_within_keeps_padding_in_place():
    x = torch.arange(8.0).view(2, 4, 1)
    out = reverse_within(x, torch.tensor([3, 4]))
    assert out[:, :, 0].tolist() == [[2.0, 1.0, 0.0, 3.0], [7.0, 6.0, 5.0, 4.0]]


def test_the_unlabeled_loss_gives_the_primary_module_no_gradient():
    model, vocab = tiny_tagger()
    model.train()
    batch = make_batch([SENTENCE, OTHER], vocab, 20)
    loss, parts = cvt_loss(model, batch, dropout=0.2)
    loss.backward()
    assert set(parts) == set(AUXILIARY_MODULES) and model.training
    for name, parameter in model.named_parameters():
        grad = parameter.grad
        if name.startswith("primary."):
            assert grad is None or not grad.any(), name
    assert all(p.grad is not None and p.grad.any() for p in model.auxiliary.parameters())
    assert model.lstm1.forward_lstm.weight_ih_l0.grad.any() and model.word_embeddings.weight.grad.any()
    assert model.lstm2.forward_lstm.weight_ih_l0.grad.any()  # through the full-view module


def test_the_teacher_is_the_primary_module_without_dropout_or_gradient():
    model, vocab = tiny_tagger()
    model.train()
    batch = make_batch([SENTENCE], vocab, 20)
    targets = teacher_probabilities(model, batch)
    assert model.training and not targets.requires_grad
    with torch.no_grad():
        expected = torch.softmax(model.eval()(batch)["primary"], -1)
    torch.testing.assert_close(targets, expected)
    torch.testing.assert_close(teacher_probabilities(model.train(), batch), targets)  # no dropout: same twice


def test_the_labeled_loss_is_the_label_smoothed_cross_entropy_by_hand():
    model, vocab = tiny_tagger()
    sentences = [SENTENCE, OTHER[:4]]
    tags = [["B-NP", "I-NP", "E-NP", "O", "O", "S-NP", "O"], ["S-NP", "O", "O", "O"]]
    batch = make_batch(sentences, vocab, 20)
    labels = torch.full(batch.words.shape, -1)
    for i, sentence_tags in enumerate(tags):
        labels[i, 1 : len(sentence_tags) + 1] = torch.tensor([vocab.label_ids[t] for t in sentence_tags])
    eps, classes = 0.1, len(LABELS)
    loss = supervised_loss(model, batch, labels, dropout=0.0, smoothing=eps)
    with torch.no_grad():
        logits = model(batch)["primary"]
    total, count = 0.0, 0
    for i, sentence_tags in enumerate(tags):
        for t, tag in enumerate(sentence_tags, start=1):
            row = logits[i, t].tolist()
            log_z = math.log(sum(math.exp(v) for v in row))
            for c in range(classes):
                target = (1 - eps) * (c == vocab.label_ids[tag]) + eps / classes
                total -= target * (row[c] - log_z)
            count += 1
    assert loss.item() == pytest.approx(total / count, rel=1e-5)


def test_a_saved_tagger_round_trips_through_safetensors(tmp_path):
    model, vocab = tiny_tagger(seed=3, modules=("future", "past"))
    save_tagger(model, vocab, tmp_path / "tagger", {"note": "test"})
    assert sorted(p.name for p in (tmp_path / "tagger").iterdir()) == [
        "config.json",
        "model.safetensors",
        "vocab.json",
    ]
    loaded, loaded_vocab = load_tagger(tmp_path / "tagger")
    assert loaded_vocab.to_dict() == vocab.to_dict() and loaded.config == model.config
    batch = make_batch([SENTENCE, OTHER], vocab, 20)
    with torch.no_grad():
        before, after = model(batch, 0.0, ("future", "past")), loaded(batch, 0.0, ("future", "past"))
    for name in before:
        assert torch.equal(before[name], after[name])


def test_a_folder_that_is_not_a_tagger_is_one_line(tmp_path):
    from electra.core.errors import UserError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(UserError, match="not a CVT tagger"):
        load_tagger(tmp_path)


def test_the_learning_rate_warms_up_then_decays_as_the_reference():
    settings = CvtSettings(warmup_steps=10, learning_rate=0.5, lr_decay=0.005)
    assert settings.rate(5) == pytest.approx(0.5 * 0.5 / (1 + 0.005 * math.sqrt(5)))
    assert settings.rate(400) == pytest.approx(0.5 / (1 + 0.005 * 20))


def test_raw_text_is_split_into_treebank_like_words(tmp_path):
    assert tokenize('He said, "I don\'t know (really)."') == [
        "He", "said", ",", '"', "I", "do", "n't", "know", "(", "really", ")", ".", '"',
    ]  # fmt: skip
    assert tokenize("The U.S. economy grew 3.5% in 1987.") == [
        "The",
        "U.S.",
        "economy",
        "grew",
        "3.5%",
        "in",
        "1987",
        ".",
    ]
    tagged = " ".join(
        f"{w}/nn" for w in "the jury said the election was fair and the city was calm .".split()
    )
    (tmp_path / "ca01").write_text(f"\n\n\t{tagged}\n\n\t{tagged}\n\n\tThe/at end/nn ./.\n")  # tags stripped
    assert read_unlabeled(tmp_path)[-1] == ["The", "end", "."]


def _column_file(path, sentences):
    lines = []
    for words, tags in sentences:
        lines += [f"{w} X {t}" for w, t in zip(words, tags)] + [""]
    path.write_text("\n".join(lines))


def test_tag_cvt_trains_end_to_end_and_refuses_in_one_line(tmp_path, capsys):
    data = [
        (["the", "cat", "sat"], ["B-NP", "I-NP", "O"]),
        (["a", "big", "dog", "ran", "home"], ["B-NP", "I-NP", "I-NP", "O", "B-NP"]),
        (["cats", "sleep"], ["B-NP", "O"]),
    ] * 4
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    _column_file(train, data)
    _column_file(test, data[:3])
    (tmp_path / "raw.txt").write_text("The dog sat on the mat. A cat ran home.\n\nDogs sleep.\n")
    argv = [
        "tag-bilstm",
        "--train",
        str(train),
        "--test",
        str(test),
        "--dev-sentences",
        "3",
        "--columns",
        "word,pos,chunk",
    ]
    argv += [
        "--max-steps",
        "4",
        "--eval-every",
        "2",
        "--batch-size",
        "4",
        "--warmup-steps",
        "2",
        "--word-dim",
        "8",
    ]
    argv += ["--char-dim", "4", "--char-filters", "3", "--lstm1", "8", "--lstm2", "8", "--projection", "8"]
    assert main([*argv, "--cvt"]) == 2
    err = capsys.readouterr().err
    assert "--unlabeled" in err and err.count("\n") == 1
    out = tmp_path / "out"
    cvt = [*argv, "--cvt", "--unlabeled", str(tmp_path / "raw.txt"), "--output", str(out), "--seeds", "2"]
    assert main(cvt) == 0
    assert "test f1: median" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cvt"] and summary["unlabeled_sentences"] == 3 and len(summary["test_f1"]["values"]) == 2
    assert (out / "seed-1" / "model.safetensors").is_file() and (
        out / "seed-2" / "test_predictions.txt"
    ).is_file()
    loaded, _ = load_tagger(out / "seed-1")
    assert loaded.config.word_dim == 8
    assert main(cvt) == 2
    assert "already exists" in capsys.readouterr().err
