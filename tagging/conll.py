"""CoNLL-style column files: one token a line, its fields separated by spaces or tabs, a blank line between
sentences; `-DOCSTART-` lines (document breaks) also end a sentence and are not tokens.

Which column holds the word and which the label is the user's choice (`--columns word,pos,chunk --label chunk`);
without names, the first column is the word and the last the label. Every token line must have the layout's number
of fields; a line that does not is refused naming the file and line. Files are UTF-8 (or UTF-16 with its mark),
read strictly: a wrong guess at the encoding would train on other words than the file's.

A file named `*.conllu` is read as CoNLL-U (Universal Dependencies): tab-separated, its ten columns named
`CONLLU_COLUMNS` unless `--columns` names them, `#` comment lines skipped, and so are multiword-token ranges
(`3-4`) and empty nodes (`8.1`), whose words the syntactic words next to them already spell.

Also here: the label vocabulary (read from the training file) and conversion between BIO and BIOES tags.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import decode_user_text, require_file, write_text_atomically
from electra.tagging.spans import Span, extract_spans, is_span_label

DOCSTART = "-DOCSTART-"
CONLLU_COLUMNS = ("id", "word", "lemma", "upos", "xpos", "feats", "head", "rel", "deps", "misc")


@dataclass(frozen=True)
class Layout:
    """The columns of a file: their names, and which one holds the word and which the label."""

    names: tuple[str, ...]
    word: int
    label: int

    def describe(self) -> str:
        return ",".join(self.names)


def make_layout(
    columns: str | Sequence[str] | None, label: str | None, n_fields: int | None = None
) -> Layout:
    """The layout from `--columns` (comma-separated names, or a sequence) and `--label` (a column's name; default
    the last column). The word is the column named `word`, else the first. Without names, `n_fields` (the first
    token line's count) sets the width and the columns are called word, 2, 3, ... (1-based positions)."""
    if columns is None:
        if label is not None:
            raise UserError(f"--label {label} names a column, but no --columns name them; add --columns.")
        if n_fields is None or n_fields < 2:
            raise UserError(
                "a tagging file needs at least two columns (word and label); name them with --columns."
            )
        names = ("word", *(str(i) for i in range(2, n_fields + 1)))
    else:
        names = tuple(c.strip() for c in (columns.split(",") if isinstance(columns, str) else columns))
        if len(names) < 2 or any(not c for c in names):
            raise UserError(
                f"--columns {','.join(names)}: give at least two non-empty names, e.g. word,pos,chunk."
            )
        repeated = sorted({c for c in names if names.count(c) > 1})
        if repeated:
            raise UserError(f"--columns names {', '.join(repeated)} twice; give each column its own name.")
    word = names.index("word") if "word" in names else 0
    if label is None:
        label_index = len(names) - 1
    elif label in names:
        label_index = names.index(label)
    else:
        raise UserError(f"--label {label} is not one of --columns {','.join(names)}.")
    if label_index == word:
        raise UserError(f"--label {names[label_index]} is the word column; pick another column.")
    return Layout(names, word, label_index)


@dataclass(frozen=True)
class Sentence:
    """One sentence: each token's fields as read (`rows`), and the file line of its first token."""

    rows: tuple[tuple[str, ...], ...]
    line: int
    layout: Layout

    @property
    def words(self) -> list[str]:
        return [row[self.layout.word] for row in self.rows]

    @property
    def labels(self) -> list[str]:
        return [row[self.layout.label] for row in self.rows]


def read_conll(
    path: str | Path,
    columns: str | Sequence[str] | None = None,
    label: str | None = None,
    max_sentences: int | None = None,
) -> list[Sentence]:
    """The sentences of a column file, in order (the first `max_sentences` when given). See the module's
    docstring for the format; any line that breaks it is one UserError naming `path:line` and the fix."""
    path = require_file(path, "tagging file", "give a CoNLL-style column file (one token a line)")
    text = decode_user_text(path.read_bytes(), str(path), "a CoNLL-style column file")
    conllu = path.suffix.lower() == ".conllu"
    if conllu and columns is None:
        columns = CONLLU_COLUMNS
    layout = make_layout(columns, label) if columns is not None else None
    sentences: list[Sentence] = []
    rows: list[tuple[str, ...]] = []
    first = 0

    def close() -> None:
        nonlocal rows
        if rows:
            sentences.append(Sentence(tuple(rows), first, layout))
            rows = []

    for number, line in enumerate(text.splitlines(), start=1):
        if conllu:
            if line.startswith("#"):
                continue
            fields = tuple(line.split("\t")) if line.strip() else ()
            if fields and ("-" in fields[0] or "." in fields[0]):
                continue
        else:
            fields = tuple(line.split())
        if not fields or fields[0] == DOCSTART:
            close()
            if max_sentences is not None and len(sentences) >= max_sentences:
                break
            continue
        if layout is None:
            layout = make_layout(None, label, len(fields))
        if len(fields) != len(layout.names):
            raise UserError(
                f"{path}:{number}: {len(fields)} column(s) where the file's layout ({layout.describe()}) has "
                f"{len(layout.names)}; fix the line, or name the columns with --columns."
            )
        if not rows:
            first = number
        rows.append(fields)
    close()
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    if not sentences:
        raise UserError(f"{path}: holds no sentences (token lines separated by blank lines).")
    return sentences


def label_vocabulary(sentences: Iterable[Sentence]) -> list[str]:
    """The labels of the training sentences: `O` first when present, then the rest sorted (a fixed order, so a
    label's index means the same on every run over the same file)."""
    labels = {tag for sentence in sentences for tag in sentence.labels}
    return (["O"] if "O" in labels else []) + sorted(labels - {"O"})


def is_span_scheme(labels: Iterable[str]) -> bool:
    """Whether every label is `O` or BIO/BIOES-prefixed (`B-NP`): then runs report span F1; otherwise (part of
    speech, say) token accuracy."""
    labels = list(labels)
    return bool(labels) and all(is_span_label(tag) for tag in labels) and any(tag != "O" for tag in labels)


def _emit(spans: list[Span], length: int, bioes: bool) -> list[str]:
    tags = ["O"] * length
    for span in spans:
        if bioes and span.end - span.start == 1:
            tags[span.start] = f"S-{span.type}"
            continue
        tags[span.start] = f"B-{span.type}"
        for i in range(span.start + 1, span.end):
            tags[i] = f"I-{span.type}"
        if bioes:
            tags[span.end - 1] = f"E-{span.type}"
    return tags


def to_bioes(tags: Sequence[str]) -> list[str]:
    """BIOES tags for the spans that `tags` (BIO, IOB1 or BIOES) hold under the conlleval convention: a span of
    one token becomes S-, longer ones B- I-... E-."""
    return _emit(extract_spans(tags), len(tags), bioes=True)


def to_bio(tags: Sequence[str]) -> list[str]:
    """BIO (IOB2) tags for the spans `tags` hold: each span B- then I-."""
    return _emit(extract_spans(tags), len(tags), bioes=False)


def write_conll(
    path: str | Path, sentences: Sequence[Sentence], predictions: Sequence[Sequence[str]]
) -> None:
    """Each sentence's rows as read with its predicted tag appended as the last column, a blank line between
    sentences: the input `conlleval` reads (gold label, then prediction, last)."""
    if len(sentences) != len(predictions):
        raise ValueError(f"{len(predictions)} predictions for {len(sentences)} sentences")
    lines: list[str] = []
    for sentence, tags in zip(sentences, predictions):
        if len(tags) != len(sentence.rows):
            raise ValueError(f"line {sentence.line}: {len(tags)} tags for {len(sentence.rows)} tokens")
        lines.extend(" ".join((*row, tag)) for row, tag in zip(sentence.rows, tags))
        lines.append("")
    write_text_atomically(path, "\n".join(lines) + ("\n" if lines else ""))
