"""Tokenizing each distinct word once gives the tokenizer's own ids, or is not used."""

from __future__ import annotations

import random

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from electra.data import word_pieces
from electra.data.tokenization import train_wordpiece_tokenizer
from electra.data.word_pieces import WordPieceEncoder, splits_at_spaces

TEXT = [
    "The café's naïve owner   said: «Grüße!» — 42 apples, 3.5kg (approx.) & more…",
    "東京は大きい都市です。 Москва тоже большой город.  ΣΊΣΥΦΟΣ ἔφη.",
    "tabs\tand\u00a0no-break spaces, e-mail@example.com, U.S.A., don't, x²+y²",
    "emoji 🙂 and combining e\u0301 marks, [SEP] [MASK] inside text, ﬁ ligature",
    "",
    "   ",
]


def corpus(n: int = 400) -> list[str]:
    rng = random.Random(0)
    words = " ".join(TEXT).split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 25))) for _ in range(n)] + TEXT


def test_bert_style_tokenizer_is_joined_from_words_and_equals_the_direct_ids():
    texts = corpus()
    tokenizer = train_wordpiece_tokenizer(texts * 3, vocab_size=400).backend_tokenizer
    assert splits_at_spaces(tokenizer)
    encoder = WordPieceEncoder(tokenizer)
    direct = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    assert encoder.encode(texts) == direct and encoder.cached
    assert encoder.encode(texts[::-1]) == direct[::-1]  # from the cache now
    assert len(encoder.cache) > 30


def test_a_full_cache_starts_afresh(monkeypatch):
    texts = corpus()
    tokenizer = train_wordpiece_tokenizer(texts, vocab_size=300).backend_tokenizer
    monkeypatch.setattr(word_pieces, "CACHE_LIMIT", 40)
    encoder = WordPieceEncoder(tokenizer)
    direct = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    assert [encoder.encode([t])[0] for t in texts] == direct
    assert len(encoder.cache) <= 40 + 25


def test_tokenizers_whose_pieces_span_spaces_are_tokenized_directly():
    texts = corpus()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    assert not splits_at_spaces(bpe)
    replaced = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    replaced.normalizer = normalizers.Replace("a b", "b")  # a normalizer that reads across a space
    replaced.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not splits_at_spaces(replaced)
    for tokenizer in (bpe, replaced):
        encoder = WordPieceEncoder(tokenizer)
        direct = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
        assert encoder.encode(texts) == direct and not encoder.cached
