"""Dependency trees in column files: reading heads and relations, attachment scores, and predictions written back.

A treebank is a CoNLL-style column file (`electra.tagging.conll`) with a column named `head` (the 1-based index of
each word's head, 0 for the root) and, optionally, one named `rel` or `deprel` (the relation's type). CoNLL-U files
(`*.conllu`) name their columns so already. Without a relation column every arc has the one relation `_` and only
unlabeled scores are reported. A head that is not a whole number from 0 to the sentence's length is refused naming
the file and line.

Scores follow the dependency parsing convention the paper reports (CVT, section 4.3): UAS, the share of scored
words whose predicted head is right, and LAS, whose head and relation both are, with punctuation left out. A word
is punctuation when its part-of-speech tag (a column named `pos`, `upos`, `xpos` or `tag`) is one of
`PUNCTUATION_TAGS` (PTB's and Universal Dependencies' punctuation tags) or when every character of it is Unicode
punctuation; the second rule covers files without tags and other tag sets.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.tagging.conll import Sentence, read_conll

HEAD_COLUMN = "head"
RELATION_COLUMNS = ("rel", "deprel")
TAG_COLUMNS = ("pos", "upos", "xpos", "tag")
NO_RELATION = "_"
# PTB's punctuation tags (Chen and Manning's evaluation leaves these out) and Universal Dependencies' PUNCT
PUNCTUATION_TAGS = frozenset({"``", "''", ",", ".", ":", "PUNCT"})


@dataclass(frozen=True)
class Tree:
    """A sentence's gold analysis: each word's head (0 = root, else a 1-based word index), relation, and whether
    it is punctuation (left out of the scores unless asked)."""

    heads: tuple[int, ...]
    relations: tuple[str, ...]
    punctuation: tuple[bool, ...]


def is_punctuation(word: str, tag: str | None) -> bool:
    """Punctuation by its tag when a tag is given, or by its characters (every one Unicode category P*)."""
    if tag is not None and tag in PUNCTUATION_TAGS:
        return True
    return bool(word) and all(unicodedata.category(c).startswith("P") for c in word)


def read_treebank(
    path: str | Path, columns: str | Sequence[str] | None = None, max_sentences: int | None = None
) -> tuple[list[Sentence], list[Tree], bool]:
    """The sentences of a treebank file and their trees, and whether the file has relations. The columns must
    include `head` (CoNLL-U files name theirs); see the module's docstring for the rest."""
    sentences = read_conll(path, columns, max_sentences=max_sentences)
    names = sentences[0].layout.names
    if HEAD_COLUMN not in names:
        raise UserError(
            f"{path}: no column is named {HEAD_COLUMN}; name the columns with --columns, e.g. word,pos,head "
            "(a CoNLL-U file, *.conllu, names them itself)."
        )
    head = names.index(HEAD_COLUMN)
    relation = next((names.index(c) for c in RELATION_COLUMNS if c in names), None)
    tag = next((names.index(c) for c in TAG_COLUMNS if c in names), None)
    trees = []
    for sentence in sentences:
        heads = []
        for offset, row in enumerate(sentence.rows):
            value = row[head]
            if not value.isdigit() or int(value) > len(sentence.rows):
                raise UserError(
                    f"{path}:{sentence.line + offset}: head {value!r} is not a word of this {len(sentence.rows)}-word "
                    "sentence; heads are 1-based word numbers, 0 for the root."
                )
            if int(value) == offset + 1:
                raise UserError(
                    f"{path}:{sentence.line + offset}: word {offset + 1} is its own head; fix the line."
                )
            heads.append(int(value))
        trees.append(
            Tree(
                tuple(heads),
                tuple(row[relation] if relation is not None else NO_RELATION for row in sentence.rows),
                tuple(
                    is_punctuation(row[sentence.layout.word], row[tag] if tag is not None else None)
                    for row in sentence.rows
                ),
            )
        )
    return sentences, trees, relation is not None


def attachment_scores(
    gold: Sequence[Tree],
    predicted: Sequence[tuple[Sequence[int], Sequence[str]]],
    punctuation: bool = False,
) -> dict[str, float]:
    """UAS and LAS (fractions) over the words scored: all of them with `punctuation`, else all but punctuation;
    also the number of words scored. A sentence whose prediction has another length is a ValueError."""
    words = heads_right = both_right = 0
    for tree, (heads, relations) in zip(gold, predicted, strict=True):
        if len(heads) != len(tree.heads) or len(relations) != len(tree.heads):
            raise ValueError(f"a prediction of {len(heads)} heads for a sentence of {len(tree.heads)} words")
        for i, gold_head in enumerate(tree.heads):
            if tree.punctuation[i] and not punctuation:
                continue
            words += 1
            if heads[i] == gold_head:
                heads_right += 1
                both_right += relations[i] == tree.relations[i]
    return {"uas": heads_right / max(words, 1), "las": both_right / max(words, 1), "words": float(words)}


def write_parses(
    path: str | Path,
    sentences: Sequence[Sentence],
    predicted: Sequence[tuple[Sequence[int], Sequence[str]]],
) -> None:
    """Each sentence's rows as read, with the predicted head and relation appended as two more columns,
    tab-separated (a CoNLL-U field may hold a space), a blank line between sentences."""
    lines: list[str] = []
    for sentence, (heads, relations) in zip(sentences, predicted, strict=True):
        lines.extend("\t".join((*row, str(h), r)) for row, h, r in zip(sentence.rows, heads, relations))
        lines.append("")
    write_text_atomically(path, "\n".join(lines) + ("\n" if lines else ""))
