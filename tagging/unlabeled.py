"""Unlabeled sentences for Cross-View Training, from any corpus the pretraining reader takes.

The corpus is read by `electra.data.corpus.read_documents` (a text file, a folder of them, JSONL, archives; POS-tagged
text such as the Brown corpus has its `/tag` suffixes stripped there), block by block; each block is cut into
sentences by the same cheap rule the pretraining data builder uses, and each sentence into words by whitespace,
with punctuation at a word's edges split off as Penn-Treebank-tokenized tagging files have it (`said,` -> `said ,`,
`(Reuters)` -> `( Reuters )`, `don't` -> `do n't`; a full stop only at the sentence's end, so `U.S.` stays whole).
Text that is already tokenized (Brown, WikiText) passes through nearly unchanged. Sentences longer than
`max_words` words are skipped, as the reference code skips those of 100 or more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from electra.core.errors import UserError
from electra.data.corpus import read_documents, split_sentences

_OPENERS = ("``", "(", "[", "{", '"', "'", "`")
_CLOSERS = ("''", ")", "]", "}", '"', "'", ",", ";", ":", "!", "?")
_CLITIC = re.compile(r"(?i)^(\S+?)(n't|'s|'re|'ve|'ll|'d|'m)$")


def split_word(token: str, final: bool = False) -> list[str]:
    """One whitespace token as words: opening brackets and quotes, the word (a clitic split off), closing
    punctuation, each separate; a full stop is closing punctuation only in a sentence's `final` token."""
    closers = _CLOSERS + ((".",) if final else ())
    head: list[str] = []
    tail: list[str] = []
    peeled = True
    while peeled and len(token) > 1 and token not in _OPENERS + _CLOSERS and set(token) != {"."}:
        peeled = False
        for mark in _OPENERS:
            if token.startswith(mark) and len(token) > len(mark):
                head.append(mark)
                token, peeled = token[len(mark) :], True
                break
        for mark in closers:
            if token.endswith(mark) and len(token) > len(mark):
                tail.insert(0, mark)
                token, peeled = token[: -len(mark)], True
                break
    clitic = _CLITIC.match(token)
    core = [clitic.group(1), clitic.group(2)] if clitic else [token]
    return head + [w for w in core if w] + tail


def tokenize(sentence: str) -> list[str]:
    """Words of one sentence (see the module's docstring)."""
    tokens = sentence.split()
    last = len(tokens) - 1
    return [word for i, token in enumerate(tokens) for word in split_word(token, final=i == last)]


def unlabeled_sentences(corpus: str | Path, max_words: int = 100) -> Iterator[list[str]]:
    """Every sentence of `corpus` as words, in corpus order, skipping those of more than `max_words` words."""
    for document in read_documents(corpus, doc_boundary="blank"):
        for line in document.split("\n"):
            for sentence in split_sentences(line):
                words = tokenize(sentence)
                if 0 < len(words) <= max_words:
                    yield words


def read_unlabeled(
    corpus: str | Path, max_sentences: int | None = None, max_words: int = 100
) -> list[list[str]]:
    """The first `max_sentences` sentences of `corpus` (all when None); a corpus with none is one UserError."""
    sentences: list[list[str]] = []
    for words in unlabeled_sentences(corpus, max_words):
        sentences.append(words)
        if max_sentences is not None and len(sentences) >= max_sentences:
            break
    if not sentences:
        raise UserError(
            f"--unlabeled {corpus}: no sentences of 1 to {max_words} words in it; give a text corpus."
        )
    return sentences
