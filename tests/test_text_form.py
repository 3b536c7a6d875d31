"""Text forms: the "words" form is applied by the tokenizer itself, survives saving, and equals the n-gram's."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

import electra
from electra.core.errors import UserError
from electra.core.text_form import words
from electra.data.tokenization import (
    load_or_train_tokenizer,
    load_saved_tokenizer,
    text_form_of,
    train_wordpiece_tokenizer,
)
from electra.pll.ngram import normalize_words
from tests.conftest import SAMPLE_TEXT

WRITTEN = "It is said, the glow (from) 1,945 well-known 'fires' didn't reach Café Savannah's U.S. port_side."


def test_words_form_by_hand():
    assert words(WRITTEN) == (
        "it is said the glow from well known fires didn't reach cafe savannah's us port side".split()
    )
    assert words("Well-known_words, don't STOP!") == ["well", "known", "words", "don't", "stop"]
    assert words("' -- 1945 ...") == []
    assert normalize_words(WRITTEN) == words(WRITTEN)  # the n-gram baseline reads text the same way


@pytest.fixture(scope="module")
def words_tokenizer():
    return train_wordpiece_tokenizer([SAMPLE_TEXT, WRITTEN] * 5, vocab_size=400, text_form="words")


def test_the_tokenizer_applies_the_form_and_learns_no_punctuation(words_tokenizer):
    written = words_tokenizer(WRITTEN)["input_ids"]
    assert written == words_tokenizer(" ".join(words(WRITTEN)))["input_ids"]
    pieces = [piece.removeprefix("##") for piece in words_tokenizer.get_vocab()]
    assert all(piece.isalpha() or piece == "'" for piece in pieces if not piece.startswith("["))
    raw = train_wordpiece_tokenizer([SAMPLE_TEXT, WRITTEN] * 5, vocab_size=400)
    assert "," in raw.tokenize(WRITTEN) and "," not in words_tokenizer.tokenize(WRITTEN)


def test_a_words_vocabulary_covers_its_whole_form_even_where_the_corpus_does_not():
    """wikitext writes "it 's": trained there, the vocabulary had no apostrophe, and "it's" scored later was
    `it [UNK] s`. Every character the form keeps has a piece, whatever the corpus held."""
    detached = train_wordpiece_tokenizer(
        ["it 's the cat 's hat and it 's big"] * 10, vocab_size=200, text_form="words"
    )
    assert "[UNK]" not in detached.tokenize("It's Zoë's quiz, Jack.")
    assert "'" in detached.tokenize("it's")


def test_a_saved_words_tokenizer_loads_with_its_form(words_tokenizer, tmp_path):
    """BERT's tokenizer class rebuilds BERT's normalizer on load, so the form must survive a save as written."""
    words_tokenizer.save_pretrained(str(tmp_path / "tok"))
    expected = words_tokenizer(WRITTEN, "Second segment!")
    for loaded in (
        load_saved_tokenizer(tmp_path / "tok"),
        AutoTokenizer.from_pretrained(str(tmp_path / "tok")),
    ):
        again = loaded(WRITTEN, "Second segment!")
        assert again["input_ids"] == expected["input_ids"]
        assert again["token_type_ids"] == expected["token_type_ids"]
        assert loaded.mask_token_id == words_tokenizer.mask_token_id
        assert text_form_of(loaded) == "words"  # what a run continued from it (--init-from) reports


def test_an_existing_vocabulary_takes_the_form(sample_tokenizer, tmp_path):
    sample_tokenizer.save_pretrained(str(tmp_path / "raw"))
    raw = load_or_train_tokenizer(tmp_path / "raw", None, 1)
    shaped = load_or_train_tokenizer(tmp_path / "raw", None, 1, text_form="words")
    assert shaped.get_vocab() == raw.get_vocab()
    assert shaped(WRITTEN)["input_ids"] == raw(" ".join(words(WRITTEN)))["input_ids"]
    assert raw(WRITTEN)["input_ids"] != shaped(WRITTEN)["input_ids"]
    assert (text_form_of(raw), text_form_of(shaped)) == ("raw", "words")


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(UserError, match="text_form='spoken' is not one of raw, words"):
        electra.build_config("tiny", overrides={"text_form": "spoken"})
    with pytest.raises(UserError, match="text_form=words keeps lowercase letters only"):
        electra.build_config("tiny", overrides={"text_form": "words", "lowercase": False})
