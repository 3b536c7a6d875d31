"""The CoNLL column reader and writer: layouts by flag, -DOCSTART- and blank lines, bad lines named by file:line,
the label vocabulary, and BIO <-> BIOES conversion."""

from __future__ import annotations

import pytest

from electra.core.errors import UserError
from electra.tagging.conll import (
    is_span_scheme,
    label_vocabulary,
    make_layout,
    read_conll,
    to_bio,
    to_bioes,
    write_conll,
)
from electra.tagging.spans import extract_spans

CHUNKS = """-DOCSTART- -X- O

Confidence NN B-NP
in IN B-PP
the DT B-NP
pound NN I-NP

# SYM O
1.8 CD B-NP
-DOCSTART- -X- O
Señor NNP B-NP



He PRP B-NP
"""


def write(tmp_path, text, name="train.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_sentences_across_docstart_and_blank_lines(tmp_path):
    path = write(tmp_path, CHUNKS)
    sentences = read_conll(path)
    assert [s.words for s in sentences] == [
        ["Confidence", "in", "the", "pound"],
        ["#", "1.8"],  # "#" is a word (CoNLL-2000 has it), not a comment
        ["Señor"],
        ["He"],
    ]
    assert [s.line for s in sentences] == [3, 8, 11, 15]
    assert sentences[0].labels == ["B-NP", "B-PP", "B-NP", "I-NP"]
    assert read_conll(path, max_sentences=2)[-1].words == ["#", "1.8"]


def test_columns_and_label_chosen_by_flag(tmp_path):
    path = write(tmp_path, CHUNKS)
    pos = read_conll(path, columns="word,pos,chunk", label="pos")
    assert pos[0].labels == ["NN", "IN", "DT", "NN"]
    # the word column is the one named "word", wherever it is
    swapped = write(tmp_path, "NN Confidence B-NP\nIN in B-PP\n", "swapped.txt")
    sentence = read_conll(swapped, columns="pos,word,chunk")[0]
    assert sentence.words == ["Confidence", "in"] and sentence.labels == ["B-NP", "B-PP"]
    # tabs separate as spaces do
    tabbed = write(tmp_path, "El\tDA\tO\nAbogado\tNC\tB-PER\n", "tabs.txt")
    assert read_conll(tabbed)[0].labels == ["O", "B-PER"]


def test_bad_line_is_named_by_file_and_line(tmp_path):
    path = write(tmp_path, "a DT B-NP\nb NN\n")
    with pytest.raises(UserError, match=r"train\.txt:2: 2 column\(s\) where the file's layout .* has 3"):
        read_conll(path)
    with pytest.raises(UserError, match=r"train\.txt:1: 3 column\(s\) .*word,chunk"):
        read_conll(path, columns="word,chunk")


def test_bad_files_and_flags_are_refused(tmp_path):
    with pytest.raises(UserError, match="holds no sentences"):
        read_conll(write(tmp_path, "\n-DOCSTART- O\n\n"))
    with pytest.raises(UserError, match="does not exist"):
        read_conll(tmp_path / "missing.txt")
    with pytest.raises(UserError, match=r"bad\.txt:2: not UTF-8"):
        (tmp_path / "bad.txt").write_bytes(b"a O\n\xe9t\xe9 O\n")
        read_conll(tmp_path / "bad.txt")
    with pytest.raises(UserError, match="at least two columns"):
        read_conll(write(tmp_path, "word\nother\n"))
    with pytest.raises(UserError, match="--label ner is not one of"):
        make_layout("word,pos", "ner")
    with pytest.raises(UserError, match="no --columns"):
        make_layout(None, "chunk", 3)
    with pytest.raises(UserError, match="twice"):
        make_layout("word,pos,pos", None)
    with pytest.raises(UserError, match="is the word column"):
        make_layout("word,pos", "word")


def test_label_vocabulary_from_training_file(tmp_path):
    sentences = read_conll(write(tmp_path, CHUNKS))
    assert label_vocabulary(sentences) == ["O", "B-NP", "B-PP", "I-NP"]
    assert is_span_scheme(label_vocabulary(sentences))
    assert not is_span_scheme(["NN", "DT", "O"])
    assert not is_span_scheme(["O"])


def test_writes_rows_with_predictions_appended(tmp_path):
    sentences = read_conll(write(tmp_path, CHUNKS))
    predictions = [s.labels for s in sentences]
    predictions[0] = ["B-NP", "B-PP", "B-NP", "B-NP"]
    out = tmp_path / "out" / "predictions.txt"
    write_conll(out, sentences, predictions)
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[:5] == [
        "Confidence NN B-NP B-NP",
        "in IN B-PP B-PP",
        "the DT B-NP B-NP",
        "pound NN I-NP B-NP",
        "",
    ]
    # what was written reads back with one more column
    again = read_conll(out, columns="word,pos,chunk,predicted")
    assert [s.labels for s in again] == predictions
    with pytest.raises(ValueError, match="tags for"):
        write_conll(out, sentences[:1], [["O"]])


def test_bio_bioes_conversion_round_trips():
    bio = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "I-LOC", "O"]
    bioes = ["B-PER", "E-PER", "O", "S-LOC", "B-LOC", "I-LOC", "E-LOC", "O"]
    assert to_bioes(bio) == bioes
    assert to_bio(bioes) == bio
    assert to_bio(to_bioes(bio)) == bio
    # IOB1 (I- opens a span after O) becomes proper BIOES, keeping the spans conlleval reads
    iob1 = ["I-NP", "I-NP", "O", "I-VP", "B-VP"]
    assert to_bioes(iob1) == ["B-NP", "E-NP", "O", "S-VP", "S-VP"]
    assert extract_spans(to_bioes(iob1)) == extract_spans(iob1)


def test_reads_the_shared_corpora(shared_data):
    chunking = read_conll(
        shared_data / "tagging/conll2000/train.txt", columns="word,pos,chunk", label="chunk"
    )
    assert len(chunking) == 8936  # CoNLL-2000's training sentences
    assert "B-NP" in label_vocabulary(chunking)
    ner = read_conll(shared_data / "tagging/conll2002/esp.train")
    assert {t[2:] for t in label_vocabulary(ner) if t != "O"} == {"LOC", "MISC", "ORG", "PER"}
