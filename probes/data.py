"""The probes' labelled text as plain lists: SST-2 sentences with their sentiment, Brown sentences with POS tags.

Brown's tags carry decorations that are not part of the word class: `-tl` (in a title), `-hl` (in a headline),
`-nc` (cited), and contractions join two tags with `+` (`pps+bez`, "it's"). The probe asks whether a word's class
is linearly readable from the encoder, so each tag is reduced to its base (`nn-tl` -> `nn`, `pps+bez` -> `pps`).
The dev split is a fixed rule (every 10th sentence in file order), so numbers are reproducible without a seed.
"""

from __future__ import annotations

import re
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import decode_user_text
from electra.finetune.text_tasks import TaskSpec, read_examples

BROWN_FILE = re.compile(r"[a-z]{2}\d{2}")  # ca01 ... cr09; CONTENTS, README, cats.txt are not data
TAG_DECORATIONS = ("-tl", "-hl", "-nc")
DEV_EVERY = 10  # sentence i (0-based, in file order) is dev when i % DEV_EVERY == DEV_EVERY - 1

TaggedSentence = list[tuple[str, str]]
# SST-2 as GLUE ships it: a header `sentence\tlabel`, labels 0 and 1.
SST2 = TaskSpec("sst2", "SST-2", ("0", "1"), "sentence", None, "label", "accuracy", {"sst2": "dev.tsv"}, {})


def read_sst2(path: str | Path) -> tuple[list[str], list[int]]:
    """(sentences, 0/1 labels) of an SST-2 TSV (header `sentence\\tlabel`), read by the fine-tuning floor's strict
    reader (GLUE's), whose errors name the file and line (missing file or column, short row, a label other than 0/1)."""
    examples = read_examples(path, SST2, labelled=True, skip_flag=None)  # probe has no such flag
    return [ex.text_a for ex in examples], [int(ex.label) for ex in examples]


def base_tag(tag: str) -> str:
    """`nn-tl` -> `nn`, `in-hl` -> `in`, `nn-tl-hl` -> `nn`, `pps+bez` -> `pps`, `NP$` -> `np$`; `--` stays."""
    tag = tag.lower().split("+", 1)[0]
    stripped = True
    while stripped:
        stripped = False
        for suffix in TAG_DECORATIONS:
            if tag.endswith(suffix) and len(tag) > len(suffix):
                tag, stripped = tag[: -len(suffix)], True
    return tag


def read_brown(directory: str | Path, max_sentences: int | None = None) -> list[TaggedSentence]:
    """Every tagged sentence of the Brown files in `directory` (sorted by file name), as [(word, base tag)].

    A sentence is one non-blank line of `word/tag` tokens; the tag is after the last `/` (words may hold one).
    Files are read as `decode_user_text` reads them (UTF-8, or UTF-16 with its mark; other bytes are one line, not
    words with U+FFFD in them). Stops after `max_sentences` sentences when given."""
    directory = Path(directory)
    if not directory.is_dir():
        what = "is a file, not" if directory.exists() else "not found; give"
        raise UserError(f"{directory}: {what} the Brown corpus directory (it holds ca01, ca02, ... files).")
    sentences: list[TaggedSentence] = []
    for path in brown_files(directory):
        text = decode_user_text(path.read_bytes(), str(path), "Brown word/tag text")
        for lineno, line in enumerate(text.split("\n"), 1):
            tokens = line.split()
            if not tokens:
                continue
            sentence = []
            for token in tokens:
                word, slash, tag = token.rpartition("/")
                if not slash or not word or not tag:
                    raise UserError(
                        f"{path}:{lineno}: {token!r} is not word/tag; is this a Brown POS-tagged file?"
                    )
                sentence.append((word, base_tag(tag)))
            sentences.append(sentence)
            if max_sentences is not None and len(sentences) >= max_sentences:
                return sentences
    if not sentences:
        raise UserError(
            f"{directory}: no tagged sentences (expected Brown files named like ca01 with word/tag tokens)."
        )
    return sentences


def brown_files(directory: Path) -> list[Path]:
    """The Brown data files in `directory`, sorted by name: the ones `read_brown` reads (and a resume fingerprints)."""
    return sorted(p for p in directory.iterdir() if p.is_file() and BROWN_FILE.fullmatch(p.name))


def split_brown(sentences: list[TaggedSentence]) -> tuple[list[TaggedSentence], list[TaggedSentence]]:
    """(train, dev): every 10th sentence is dev, so both spread over all genres and the split never changes."""
    train = [s for i, s in enumerate(sentences) if i % DEV_EVERY != DEV_EVERY - 1]
    dev = [s for i, s in enumerate(sentences) if i % DEV_EVERY == DEV_EVERY - 1]
    return train, dev
