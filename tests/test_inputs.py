"""Input edge cases: byte-order marks, enormous lines, sentences longer than the model, hub names, pickles."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from electra.app.cli import main
from electra.core.errors import UserError
from electra.data.corpus import MAX_DOCUMENT_CHARS, read_documents
from tests.test_pll_cli import mlm_dir  # noqa: F401  (fixture)


def test_utf16_with_a_byte_order_mark_is_read_as_utf16(tmp_path):
    """Before: read as Latin-1 (or refused with Latin-1 advice), every other character a NUL."""
    path = tmp_path / "notes.txt"
    path.write_bytes("Grüße aus Köln.\n\nZweiter Absatz.".encode("utf-16"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(read_documents(path)) == ["Grüße aus Köln.", "Zweiter Absatz."]
    assert "UTF-16 (byte-order mark)" in str(caught[0].message)
    with pytest.raises(UserError, match="UTF-16 text .byte-order mark.*iconv -f utf-16"):
        list(read_documents(path, strict_utf8=True))
    bom8 = tmp_path / "bom8.txt"
    bom8.write_bytes(b"\xef\xbb\xbfplain text")
    assert list(read_documents(bom8)) == ["plain text"]  # the UTF-8 mark is not part of the text


def test_one_enormous_line_becomes_bounded_documents(tmp_path):
    """Before: a 50 MB one-line file was one 50 MB document, tokenized at once (3.9 GB of memory)."""
    words = [f"word{i % 997}" for i in range(3 * MAX_DOCUMENT_CHARS // 7)]
    path = tmp_path / "one_line.txt"
    path.write_text(" ".join(words))
    documents = list(read_documents(path))
    assert len(documents) >= 3 and max(map(len, documents)) <= MAX_DOCUMENT_CHARS
    assert " ".join(documents).split() == words  # cut between words, nothing lost


def test_a_sentence_longer_than_the_model_is_marked(mlm_dir, tmp_path, capsys):  # noqa: F811
    """Before: cut silently (a log line only); now marked in the printed line and in the JSON."""
    from electra.pll.scoring import load_scorer

    long = " ".join(["the cat sat on the mat"] * 10)  # 60 pieces, the model takes 32
    sentences = tmp_path / "in.txt"
    sentences.write_text(f"the cat sat\n{long}\n")
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--model", str(mlm_dir), "--input", str(sentences), "--output", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "truncated" not in lines[0] and "[truncated: only the first 30 pieces scored]" in lines[1]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["truncated"] for r in records] == [False, True] and len(records[1]["tokens"]) == 30
    scorer = load_scorer(mlm_dir, device="cpu")
    prefix = " ".join(long.split()[:30])  # one piece per word in this vocabulary
    assert records[1]["pll"] == pytest.approx(scorer.score([prefix])[0].pll, abs=1e-4)


def test_a_huge_line_is_scored_on_its_first_words_alone(mlm_dir, monkeypatch):  # noqa: F811
    """Before: a 3.6 MB line was tokenized whole (27 s, 1.1 GB) to keep its first pieces. Now past
    LONG_SENTENCE_CHARS only its first words are tokenized, and its score, pieces, words and `truncated` mark
    equal the whole line's."""
    import electra.pll.scoring
    from electra.pll.scoring import load_scorer

    huge = "the  cat\tsat on, the mat. " * 3000  # 81,000 characters: whitespace runs and punctuation too
    scorer = load_scorer(mlm_dir, device="cpu")
    cut = scorer.score([huge, "the cat sat"])
    assert scorer.too_long([huge, "the cat sat"]) == [True, False]
    monkeypatch.setattr(
        electra.pll.scoring, "LONG_SENTENCE_CHARS", 10**9
    )  # the whole line tokenized, as before
    whole = scorer.score([huge, "the cat sat"])
    assert [(s.pll, s.tokens, s.words, s.truncated, s.text) for s in cut] == [
        (s.pll, s.tokens, s.words, s.truncated, s.text) for s in whole
    ]
    assert cut[0].truncated and cut[0].text == huge
    assert (
        electra.pll.scoring._first_words(" a  b c", 2) == " a  b"
        and electra.pll.scoring._first_words("a b", 5) == "a b"
    )


def test_rescore_warns_per_list_about_long_hypotheses(mlm_dir, tmp_path, capsys):  # noqa: F811
    long = " ".join(["the cat sat on the mat"] * 10)
    dev = tmp_path / "dev.json"
    dev.write_text(
        json.dumps(
            [
                {
                    "id": "u1",
                    "ref": "the cat sat",
                    "hyps": [{"text": "the cat sat", "score": -1.0}, {"text": long, "score": -2.0}],
                }
            ]
        )
    )
    argv = ["rescore", "--model", str(mlm_dir), "--dev", str(dev), "--output-dir", str(tmp_path / "out")]
    assert main(argv) == 0
    assert (
        f"warning: {dev}: 1 of 2 hypotheses have more pieces than the model takes" in capsys.readouterr().err
    )


def test_hub_names_and_pickled_checkpoints_are_one_line(mlm_dir, tmp_path, capsys):  # noqa: F811
    """Before: `squad --tokenizer NAME` reached for the network; a pickle checkpoint ended in a traceback."""
    squad = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "a cat",
                        "qas": [
                            {"id": "q", "question": "what?", "answers": [{"text": "cat", "answer_start": 2}]}
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "x.json").write_text(json.dumps(squad))  # a sound file: the tokenizer is what is refused
    argv = [
        "squad",
        "--model",
        str(mlm_dir),
        "--tokenizer",
        "bert-base-uncased",
        "--eval",
        str(tmp_path / "x.json"),
    ]
    assert main([*argv, "--output", str(tmp_path / "s")]) == 2
    assert "bert-base-uncased: not a local directory" in capsys.readouterr().err
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        if (mlm_dir / name).exists():
            (pickled / name).write_bytes((mlm_dir / name).read_bytes())
    torch.save({"w": torch.zeros(1)}, pickled / "pytorch_model.bin")
    sentences = tmp_path / "in.txt"
    sentences.write_text("the cat sat\n")
    assert main(["score", "--model", str(pickled), "--input", str(sentences)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no .safetensors weights (it holds pytorch_model.bin, a pickle" in err and "Traceback" not in err
