"""Sentence and sentence-pair classification files in GLUE's layout, and a strict reader for them.

Files are read exactly as `download_glue_data.py` writes them: tab-separated, UTF-8 (MRPC's header starts with a
byte-order mark), and with no quoting at all (GLUE sentences contain unbalanced `"` characters, so a csv reader
with quoting on would silently merge rows). Columns are found by their header name, or by position where a split
has no header (CoLA train/dev). A `TaskSpec` says where a task's files are and how to read them; GLUE's ten tasks
are declared in `electra.glue.tasks`, and the probes read SST-2 through the same reader.

Every problem a user can fix (missing or undecodable file, missing column, short or overlong row, unknown label,
empty split) is a UserError that names the file and line: this reader is the door, and the code after it trusts
the examples it returns.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import decode_user_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskSpec:
    """Where a task's files are and how to read them.

    `dev_files` and `test_files` map a result name (dev) or a GLUE-server file stem (test) to a file relative to
    the task directory: MNLI evaluates one trained model on two dev sets and three test sets (the AX diagnostic
    is predicted with the MNLI model, as the GLUE server expects).
    """

    name: str
    directory: str
    labels: tuple[str, ...] | None  # None: regression (STS-B)
    text_a: str
    text_b: str | None
    label_column: str
    primary_metric: str  # the metric the ELECTRA paper reports
    dev_files: dict[str, str]
    test_files: dict[str, str]
    test_id_column: str = "index"
    headerless_columns: dict[str, int] | None = None  # CoLA train/dev: column name -> position
    symmetric: bool = False  # sentence order carries no meaning: "double unordered" training applies
    train_file: str = "train.tsv"

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)


@dataclass
class Example:
    guid: str  # "<file>:<line>" for labelled splits, the file's own id for test splits
    text_a: str
    text_b: str | None
    label: str | float | None  # label string, a float score (STS-B) or None (test)
    extra: dict[str, str] = field(default_factory=dict)


def task_file(data_dir: Path, spec: TaskSpec, relative: str) -> Path:
    return Path(os.path.normpath(data_dir / spec.directory / relative))


def read_examples(
    path: str | os.PathLike,
    spec: TaskSpec,
    labelled: bool,
    skip_malformed: bool = False,
    quiet: bool = False,
    skip_flag: str | None = "--skip-malformed",
) -> list[Example]:
    """Read one split. `labelled=False` reads a test file (ids and texts, no label column).

    `skip_malformed` drops rows with too few fields, or more than the header names (a tab inside a sentence shifts
    every column after it, so the row would be read silently wrong), with one warning that counts them, instead of
    stopping: the escape hatch for a corrupted download; labels outside the label set are always an error.
    `quiet` leaves that warning to a later read of the same file. `skip_flag` is the option a malformed row's
    message offers (None: the command has none, and the message offers nothing it cannot take).
    """
    path = Path(path)
    lines = _split_lines(path, spec, labelled)
    if labelled and spec.headerless_columns is not None:
        columns, first_row = dict(spec.headerless_columns), 0
    else:
        columns = {name.strip(): i for i, name in enumerate(lines[0].split("\t"))}
        first_row = 1
    wanted = [spec.text_a] + ([spec.text_b] if spec.text_b else [])
    wanted += (
        [spec.label_column] if labelled else ([spec.test_id_column] if spec.test_id_column in columns else [])
    )
    _require_columns(path, lines[0], columns, wanted, spec, labelled)
    need = max(columns[name] for name in wanted) + 1
    # a row with more (non-empty) fields than the header has a tab in its text: its columns shift
    width = len(columns)
    skip_hint = f" ({skip_flag} drops such rows)" if skip_flag else ""
    examples: list[Example] = []
    skipped: list[int] = []
    id_lines: dict[str, int] = {}  # test id -> the line that gave it
    rows = 0  # rows read so far (blank lines are none)
    for index, line in enumerate(lines[first_row:]):
        lineno = first_row + index + 1
        if not line.strip():
            continue
        rows += 1
        fields = line.split("\t")
        while len(fields) > width and not fields[-1].strip():
            fields.pop()  # trailing empty fields (a tab at the end of the row) shift nothing
        if len(fields) < need or len(fields) > width:
            if skip_malformed:
                skipped.append(lineno)
                continue
            raise _malformed_row(path, lineno, len(fields), need, width, bool(first_row), skip_hint)
        examples.append(_example(fields, columns, spec, labelled, path, lineno, id_lines, rows))
    if skipped and not quiet:
        logger.warning("%s: skipped %d malformed row(s), first at line %d", path, len(skipped), skipped[0])
    if not examples:
        raise UserError(f"{path}: no examples (the split is empty); check that this is the right file.")
    return examples


def _split_lines(path: Path, spec: TaskSpec, labelled: bool) -> list[str]:
    """The file's lines, refused in one line when it is missing or holds nothing but blank lines."""
    if not path.is_file():
        raise UserError(
            f"{path}: file not found; the {spec.directory} task needs it (GLUE layout: {spec.directory}/<split>.tsv)."
        )
    # Split on "\n" only: str.splitlines() would also break rows at U+2028, U+0085 or form feeds in the text.
    lines = [line.removesuffix("\r") for line in _read_text(path).split("\n")]
    if not any(line.strip() for line in lines):
        expected = (
            "examples" if labelled and spec.headerless_columns is not None else "a header line and examples"
        )
        raise UserError(f"{path}: the file is empty; expected {expected}.")
    return lines


def _require_columns(
    path: Path, first_line: str, columns: dict[str, int], wanted: list[str], spec: TaskSpec, labelled: bool
) -> None:
    """Every `wanted` column is in the header (or the headerless layout); the first one missing is refused in one
    line that quotes what the header holds (and says so when it looks comma-separated)."""
    for name in wanted:
        if name not in columns:
            found = ", ".join(_clip(column) for column in list(columns)[:12]) + (
                ", ..." if len(columns) > 12 else ""
            )
            hint = (
                " the header has no tab, but GLUE files are tab-separated;"
                if len(columns) == 1 and "," in first_line
                else ""
            )
            raise UserError(
                f"{path}:1: no column '{name}' in the header (found: {found});{hint} "
                f"is this the {spec.directory} {'train/dev' if labelled else 'test'} file?"
            )


def _malformed_row(
    path: Path, lineno: int, found: int, need: int, width: int, header: bool, skip_hint: str
) -> UserError:
    """The one line for a row with too few fields (cut short) or more than the header names (a tab in its text)."""
    if found < need:
        return UserError(
            f"{path}:{lineno}: expected at least {need} tab-separated fields, found {found}; "
            f"the row is truncated or not tab-separated{skip_hint}."
        )
    return UserError(
        f"{path}:{lineno}: {found} tab-separated fields where the "
        f"{'header has' if header else 'layout has'} {width}; a tab inside the text shifts the row's "
        f"columns: replace it with a space{skip_hint}."
    )


def _example(
    fields: list[str],
    columns: dict[str, int],
    spec: TaskSpec,
    labelled: bool,
    path: Path,
    lineno: int,
    id_lines: dict[str, int],
    rows: int,
) -> Example:
    """A well-formed row as an example: a labelled row's label checked and its guid `<file>:<line>`; a test row's
    guid its own id (checked against `id_lines`), or its place among the `rows` read when there is no id column."""
    label: str | float | None = None
    if labelled:
        label = _parse_label(fields[columns[spec.label_column]].strip(), spec, path, lineno)
        guid = f"{path.name}:{lineno}"
    elif spec.test_id_column in columns:
        guid = fields[columns[spec.test_id_column]].strip()
        _check_test_id(guid, id_lines, spec, path, lineno)
    else:  # no id column: the row's place among the file's rows (0, 1, ...), blank lines not counted
        guid = str(rows - 1)
    return Example(
        guid=guid,
        text_a=fields[columns[spec.text_a]],
        text_b=fields[columns[spec.text_b]] if spec.text_b else None,
        label=label,
    )


def _read_text(path: Path) -> str:
    """A task file's text (`decode_user_text`: UTF-8 through MRPC's byte-order mark, or UTF-16 with its mark);
    GLUE labels and sentences are never guessed at in another encoding."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror}); check its permissions.") from None
    return decode_user_text(data, str(path), "a GLUE task file (tab-separated UTF-8)")


def _clip(text: str, limit: int = 40) -> str:
    """A header field as an error message quotes it: a file with no line breaks it knows of is one huge 'header'."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_test_id(guid: str, seen: dict[str, int], spec: TaskSpec, path: Path, lineno: int) -> None:
    """A test row's id must be there and be its own: the GLUE server matches predictions to rows by it, and an
    empty or repeated id had been written to the predictions TSV as it was."""
    column = spec.test_id_column
    if not guid:
        raise UserError(
            f"{path}:{lineno}: the '{column}' field is empty; give the row its id (the GLUE server needs it)."
        )
    if guid in seen:
        raise UserError(
            f"{path}:{lineno}: {column} '{_clip(guid)}' repeats line {seen[guid]}'s; each test row needs its own id "
            "(the GLUE server matches predictions by it): fix one of the two."
        )
    seen[guid] = lineno


def _parse_label(value: str, spec: TaskSpec, path: Path, lineno: int) -> str | float:
    if spec.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise UserError(
                f"{path}:{lineno}: score '{value}' is not a number; {spec.directory} needs a 0-5 score."
            )
        if not 0.0 <= score <= 5.0:  # a typo such as "45" would pull the regression head far off the scale
            raise UserError(
                f"{path}:{lineno}: score '{value}' is outside 0-5, the range of {spec.directory}'s similarity "
                "scores; fix that line."
            )
        return score
    if value not in spec.labels:
        raise UserError(
            f"{path}:{lineno}: label '{value}' is not one of {', '.join(spec.labels)} (task {spec.directory})."
        )
    return value


def swap_pairs(examples: list[Example]) -> list[Example]:
    """The same pairs with the two sentences swapped ("double unordered" training for MRPC and STS-B)."""
    return [
        Example(f"{ex.guid}:swapped", ex.text_b or "", ex.text_a, ex.label)
        for ex in examples
        if ex.text_b is not None
    ]
