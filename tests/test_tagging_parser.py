"""CVT's dependency parser (electra.tagging.cvt_parser, parse_task, dependencies): each restricted module's edge
score ignores the words its two views hide, the unlabeled loss never trains the primary module, the labeled loss
is the cross-entropy over possible edges by hand, UAS/LAS leave punctuation out, treebanks are read (column files
and CoNLL-U) or refused in one line, a parser learns a toy grammar, and `electra parse-bilstm` runs end to end."""

from __future__ import annotations

import json
import math

import pytest
import torch

from electra.app.cli import main
from electra.core.errors import UserError
from electra.tagging.cvt_model import build_vocabulary, load_tagger, make_batch, save_tagger
from electra.tagging.cvt_parser import (
    CvtParser,
    CvtParserConfig,
    edge_targets,
    load_parser,
    parse_cvt_loss,
    parse_supervised_loss,
)
from electra.tagging.cvt_settings import PARSER_MODULES
from electra.tagging.dependencies import Tree, attachment_scores, read_treebank

SENTENCE = ["The", "old", "cat", "sat", "on", "mats", "."]
OTHER = ["A", "dog", "ran", "to", "1,500", "extraordinarily", "tall", "trees", "!"]
RELATIONS = ["det", "nsubj", "root"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_parser(seed: int = 0):
    torch.manual_seed(seed)
    vocab = build_vocabulary([SENTENCE, OTHER], RELATIONS, min_count=1)
    config = CvtParserConfig(
        len(vocab.words),
        len(vocab.chars),
        len(RELATIONS),
        word_dim=8,
        char_dim=5,
        char_filters=4,
        lstm1=12,
        lstm2=6,
        projection=10,
        arc_dim=6,
    )
    model = CvtParser(config).eval()
    with torch.no_grad():  # relation-specific weights start at zero; make each relation's scores its own
        for module in [model.primary, *model.auxiliary.values()]:
            module.per_relation.normal_(0, 0.3)
    return model, vocab


def _scores(model, vocab, sentence, module):
    """[L, L, R] edge scores of `sentence`, run beside a longer sentence (padding must not leak)."""
    batch = make_batch([sentence, OTHER], vocab, model.config.max_word_length)
    with torch.no_grad():
        out = model(batch, 0.0, PARSER_MODULES)[module][0]
    return out.view(out.shape[0], -1, len(RELATIONS))


def _sees(view: str, position: int, word: int) -> bool:
    """Whether a first-layer direction's state at a framed `position` has read the framed `word`."""
    return word <= position if view == "fwd" else word >= position


@pytest.mark.parametrize("module", [m for m in PARSER_MODULES if m != "full"])
def test_no_restricted_module_sees_what_its_two_views_hide(module):
    model, vocab = tiny_parser()
    head_view, dependent_view = module.split("-")
    n = len(SENTENCE)
    base = _scores(model, vocab, SENTENCE, module)
    moved_somewhere = False
    for k in range(1, n + 1):  # framed position of the word changed
        changed = list(SENTENCE)
        changed[k - 1] = "extraordinarily"
        after = _scores(model, vocab, changed, module)
        for t in range(1, n + 1):
            for u in range(0, n + 1):
                if u == t:
                    continue
                visible = _sees(dependent_view, t, k) or (u > 0 and _sees(head_view, u, k))
                delta = (after[t, u] - base[t, u]).abs().max().item()
                if not visible:
                    assert delta < 1e-6, f"{module}: edge {u}->{t} moved when hidden word {k} changed"
                else:
                    moved_somewhere |= delta > 1e-4
    assert moved_somewhere


def test_impossible_heads_are_masked_and_the_primary_module_sees_everything():
    model, vocab = tiny_parser()
    base = _scores(model, vocab, SENTENCE, "primary")
    n = len(SENTENCE)
    assert (base[torch.arange(1, n + 1), torch.arange(1, n + 1)] < -1e8).all()  # no word heads itself
    assert (base[1:, n + 1] < -1e8).all()  # <end> heads nothing
    changed = list(SENTENCE)
    changed[-1] = "extraordinarily"
    assert (_scores(model, vocab, changed, "primary")[1, 0] - base[1, 0]).abs().max() > 1e-6  # far, so small


def test_the_unlabeled_loss_gives_the_primary_module_no_gradient():
    model, vocab = tiny_parser()
    model.train()
    batch = make_batch([SENTENCE, OTHER], vocab, 20)
    loss, parts = parse_cvt_loss(model, batch, dropout=0.2)
    loss.backward()
    assert set(parts) == set(PARSER_MODULES) and all(math.isfinite(v) for v in parts.values())
    for name, parameter in model.primary.named_parameters():
        assert parameter.grad is None or not parameter.grad.any(), name
    for name, module in model.auxiliary.items():
        assert module.head_hidden.weight.grad.any() and module.query.weight.grad.any(), name
    assert (
        model.lstm1.forward_lstm.weight_ih_l0.grad.any() and model.lstm1.backward_lstm.weight_ih_l0.grad.any()
    )
    assert model.lstm2.forward_lstm.weight_ih_l0.grad.any()  # through the full-view module


def test_the_labeled_loss_is_the_cross_entropy_over_possible_edges_by_hand():
    model, vocab = tiny_parser()
    sentences = [SENTENCE[:4], OTHER[:3]]
    heads = [[3, 3, 4, 0], [2, 3, 0]]
    relations = [[0, 0, 1, 2], [0, 1, 2]]
    batch = make_batch(sentences, vocab, 20)
    targets = edge_targets(heads, relations, batch.words.shape[1], len(RELATIONS))
    with torch.no_grad():
        logits = model(batch)["primary"]
    for smoothing in (0.0, 0.1):
        loss = parse_supervised_loss(model, batch, targets, dropout=0.0, smoothing=smoothing)
        total, count = 0.0, 0
        for i, sentence_heads in enumerate(heads):
            n = len(sentence_heads)
            for t in range(1, n + 1):
                possible = [u * 3 + r for u in range(0, n + 1) if u != t for r in range(3)]
                log_z = math.log(sum(math.exp(logits[i, t, e].item()) for e in possible))
                gold = sentence_heads[t - 1] * 3 + relations[i][t - 1]
                for e in possible:
                    target = (1 - smoothing) * (e == gold) + smoothing / len(possible)
                    total -= target * (logits[i, t, e].item() - log_z)
                count += 1
        assert loss.item() == pytest.approx(total / count, rel=1e-5), smoothing


def test_attachment_scores_leave_punctuation_out_by_hand():
    gold = [Tree((2, 0, 2, 2), ("det", "root", "obj", "punct"), (False, False, False, True))]
    predicted = [([2, 0, 1, 1], ["det", "root", "nsubj", "punct"])]
    scores = attachment_scores(gold, predicted)
    assert scores == {"uas": 2 / 3, "las": 2 / 3, "words": 3.0}
    gold = [Tree((2, 0, 2, 2), ("det", "root", "obj", "punct"), (False, False, False, True))]
    predicted = [([2, 0, 2, 2], ["det", "root", "nsubj", "punct"])]
    assert attachment_scores(gold, predicted) == {"uas": 1.0, "las": 2 / 3, "words": 3.0}
    assert attachment_scores(gold, predicted, punctuation=True) == {"uas": 1.0, "las": 0.75, "words": 4.0}


CONLLU = """# sent_id = 1
# text = The cat's mat sat.
1\tThe\tthe\tDET\tDT\t_\t3\tdet\t_\t_
2-3\tcat's\t_\t_\t_\t_\t_\t_\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnmod\t_\t_
3\tmat\tmat\tNOUN\tNN\t_\t4\tnsubj\t_\t_
3.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t4:conj\t_
4\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

"""


def test_treebanks_are_read_from_column_files_and_conllu(tmp_path):
    (tmp_path / "a.conllu").write_text(CONLLU * 2)
    sentences, trees, relations = read_treebank(tmp_path / "a.conllu")
    assert relations and len(sentences) == 2
    assert sentences[0].words == ["The", "cat", "mat", "sat", "."]
    assert trees[0] == Tree(
        (3, 3, 4, 0, 4), ("det", "nmod", "nsubj", "root", "punct"), (False,) * 4 + (True,)
    )
    (tmp_path / "b.dp").write_text("Pierre\tNNP\t2\nVinken\tNNP\t0\n,\t,\t2\n\n``\t``\t2\nHi\tUH\t0\n")
    sentences, trees, relations = read_treebank(tmp_path / "b.dp", "word,pos,head")
    assert not relations and trees[0].heads == (2, 0, 2) and trees[0].relations == ("_",) * 3
    assert trees[0].punctuation == (False, False, True) and trees[1].punctuation == (True, False)


@pytest.mark.parametrize(
    "text, columns, message",
    [
        ("a\tDT\t2\nb\tNN\t5\n", "word,pos,head", r"b\.dp:2: head '5' is not a word"),
        ("a\tDT\t1\nb\tNN\t0\n", "word,pos,head", r"b\.dp:1: word 1 is its own head"),
        ("a\tDT\t2\nb\tNN\t0\n", "word,pos,parent", "no column is named head"),
    ],
)
def test_a_bad_treebank_is_one_line_naming_the_file(tmp_path, text, columns, message):
    (tmp_path / "b.dp").write_text(text)
    with pytest.raises(UserError, match=message):
        read_treebank(tmp_path / "b.dp", columns)


def _toy_treebank(path, sentences: int, seed: int) -> None:
    """A toy grammar: [det] adj* noun verb [det] noun, heads and relations fixed by the pattern."""
    rng = torch.Generator().manual_seed(seed)
    pick = lambda options: options[int(torch.randint(len(options), (1,), generator=rng))]  # noqa: E731
    lines = []
    for _ in range(sentences):
        words = [pick(["the", "a"])]
        adjectives = int(torch.randint(3, (1,), generator=rng))
        words += [pick(["big", "red", "old"]) for _ in range(adjectives)]
        subject = len(words) + 1
        words.append(pick(["cat", "dog", "man"]))
        verb = len(words) + 1
        words.append(pick(["saw", "ate", "met"]))
        words += [pick(["the", "a"]), pick(["fish", "hat", "car"])]
        n = len(words)
        heads = [subject] * (subject - 1) + [verb, 0, n, verb]
        rels = ["det"] + ["amod"] * adjectives + ["nsubj", "root", "det", "obj"]
        lines += [
            f"{i}\t{w}\t_\t_\t_\t_\t{h}\t{r}\t_\t_" for i, (w, h, r) in enumerate(zip(words, heads, rels), 1)
        ]
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def test_the_parser_learns_a_toy_grammar(tmp_path):
    from electra.tagging.cvt_settings import ParseCvtSettings
    from electra.tagging.cvt_train import train_one
    from electra.tagging.parse_task import load_treebank_data

    _toy_treebank(tmp_path / "train.conllu", 60, seed=1)
    _toy_treebank(tmp_path / "test.conllu", 20, seed=2)
    settings = ParseCvtSettings(
        dev_sentences=10, max_steps=100, eval_every=25, batch_size=8, warmup_steps=10, word_dim=12, char_dim=4,
        char_filters=3, lstm1=16, lstm2=16, projection=16, arc_dim=8, min_word_count=1, labeled_dropout=0.1,
    )  # fmt: skip
    data = load_treebank_data(settings, tmp_path / "train.conllu", tmp_path / "test.conllu")
    record = train_one(settings, data, seed=1, log=lambda line: None)
    losses = [row["loss"] for row in record["history"]]
    assert losses[-1] < 0.5 * losses[0]
    assert record["best"]["test_uas"] > 0.95 and record["best"]["test_las"] > 0.95


def test_parse_cvt_runs_end_to_end_and_refuses_in_one_line(tmp_path, capsys):
    _toy_treebank(tmp_path / "train.conllu", 30, seed=1)
    _toy_treebank(tmp_path / "test.conllu", 5, seed=2)
    (tmp_path / "raw.txt").write_text("the big cat saw a fish .\n\na dog met the man .\n")
    argv = [
        "parse-bilstm",
        "--train",
        str(tmp_path / "train.conllu"),
        "--test",
        str(tmp_path / "test.conllu"),
    ]
    argv += ["--dev-sentences", "5", "--max-steps", "6", "--eval-every", "3", "--batch-size", "4"]
    argv += ["--warmup-steps", "2", "--word-dim", "8", "--char-dim", "4", "--char-filters", "3"]
    argv += ["--lstm1", "8", "--lstm2", "8", "--projection", "8", "--arc-dim", "4"]
    assert main([*argv, "--cvt"]) == 2
    err = capsys.readouterr().err
    assert "--unlabeled" in err and err.count("\n") == 1
    out = tmp_path / "out"
    run = [*argv, "--cvt", "--unlabeled", str(tmp_path / "raw.txt"), "--output", str(out), "--seeds", "2"]
    assert main(run) == 0
    printed = capsys.readouterr().out
    assert "test las: median" in printed and "test uas: median" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "las" and summary["unlabeled_sentences"] == 2
    assert len(summary["test_uas"]["values"]) == 2
    rows = (out / "seed-1" / "test_predictions.txt").read_text().split("\n\n")[0].splitlines()
    assert len(rows[0].split("\t")) == 12  # the ten CoNLL-U columns, then the predicted head and relation
    parser, vocab = load_parser(out / "seed-2")
    assert parser.config.arc_dim == 4 and vocab.labels == ["amod", "det", "nsubj", "obj", "root"]
    with pytest.raises(UserError, match="not a CVT tagger"):
        load_tagger(out / "seed-1")
    assert main(run) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_saved_parser_round_trips(tmp_path):
    model, vocab = tiny_parser(seed=4)
    save_tagger(model, vocab, tmp_path / "parser")
    loaded, loaded_vocab = load_parser(tmp_path / "parser")
    assert loaded.config == model.config and loaded_vocab.to_dict() == vocab.to_dict()
    batch = make_batch([SENTENCE, OTHER], vocab, 20)
    with torch.no_grad():
        before, after = model(batch, 0.0, PARSER_MODULES), loaded(batch, 0.0, PARSER_MODULES)
    assert all(torch.equal(before[name], after[name]) for name in before)
