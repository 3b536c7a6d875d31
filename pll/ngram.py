"""A word n-gram language model with interpolated Kneser-Ney smoothing, in pure Python.

It is what a user would reach for instead of a bidirectional scorer, so rescoring is compared against it and can
fuse it in as one more feature. KenLM's `lmplz` (modified Kneser-Ney, three discounts per order) is the standard
tool but needs a C++ build with Boost; this is the textbook interpolated Kneser-Ney of Chen & Goodman (1998) with
one discount per order, D = n1 / (n1 + 2 n2) from the count-of-counts, which trails modified KN by a few percent
of perplexity. Text is normalised as the ASR references are (`electra.core.text_form`, "words": lowercase letters and
in-word apostrophes; hyphens and underscores split words; accents stripped), one sentence per training sequence,
padded with order-1 `<s>` and one `</s>`.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence

from electra.core.text_form import words as words_form

BOS, EOS = "<s>", "</s>"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def normalize_words(text: str) -> list[str]:
    """Lowercased words of letters and apostrophes (`don't` stays one word; `well-known` becomes two): the
    "words" text form a scorer trained with `text_form=words` sees, from the one definition of it."""
    return words_form(text)


def corpus_sentences(documents: Iterable[str]) -> Iterator[list[str]]:
    """Normalised sentences of running text (split after . ! ? followed by space, and at line breaks)."""
    for document in documents:
        for line in document.splitlines():
            for sentence in _SENTENCE_END.split(line):
                words = normalize_words(sentence)
                if words:
                    yield words


class KneserNeyLM:
    """Interpolated Kneser-Ney of a given order over word ids; `logprob` gives ln P(<s> words </s>)."""

    def __init__(self, order: int = 4):
        if order < 1:
            raise ValueError("order must be at least 1")
        self.order = order
        self.vocab: dict[str, int] = {BOS: 0, EOS: 1}
        # counts[k]: k-gram (tuple of ids) -> count; raw counts for the highest order, continuation counts
        # (distinct left extensions) for the lower ones, as Kneser-Ney prescribes.
        self.counts: list[dict[tuple[int, ...], int]] = []
        self.context_total: list[dict[tuple[int, ...], int]] = []  # sum of counts[k] over the last word
        self.context_types: list[dict[tuple[int, ...], int]] = []  # distinct last words after the context
        self.discounts: list[float] = []
        self.sentences = 0

    # ---- training ----
    def fit(self, sentences: Iterable[Sequence[str]]) -> KneserNeyLM:
        top: Counter = Counter()
        n = self.order
        for words in sentences:
            ids = [0] * (n - 1) + [self._id(w) for w in words] + [1]
            for i in range(n - 1, len(ids)):
                top[tuple(ids[i - n + 1 : i + 1])] += 1
            self.sentences += 1
        if not top:
            raise ValueError("no training sentences")
        counts: list[dict[tuple[int, ...], int]] = [dict() for _ in range(n + 1)]
        counts[n] = dict(top)
        for k in range(n - 1, 0, -1):  # continuation counts: how many distinct words precede each k-gram
            lower: dict[tuple[int, ...], int] = defaultdict(int)
            for gram in counts[k + 1]:
                lower[gram[1:]] += 1
            counts[k] = dict(lower)
        self.counts = counts
        self.context_total = [dict() for _ in range(n + 1)]
        self.context_types = [dict() for _ in range(n + 1)]
        self.discounts = [0.0] * (n + 1)
        for k in range(1, n + 1):
            totals: dict[tuple[int, ...], int] = defaultdict(int)
            types: dict[tuple[int, ...], int] = defaultdict(int)
            for gram, count in counts[k].items():
                totals[gram[:-1]] += count
                types[gram[:-1]] += 1
            self.context_total[k], self.context_types[k] = dict(totals), dict(types)
            of_count = Counter(c for c in counts[k].values() if c <= 2)
            n1, n2 = of_count[1], of_count[2]
            self.discounts[k] = n1 / (n1 + 2 * n2) if n1 + n2 else 0.5
        return self

    def _id(self, word: str) -> int:
        return self.vocab.setdefault(word, len(self.vocab))

    # ---- querying ----
    def prob(self, word: int, context: tuple[int, ...]) -> float:
        """P(word | context), context the last order-1 ids (shorter contexts back off)."""
        p = 1.0 / len(
            self.vocab
        )  # the uniform floor: unknown words get this share of the unigram's discount mass
        for k in range(1, self.order + 1):
            history = context[len(context) - (k - 1) :] if k > 1 else ()
            total = self.context_total[k].get(history)
            if not total:
                continue  # unseen history: keep the lower order's estimate
            d = self.discounts[k]
            count = self.counts[k].get((*history, word), 0)
            p = max(count - d, 0.0) / total + d * self.context_types[k][history] / total * p
        return p

    def logprob(self, words: Sequence[str]) -> float:
        """Natural log of P(<s> words </s>): unknown words are scored, never skipped."""
        n = self.order
        ids = [0] * (n - 1) + [self.vocab.get(w, -1) for w in words] + [1]
        return sum(math.log(self.prob(ids[i], tuple(ids[i - n + 1 : i]))) for i in range(n - 1, len(ids)))

    def perplexity(self, sentences: Iterable[Sequence[str]]) -> float:
        """Per-word perplexity, </s> counted as a word (as SRILM and KenLM report it)."""
        total, tokens = 0.0, 0
        for words in sentences:
            total += self.logprob(words)
            tokens += len(words) + 1
        return math.exp(-total / tokens)
