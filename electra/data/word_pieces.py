"""Token ids of many sentences at once, each distinct word tokenized once.

Tokenizing is where building pretraining data spends its time: `tokenizers`' WordPiece runs at ~2.5 MB/s a core
with BERT's normalizer on this project's machines, and natural text repeats its words (a few hundred thousand
distinct words cover a gigabyte). For a tokenizer whose output on a text is the concatenation of its outputs on the
text's space-separated pieces, which holds for BERT's normalizer and pre-tokenizer (each character is normalized
alone; pieces never span a space), each distinct piece is tokenized once, through `tokenizers` itself, and a
sentence's ids are its pieces' ids joined. The result is the tokenizer's own, id for id: `WordPieceEncoder`
checks that on the first sentences it is given and tokenizes everything directly when it is not, as it does for
tokenizers whose pieces can span a space (byte-level BPE, SentencePiece, the "words" text form's normalizer).
"""

from __future__ import annotations

import json
import os
from itertools import chain
from typing import Any

# Normalizers and pre-tokenizers that act on each character, or split only at spaces and punctuation: a text's
# tokens are then its space-separated pieces' tokens, joined.
LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents"}
SPLITTING_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation"}
# Distinct pieces kept (~60 MB a process at the default); the cache starts afresh beyond that. ELECTRA_WORD_CACHE
# sets another bound (a machine short of memory, or a test that wants the bound reached on a small corpus).
CACHE_LIMIT = int(os.environ.get("ELECTRA_WORD_CACHE", 400_000))
CHECKED_SENTENCES = 2_000


def splits_at_spaces(backend: Any) -> bool:
    """Whether `backend` (a `tokenizers.Tokenizer`) tokenizes a text as the join of its space-separated pieces,
    judged from its parts: local normalizers, space- and punctuation-splitting pre-tokenizers, no added token
    holding a space."""
    spec = json.loads(backend.to_str())

    def parts(component: dict | None, key: str) -> list[str]:
        if component is None:
            return []
        if component.get("type") == "Sequence":
            return [name for inner in component[key] for name in parts(inner, key)]
        return [component.get("type", "")]

    normalizers = parts(spec.get("normalizer"), "normalizers")
    pre_tokenizers = parts(spec.get("pre_tokenizer"), "pretokenizers")
    spaced_tokens = any(" " in token["content"] for token in spec.get("added_tokens", []))
    return (
        bool(pre_tokenizers)
        and set(normalizers) <= LOCAL_NORMALIZERS
        and set(pre_tokenizers) <= SPLITTING_PRE_TOKENIZERS
        and not spaced_tokens
    )


class WordPieceEncoder:
    """`encode(sentences)` equals `[e.ids for e in backend.encode_batch(sentences, add_special_tokens=False)]`,
    faster wherever `splits_at_spaces(backend)`; one per process (it keeps its cache)."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.cached = splits_at_spaces(backend)
        self.checked = not self.cached
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode(self, sentences: list[str]) -> list[list[int]]:
        if not sentences:
            return []
        if not self.cached:
            return self._direct(sentences)
        ids = self._joined(sentences)
        if not self.checked:  # the guarantee, checked on this corpus's own text before it is relied on
            sample = sentences[:CHECKED_SENTENCES]
            self.checked, self.cached = True, ids[: len(sample)] == self._direct(sample)
            if not self.cached:
                self.cache.clear()
                return self._direct(sentences)
        return ids

    def _direct(self, sentences: list[str]) -> list[list[int]]:
        return [
            encoding.ids for encoding in self.backend.encode_batch_fast(sentences, add_special_tokens=False)
        ]

    def _joined(self, sentences: list[str]) -> list[list[int]]:
        pieces = [sentence.split(" ") for sentence in sentences]
        cache = self.cache
        new = set(chain.from_iterable(pieces)).difference(cache)
        if new:
            if len(cache) + len(new) > CACHE_LIMIT:
                cache.clear()
                new = set(chain.from_iterable(pieces))
            words = list(new)
            for word, encoding in zip(
                words, self.backend.encode_batch_fast(words, add_special_tokens=False), strict=True
            ):
                cache[word] = tuple(encoding.ids)  # a tuple: smaller than a list, and never changed
        lookup = cache.__getitem__
        return [list(chain.from_iterable(map(lookup, sentence))) for sentence in pieces]
