"""Labelled classification data for TLM: TSV / CSV / JSONL readers, a label vocabulary, and the SciERC "sciie" task.

Task files come in many shapes (AG News from ALPS is `text<TAB>label` with no header; the original AG News CSV is
`label,title,description` with one), so columns are named or numbered, the header is detected, and several text
columns are joined. Every problem is a `UserError` naming the file and line.

A label is a class name, compared as text, except that a number written with a decimal point is one class with its
shortest spelling: `1.0` is `1` and `0.50` is `0.5` (`class_name`), in TSV, CSV and JSONL alike, so a spreadsheet that
exported a numeric label column as `1.0` in one split (or one row) and `1` in another does not split one class in two.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import decode_user_text, require_file
from electra.data.corpus import json_lines

Column = str | int
# a decimal number with a point: its integer part, then its fraction without trailing zeros
_DECIMAL = re.compile(r"([+-]?[0-9]+)\.([0-9]*?)0*")


@dataclass(frozen=True)
class TaskExample:
    text: str
    label: str


def parse_columns(spec: str | None) -> list[Column] | None:
    """`"title,description"` or `"1,2"` from the command line into names / 0-based indices."""
    if spec is None or not spec.strip():
        return None
    return [int(p) if p.strip().lstrip("-").isdigit() else p.strip() for p in spec.split(",")]


def class_name(label: str) -> str:
    """The class a label names: `1.0` and `1.00` are `1`, `0.50` is `0.5`; any other text is itself. (Read as two
    classes, `1` and `1.0` had trained a classifier with a class that could never be right.)"""
    match = _DECIMAL.fullmatch(label)
    if match is None:
        return label
    whole, fraction = match.groups()
    return f"{whole}.{fraction}" if fraction else whole


def _format_of(path: Path, fmt: str | None) -> str:
    fmt = fmt or path.suffix.lower().lstrip(".")
    fmt = {"ndjson": "jsonl", "json": "jsonl", "txt": "tsv"}.get(fmt, fmt)
    if fmt not in ("tsv", "csv", "jsonl"):
        raise UserError(
            f"{path}: cannot tell the format from the suffix; pass --task-format tsv, csv or jsonl."
        )
    return fmt


def read_task_file(
    path: str | Path,
    text_columns: Sequence[Column] | None = None,
    label_column: Column | None = None,
    header: bool | None = None,
    fmt: str | None = None,
) -> list[TaskExample]:
    """Examples of a TSV, CSV or JSONL file (see the module doc for how columns are resolved)."""
    path = require_file(path, "task file")
    kind = _format_of(path, fmt)
    text = _task_text(path, kind)
    examples = (
        _read_jsonl(path, text, text_columns, label_column)
        if kind == "jsonl"
        else _read_delimited(path, text, "\t" if kind == "tsv" else ",", text_columns, label_column, header)
    )
    if not examples:
        raise UserError(f"{path}: no examples (the file is empty); a task split needs labelled rows.")
    return examples


def _task_text(path: Path, kind: str) -> str:
    """The file's text through the library's one strict decoder (`decode_user_text`): a byte-order mark is dropped
    (Excel's CSVs start with one, and it hid the `label` header), UTF-16 with its mark is read, and Latin-1, binary
    or UTF-16 without a mark is one line naming the file and the `iconv` fix. Read with a bare `open`, these were
    a UnicodeDecodeError traceback, or a UTF-16 file's NULs made a misleading column count."""
    expected = "a JSON object per line (UTF-8)" if kind == "jsonl" else f"{kind.upper()} rows (UTF-8)"
    return decode_user_text(path.read_bytes(), str(path), expected)


def _read_delimited(
    path: Path,
    text: str,
    delimiter: str,
    text_columns: Sequence[Column] | None,
    label_column: Column | None,
    header: bool | None,
) -> list[TaskExample]:
    """The rows of a TSV or CSV file as examples: the header detected (when `header` is None), the label and text
    columns resolved against it (`_label_and_text_indices`), then each row checked and read."""
    rows = _delimited_rows(path, text, delimiter)
    numbered = [(n, row) for n, row in enumerate(rows, start=1) if any(cell.strip() for cell in row)]
    if not numbered:
        return []
    first = [cell.strip() for cell in numbered[0][1]]
    if header is None:
        wanted = {"label", "text"} | {c for c in [label_column, *(text_columns or [])] if isinstance(c, str)}
        header = any(cell.lower() in {w.lower() for w in wanted} for cell in first)
    names = first if header else []
    body = numbered[1:] if header else numbered
    label_index, text_indices = _label_and_text_indices(path, names, len(first), text_columns, label_column)
    return [_row_example(path, number, row, len(first), label_index, text_indices) for number, row in body]


def _delimited_rows(path: Path, text: str, delimiter: str) -> list[list[str]]:
    """Every row of the file's `text`, read strictly: a quote left open is refused in one line naming the line."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL  # TSV text keeps its quote marks
    # strict: a quote left open swallowed every later row into one field in silence; a field may be as long as the
    # file (one huge document), where the csv module's default limit (128 KiB) ended in a traceback
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting, strict=True)
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text) + 1))
    try:
        return list(reader)
    except csv.Error as exc:
        raise UserError(
            f"{path}:{reader.line_num}: not valid {'TSV' if delimiter == chr(9) else 'CSV'} ({exc}); "
            'close the quoted field or quote it as a whole ("...", with "" for a quote inside).'
        ) from None
    finally:
        csv.field_size_limit(limit)


def _label_and_text_indices(
    path: Path,
    names: list[str],
    width: int,
    text_columns: Sequence[Column] | None,
    label_column: Column | None,
) -> tuple[int, list[int]]:
    """The label column's index and the text columns' (`names`: the header's cells, empty without one). Without
    --label-column: the header's `label`, or column 1 of a two-column file; without --text-column: the header's
    `text`, or every other column in order (AG News: title then description)."""
    if label_column is None:
        if names:
            label_column = "label"
        elif width == 2:
            label_column = 1  # the common `text<TAB>label` layout
        else:
            raise UserError(
                f"{path}:1: no label column: the file has no header and {width} columns; "
                "pass --label-column with a 0-based index (or add a header with a 'label' column)."
            )
    label_index = _column_index(path, label_column, "label", names, width)
    if text_columns is None:
        if names and "text" in [n.lower() for n in names]:
            return label_index, [_column_index(path, "text", "text", names, width)]
        return label_index, [i for i in range(width) if i != label_index]
    return label_index, [_column_index(path, c, "text", names, width) for c in text_columns]


def _column_index(path: Path, column: Column, role: str, names: list[str], width: int) -> int:
    """A column named (against the header's `names`, any case) or numbered (0-based; negative from the end)."""
    if isinstance(column, int):
        if not -width <= column < width:
            raise UserError(f"{path}:1: {role} column {column} is out of range (rows have {width} columns).")
        return column % width
    lowered = [n.lower() for n in names]
    if column.lower() not in lowered:
        where = f"the header has {', '.join(names)}" if names else "the file has no header row"
        raise UserError(
            f"{path}:1: {role} column {column!r} not found ({where}); pass --{role}-column NAME or a 0-based index."
        )
    return lowered.index(column.lower())


def _row_example(
    path: Path, number: int, row: list[str], width: int, label_index: int, text_indices: list[int]
) -> TaskExample:
    """Row `number` as an example: as wide as the first row, with a label; its text columns joined by a space."""
    if len(row) != width:
        raise UserError(
            f"{path}:{number}: {len(row)} columns where the first row has {width}; "
            "fix the row (a stray delimiter or quote?)."
        )
    label = class_name(row[label_index].strip())
    if not label:
        raise UserError(f"{path}:{number}: empty label; every row needs one.")
    text = " ".join(row[i].strip() for i in text_indices if row[i].strip())
    return TaskExample(text=text, label=label)


def _label_of(value: object, path: Path, number: int, key: str) -> str:
    """A JSON label as the class name it stands for (`class_name`): strings and whole numbers as written, `1.0` as
    `1`, in a string or as a number (one class written both ways is one class, not two). null, true/false, a list
    or an object is refused: `str()` had made classes named 'None' or '[1]' in silence."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UserError(
            f"{path}:{number}: label field {key!r} is {json.dumps(value)}, not a class name; give a string "
            "or a number (or pass --label-column NAME)."
        )
    label = class_name(str(value).strip())
    if not label:
        raise UserError(f"{path}:{number}: empty label; every row needs one.")
    return label


def _read_jsonl(
    path: Path, text: str, text_columns: Sequence[Column] | None, label_column: Column | None
) -> list[TaskExample]:
    text_keys = [str(c) for c in (text_columns or ["text"])]
    label_key = str(label_column if label_column is not None else "label")
    examples = []
    for number, record in json_lines(str(path), text, "a JSON object with text and label fields"):
        if label_key not in record:
            raise UserError(
                f"{path}:{number}: label field {label_key!r} missing (fields: {', '.join(record)}); "
                "pass --label-column NAME."
            )
        missing = [k for k in text_keys if k not in record]
        if missing:
            raise UserError(
                f"{path}:{number}: text field {missing[0]!r} missing (fields: {', '.join(record)}); "
                "pass --text-column NAME."
            )
        # a null text is no text (it had become the word 'None')
        parts = [str(record[k]).strip() for k in text_keys if record[k] is not None]
        examples.append(
            TaskExample(
                text=" ".join(p for p in parts if p),
                label=_label_of(record[label_key], path, number, label_key),
            )
        )
    return examples


class LabelVocab:
    """Label strings to class ids, fixed by the training split (sorted, so every run numbers them alike)."""

    def __init__(self, labels: Sequence[str]):
        self.labels = list(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}

    @classmethod
    def from_examples(cls, examples: Sequence[TaskExample], source: str) -> LabelVocab:
        labels = sorted({e.label for e in examples})
        if len(labels) < 2:
            raise UserError(
                f"{source}: only {len(labels)} distinct label(s); classification needs at least two."
            )
        return cls(labels)

    def encode(self, examples: Sequence[TaskExample], source: str) -> list[int]:
        for number, example in enumerate(examples, start=1):
            if example.label not in self.index:
                raise UserError(
                    f"{source}: example {number} has label {example.label!r}, which the training file never uses "
                    f"(labels: {', '.join(self.labels)}); fix the label or add training examples for it."
                )
        return [self.index[e.label] for e in examples]

    def __len__(self) -> int:
        return len(self.labels)


def split_examples(
    examples: Sequence[TaskExample], dev_size: int, seed: int
) -> tuple[list[TaskExample], list[TaskExample]]:
    """A seeded train/dev split, for tasks that ship one labelled file (AG News from ALPS)."""
    if not 0 < dev_size < len(examples):
        raise UserError(
            f"dev size {dev_size} must be between 1 and {len(examples) - 1} for {len(examples)} examples."
        )
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    dev = sorted(order[:dev_size])
    rest = sorted(order[dev_size:])
    return [examples[i] for i in rest], [examples[i] for i in dev]


def jsonl_text(examples: Sequence[TaskExample]) -> str:
    """The examples as JSONL lines of text and label, the form `read_task_file` reads back."""
    return "".join(json.dumps({"text": e.text, "label": e.label}) + "\n" for e in examples)


def write_jsonl(examples: Sequence[TaskExample], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(jsonl_text(examples))


def mark_relation(tokens: Sequence[str], head: tuple[int, int], tail: tuple[int, int]) -> str:
    """The sentence with `[[ head ]]` and `<< tail >>` around the two spans (inclusive token ranges).

    These are the markers of SciBERT's / Don't Stop Pretraining's "sciie" relation task: the classifier sees which
    pair is meant. Nested or shared spans keep well-formed brackets: openings before closings at a position.
    """
    before: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    before.setdefault(head[0], []).append("[[")
    before.setdefault(tail[0], []).append("<<")
    after.setdefault(head[1], []).append("]]")
    after.setdefault(tail[1], []).append(">>")
    out: list[str] = []
    for i, token in enumerate(tokens):
        out.extend(before.get(i, []))
        out.append(token)
        out.extend(reversed(after.get(i, [])))
    return " ".join(out)


def build_sciie(path: str | Path) -> list[TaskExample]:
    """One example per annotated relation of a SciERC (DyGIE jsonl) file: marked sentence, relation label.

    DyGIE stores spans as document-level token offsets; each relation lies inside one sentence, so offsets are made
    sentence-relative. The counts match DSP's sciie splits (train 3,219 / dev 455 / test 974).
    """
    path = require_file(path, "SciERC file")
    examples = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                sentences, relations = doc["sentences"], doc["relations"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise UserError(
                    f"{path}:{number}: not a DyGIE document (need 'sentences' and 'relations' lists)."
                ) from None
            start = 0
            for sentence, sentence_relations in zip(sentences, relations):
                for relation in sentence_relations:
                    h0, h1, t0, t1, label = relation
                    head, tail = (h0 - start, h1 - start), (t0 - start, t1 - start)
                    if min(head + tail) < 0 or max(head + tail) >= len(sentence):
                        raise UserError(f"{path}:{number}: relation {relation} lies outside its sentence.")
                    examples.append(TaskExample(text=mark_relation(sentence, head, tail), label=label))
                start += len(sentence)
    return examples
