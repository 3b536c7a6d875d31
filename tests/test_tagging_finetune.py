"""`electra tag` end to end on a tiny encoder: it learns a chunking rule, its export loads in transformers'
AutoModelForTokenClassification with the same logits and tags, seeds resume, long sentences are split into
windows without losing a word, and bad inputs are one line naming the file and line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from electra.core.errors import UserError
from electra.finetune.models import load_encoder
from electra.tagging.conll import read_conll
from electra.tagging.data import load_data
from electra.tagging.features import IGNORE, encode, words_from_windows
from electra.tagging.finetune import run_tag
from electra.tagging.model import TaggerModel
from electra.tagging.settings import TagSettings

DET, ADJ, NOUN, VERB = ["the", "a"], ["big", "small", "red"], ["cat", "dog", "bird", "fish"], ["runs", "sees"]
POS = {
    **dict.fromkeys(DET, "DT"),
    **dict.fromkeys(ADJ, "JJ"),
    **dict.fromkeys(NOUN, "NN"),
    **dict.fromkeys(VERB, "VB"),
}
# "catfish" is two pieces (cat ##fish): labels sit on the first
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *DET, *ADJ, *NOUN, *VERB, "##fish"]


def noun_phrase(rng: random.Random) -> list[tuple[str, str]]:
    """det? adj{0,2} noun: whether an adjective opens the chunk depends on the word before it."""
    words = [rng.choice(DET)] if rng.random() < 0.6 else []
    words += [rng.choice(ADJ) for _ in range(rng.randint(0, 2))] + [rng.choice(NOUN + ["catfish"])]
    return [(w, "B-NP" if i == 0 else "I-NP") for i, w in enumerate(words)]


def write_corpus(path: Path, sentences: int, seed: int) -> Path:
    rng = random.Random(seed)
    lines = ["-DOCSTART- -X- O", ""]
    for _ in range(sentences):
        rows = (
            noun_phrase(rng) + [(rng.choice(VERB), "B-VP")] + (noun_phrase(rng) if rng.random() < 0.7 else [])
        )
        lines += [f"{w} {POS.get(w, 'NN')} {tag}" for w, tag in rows] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def tiny_encoder(directory: Path, kind: str) -> Path:
    """A random one-layer ELECTRA, or BERT (which has a pooler), with a word-level WordPiece tokenizer."""
    from transformers import BertConfig, BertModel, ElectraConfig, ElectraModel, ElectraTokenizerFast

    torch.manual_seed(0)
    shape = dict(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = (
        ElectraModel(ElectraConfig(embedding_size=16, **shape))
        if kind == "electra"
        else BertModel(BertConfig(**shape))
    )
    model.save_pretrained(str(directory))
    ElectraTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tagging")
    return {
        "train": write_corpus(root / "train.txt", 240, 0),
        "dev": write_corpus(root / "dev.txt", 60, 1),
        "electra": tiny_encoder(root / "electra", "electra"),
        "bert": tiny_encoder(root / "bert", "bert"),
    }


FAST = dict(learning_rate=3e-3, max_steps=45, batch_size=16, progress=False, log_every=15)


def first_piece_tags(model_dir: Path, sentences) -> list[list[str]]:
    """What a user of transformers alone gets: AutoModelForTokenClassification, each word's first piece."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForTokenClassification.from_pretrained(str(model_dir)).eval()
    out = []
    for sentence in sentences:
        inputs = tokenizer(sentence.words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            ids = model(**inputs).logits.argmax(-1)[0].tolist()
        firsts = {}
        for position, word in enumerate(inputs.word_ids()):
            if word is not None and word not in firsts:
                firsts[word] = model.config.id2label[ids[position]]
        out.append([firsts[i] for i in range(len(sentence.words))])
    return out


def test_learns_chunks_writes_predictions_and_resumes(files, tmp_path, capsys):
    output = tmp_path / "out"
    settings = TagSettings(**FAST, save_every=45)
    first = run_tag(files["electra"], files["train"], files["dev"], settings, [1], output_dir=output)
    dev = first["summary"]["dev"]
    assert first["metric"] == "f1" and first["labels"] == ["B-NP", "B-VP", "I-NP"]
    assert dev["f1"]["median"] > 0.85, dev  # a random tagger scores far below (chunks must start right)
    record = json.loads((output / "results.json").read_text())
    assert record["best_seed"] == 1 and (output / "model" / "README.md").is_file()

    # predictions: every dev row with its predicted tag appended; the same tags the export gives in transformers
    written = read_conll(
        output / "dev.predictions.txt", columns="word,pos,chunk,predicted", label="predicted"
    )
    gold = read_conll(files["dev"])
    assert [s.words for s in written] == [s.words for s in gold]
    assert [s.labels for s in written] == first_piece_tags(output / "model", gold)

    # --resume reuses the finished seed and trains only the new one
    second = run_tag(
        files["electra"], files["train"], files["dev"], settings, [1, 2], output_dir=output, resume=True
    )
    assert second["runs"][0] == first["runs"][0]
    assert [run["seed"] for run in second["runs"]] == [1, 2]
    assert "tag seed 1 step" not in capsys.readouterr().out  # seed 1 was not trained again
    assert (output / "runs" / "seed-2" / "dev.predictions.txt").is_file()


@pytest.mark.parametrize("kind", ["electra", "bert"])
def test_export_loads_as_token_classification_with_the_same_logits(files, tmp_path, kind):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    torch.manual_seed(3)
    model = TaggerModel(load_encoder(files[kind]), ["O", "B-NP", "I-NP"]).eval()
    torch.nn.init.normal_(model.classifier.weight)  # not the all-but-zero initial head: logits that differ
    tokenizer = AutoTokenizer.from_pretrained(str(files[kind]))
    model.save(tmp_path / "model", tokenizer, {"seed": 1})
    loaded = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "model")).eval()
    assert type(loaded).__name__ == f"{kind.capitalize()}ForTokenClassification"
    batch = tokenizer(["the big catfish runs", "a dog"], padding=True, return_tensors="pt")
    with torch.no_grad():
        _, ours = model(**batch)
        theirs = loaded(**batch).logits
    assert theirs.shape == (2, batch["input_ids"].shape[1], 3)
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)
    assert loaded.config.id2label == {0: "O", 1: "B-NP", 2: "I-NP"}


def test_long_sentences_are_split_into_windows_of_whole_words(files):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(files["electra"]))
    words = [
        "the",
        "catfish",
        "runs",
        "\u200b",
        "a",
        "big",
        "catfish",
        "sees",
        "the",
        "dog",
    ]  # "\u200b": no pieces
    tags = ["B-NP", "I-NP", "B-VP", "O", "B-NP", "I-NP", "I-NP", "B-VP", "B-NP", "I-NP"]
    ids = {"O": 0, "B-NP": 1, "I-NP": 2, "B-VP": 3}
    features, windows = encode([words, ["dog"]], tokenizer, 6, [tags, ["B-NP"]], ids)
    assert all(len(f["input_ids"]) <= 6 for f in features)
    assert [(w.sentence, w.first_word) for w in windows][0] == (0, 0) and windows[-1].sentence == 1
    # each word's label on its first piece, once; the rest IGNORE
    labelled = [label for f in features for label in f["labels"] if label != IGNORE]
    assert labelled == [ids[t] for t in tags] + [ids["B-NP"]]
    assert features[0]["input_ids"][2:4] == tokenizer.convert_tokens_to_ids(["cat", "##fish"])
    assert tokenizer.unk_token_id in [i for f in features for i in f["input_ids"]]
    # reading the label ids back at the first pieces gives every word its own
    predicted = words_from_windows([f["labels"] for f in features], windows, [len(words), 1])
    assert predicted == [[ids[t] for t in tags], [ids["B-NP"]]]


def test_labels_scoring_and_encoding_come_from_the_training_file(files, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(files["electra"]))
    evals = {"dev": files["dev"]}
    pos = load_data(files["train"], evals, tokenizer, TagSettings(columns="word,pos,chunk", label="pos"))
    assert (pos.labels, pos.spans) == (["DT", "JJ", "NN", "VB"], False)
    bioes = load_data(files["train"], evals, tokenizer, TagSettings(encoding="bioes", max_train_sentences=5))
    assert set(bioes.labels) == {"B-NP", "I-NP", "E-NP", "S-NP", "S-VP"} and bioes.spans
    assert bioes.train_sentences == 5
    with pytest.raises(UserError, match="--encoding bioes: .*train.txt has the label 'DT'"):
        load_data(
            files["train"],
            evals,
            tokenizer,
            TagSettings(columns="word,pos,chunk", label="pos", encoding="bioes"),
        )


def test_command_line_refuses_bad_inputs_in_one_line(files, tmp_path, capsys):
    from electra.app import cli

    bad = tmp_path / "dev.txt"
    bad.write_text("the DT B-NP\ncat NN\n", encoding="utf-8")
    base = ["tag", "--model", str(files["electra"]), "--train", str(files["train"])]
    assert cli.main([*base, "--dev", str(bad)]) == 2
    assert f"{bad}:2: 2 column(s) where the file's layout (word,2,3) has 3" in capsys.readouterr().err
    assert cli.main([*base, "--dev", str(files["dev"]), "--columns", "word,pos", "--label", "chunk"]) == 2
    assert "--label chunk is not one of --columns word,pos" in capsys.readouterr().err
    foreign = tmp_path / "pretrain_run"
    foreign.mkdir()
    (foreign / "run.json").write_text('{"command": "glue"}')
    assert cli.main([*base, "--dev", str(files["dev"]), "--output", str(foreign)]) == 2
    assert "holds another command's run" in capsys.readouterr().err
