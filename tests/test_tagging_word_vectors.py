"""Pretrained word vectors for the CNN-BiLSTM tagger: the one reader (GloVe, word2vec/fastText text, gzipped), its
one-line refusals, the vocabulary built from the vectors and the training words, the embeddings starting from the
vectors, and training vectors with gensim (skipped where gensim is not installed)."""

from __future__ import annotations

import gzip
import importlib.util

import pytest
import torch

from electra.app.cli import main
from electra.core.errors import UserError
from electra.tagging.cvt_model import CvtTagger, CvtTaggerConfig, build_vocabulary
from electra.tagging.cvt_train import start_from_vectors
from electra.tagging.word_vectors import read_word_vectors, train_word_vectors

GLOVE = "the 0.1 0.2 0.3\nParis 1 2 3\nparis 9 9 9\n1999 -1 -2 -3.5e-1\n"


def test_glove_word2vec_and_gzipped_files_read_the_same(tmp_path):
    glove = tmp_path / "v.txt"
    glove.write_text(GLOVE)
    word2vec = tmp_path / "v.vec"
    word2vec.write_text("4 3\n" + GLOVE)
    zipped = tmp_path / "v.txt.gz"
    zipped.write_bytes(gzip.compress(GLOVE.encode()))
    expected = torch.tensor([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [-1.0, -2.0, -0.35]])
    for path in (glove, word2vec, zipped):
        words, vectors = read_word_vectors(path, dim=3)
        # keys normalized as the model looks words up; `paris` is a second `paris`, the first one wins
        assert words == ["the", "paris", "0000"]
        assert torch.allclose(vectors, expected)
    assert read_word_vectors(glove, max_words=2)[0] == ["the", "paris"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a 1 2 3\nb 1 2\n", ":2: 2 numbers where 3"),
        ("a 1 2 3\nb 1 x 3\n", ":2: the values after 'b' are not all numbers"),
        ("a 1 2 3\nb 1 nan 3\n", ":2: 'b' has a NaN"),
        ("word\n", ":1: a word with no numbers"),
        ("", "no vectors in it"),
        ("a 1 2\n", "holds 2-dimensional vectors but --word-dim is 3; pass --word-dim 2"),
        ("2 2\na 1 2\n", "holds 2-dimensional vectors but --word-dim is 3"),
    ],
)
def test_a_malformed_vectors_file_is_one_line_naming_it(tmp_path, text, expected):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(UserError) as error:
        read_word_vectors(path, dim=3)
    message = str(error.value)
    assert expected in message and str(path) in message and "\n" not in message


def test_a_missing_or_binary_vectors_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        read_word_vectors(tmp_path / "none.txt")
    binary = tmp_path / "v.bin"
    binary.write_bytes(b"2 3\n\xff\xfe\x00\x01")
    with pytest.raises(UserError, match="not UTF-8"):
        read_word_vectors(binary)


def test_the_vocabulary_holds_the_vectors_words_then_the_training_words():
    vocab = build_vocabulary(
        [["the", "cat"], ["the", "dog", "cat"]], ["O"], min_count=2, vector_words=["the", "paris"]
    )
    assert vocab.words[4:] == ["the", "paris", "cat"]  # dog is seen once: <unk>
    assert vocab.word_id("Paris") == vocab.words.index("paris")


def test_the_embeddings_start_from_the_vectors_and_the_rest_stay_random():
    vocab = build_vocabulary([["cat", "cat", "dog", "dog"]], ["O"], vector_words=["paris", "cat"])
    config = CvtTaggerConfig(len(vocab.words), len(vocab.chars), 1, word_dim=3, char_dim=2, char_filters=2)
    config.lstm1 = config.lstm2 = config.projection = 4
    torch.manual_seed(0)
    model = CvtTagger(config)
    before = model.word_embeddings.weight.detach().clone()
    vectors = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert start_from_vectors(model, vocab, ["paris", "cat"], vectors) == 2
    weight = model.word_embeddings.weight.detach()
    assert torch.equal(weight[vocab.words.index("paris")], vectors[0])
    assert torch.equal(weight[vocab.words.index("cat")], vectors[1])
    dog = vocab.words.index("dog")
    assert torch.equal(weight[dog], before[dog])


HAS_GENSIM = importlib.util.find_spec("gensim") is not None


@pytest.mark.skipif(not HAS_GENSIM, reason="gensim is not installed (pip install gensim)")
def test_vectors_trained_with_gensim_read_back_in_their_size(tmp_path):
    corpus = [["The", "cat", "sat", "on", "the", "mat", "in", "1999", "."]] * 30
    path = tmp_path / "vectors.txt"
    written = train_word_vectors(lambda: iter(corpus), path, dim=6, min_count=2, epochs=2)
    words, vectors = read_word_vectors(path, dim=6)
    assert written == len(words) == 8  # `The` and `the` are one word; `1999` is `0000`
    assert set(words) == {"the", "cat", "sat", "on", "mat", "in", "0000", "."}
    assert vectors.shape == (8, 6) and torch.isfinite(vectors).all()


def test_training_vectors_without_gensim_names_the_install(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_gensim(name, *args, **kwargs):
        if name.startswith("gensim"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gensim)
    with pytest.raises(UserError, match="pip install gensim"):
        train_word_vectors(lambda: iter([["a", "a"]]), tmp_path / "v.txt")


def _column_file(path, sentences):
    lines = []
    for words, tags in sentences:
        lines += [f"{w} X {t}" for w, t in zip(words, tags)] + [""]
    path.write_text("\n".join(lines))


def test_tag_bilstm_refuses_vectors_of_another_size_in_one_line(tmp_path, capsys):
    train = tmp_path / "train.txt"
    _column_file(train, [(["the", "cat"], ["B-NP", "I-NP"])] * 4)
    vectors = tmp_path / "v.txt"
    vectors.write_text("the 1 2 3\n")
    argv = ["tag-bilstm", "--train", str(train), "--dev-sentences", "1", "--columns", "word,pos,chunk"]
    assert main([*argv, "--word-dim", "8", "--word-vectors", str(vectors)]) == 2
    err = capsys.readouterr().err
    assert "pass --word-dim 3" in err and str(vectors) in err and err.count("\n") == 1


def test_tag_bilstm_trains_from_vectors_and_keeps_their_words(tmp_path, capsys):
    train = tmp_path / "train.txt"
    _column_file(train, [(["the", "cat"], ["B-NP", "I-NP"]), (["dogs", "ran"], ["B-NP", "O"])] * 4)
    vectors = tmp_path / "v.vec.gz"
    vectors.write_bytes(gzip.compress(b"3 4\nthe 1 2 3 4\nParis 1 0 0 1\nrome 0 1 1 0\n"))
    argv = ["tag-bilstm", "--train", str(train), "--dev-sentences", "2", "--columns", "word,pos,chunk"]
    argv += ["--max-steps", "2", "--eval-every", "2", "--batch-size", "2", "--warmup-steps", "1"]
    argv += ["--word-dim", "4", "--char-dim", "2", "--char-filters", "2", "--lstm1", "4", "--lstm2", "4"]
    argv += [
        "--projection",
        "4",
        "--word-vectors",
        str(vectors),
        "--max-vectors",
        "2",
        "--output",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 0
    from electra.tagging.cvt_model import load_tagger

    model, vocab = load_tagger(tmp_path / "o" / "seed-1")
    assert vocab.words[4:6] == ["the", "paris"] and "rome" not in vocab.words  # only the first 2 vectors
    assert "cat" in vocab.words  # a training word the file lacks joins after them
