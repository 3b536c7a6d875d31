"""Readers for the official SQuAD JSON (v1.1 and v2.0), checked so bad input fails loudly with the question id.

The file's structure is validated as it is read: a malformed file, a missing field, or an answer whose text is not
the context at its `answer_start` raises `UserError` naming the file and the question id. Nothing is skipped
silently. v2.0's `is_impossible` and `plausible_answers` are kept (plausible answers are never trained on; they are
carried so users can inspect them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.files import decode_user_text, require_file
from electra.core.settings import spelled

VERSIONS = ("1.1", "2.0")


@dataclass
class Answer:
    text: str
    start: int  # character offset in the context

    @property
    def end(self) -> int:
        """Exclusive character end."""
        return self.start + len(self.text)


@dataclass
class SquadExample:
    qid: str
    title: str
    context: str
    question: str
    answers: list[Answer] = field(default_factory=list)
    is_impossible: bool = False
    plausible_answers: list[Answer] = field(default_factory=list)


def read_json_file(path: Path, hint: str) -> Any:
    """A JSON file's value, or one line naming the file and the fix: a file cut short (a copy or download
    interrupted) is said to be cut short, not just "malformed"; a byte-order mark (editors on Windows write one)
    is read through, as `json.loads` does for bytes, instead of failing on the first character; and nesting too
    deep for the parser is a refusal, not a RecursionError traceback. `hint` (a sentence, with its own stop) ends
    a message about bad JSON."""
    # UTF-8 with or without a BOM, or UTF-16 with one; anything else is one line from the one strict reader
    text = decode_user_text(path.read_bytes(), str(path), "JSON (UTF-8)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if not exc.doc.strip():
            raise UserError(f"{path}: the file is empty; {hint}") from None
        # the parser stopped at the end, or in a string that runs to the end: the rest is missing
        if exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise UserError(
                f"{path}:{exc.lineno}: the JSON stops before it is complete ({exc.msg}): the file was cut short; "
                "copy or download it again."
            ) from None
        raise UserError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg}); {hint}") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply to read; {hint}") from None


def load_squad_json(path: str | Path) -> dict[str, Any]:
    """The parsed file, with a one-line error for a missing file, bad JSON or a missing top-level `data`."""
    path = require_file(path, "SQuAD JSON file", "e.g. the official dev-v1.1.json")
    payload = read_json_file(path, "is this the official SQuAD file?")
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise UserError(f"{path}: expected an object with a 'data' list (the official SQuAD layout).")
    return payload


def read_squad(path: str | Path, version: str | None = None) -> list[SquadExample]:
    """All questions of the file, in file order. `version` None takes the file's own `version` field."""
    path = Path(path)
    payload = load_squad_json(path)
    version = version or _file_version(payload)
    if version not in VERSIONS:
        raise UserError(f"{path}: SQuAD version {version!r} is not one of {', '.join(VERSIONS)}.")
    examples = examples_from_data(payload["data"], version, source=str(path))
    if not examples:
        raise UserError(f"{path}: the file has no questions.")
    return examples


def _file_version(payload: dict[str, Any]) -> str:
    version = str(payload.get("version", "1.1")).lstrip("v")
    return "2.0" if version.startswith("2") else "1.1"


def examples_from_data(data: list[Any], version: str, source: str = "<data>") -> list[SquadExample]:
    """Parse the `data` list. v2.0 requires `is_impossible` on each question; v1.1 requires an answer each."""
    examples: list[SquadExample] = []
    seen: set[str] = set()
    for a_index, article in enumerate(data):
        where = f"{source}: article {a_index}"
        paragraphs = _field(article, "paragraphs", list, where)
        title = str(article.get("title", "")) if isinstance(article, dict) else ""
        for p_index, paragraph in enumerate(paragraphs):
            where = f"{source}: article {a_index} paragraph {p_index}"
            context = _field(paragraph, "context", str, where)
            for qa in _field(paragraph, "qas", list, where):
                if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
                    raise UserError(f"{where}: a question without a string 'id'; every question needs one.")
                qid = qa["id"]
                where_q = f"{source}: question {qid}"
                if qid in seen:
                    raise UserError(f"{where_q}: duplicate question id; ids must be unique.")
                seen.add(qid)
                question = _field(qa, "question", str, where_q)
                answers = _answers(qa, "answers", context, where_q)
                impossible = False
                plausible: list[Answer] = []
                if version == "2.0":
                    if isinstance(qa, dict) and "is_impossible" not in qa:
                        raise UserError(
                            f"{where_q}: missing field 'is_impossible', which SQuAD 2.0 needs; for a v1.1 file pass "
                            "--version 1.1."
                        )
                    impossible = _field(qa, "is_impossible", bool, where_q)
                    plausible = _answers(qa, "plausible_answers", context, where_q, required=False)
                    if impossible and answers:
                        raise UserError(f"{where_q}: is_impossible is true but 'answers' is not empty.")
                if version == "1.1" and not answers and qa.get("is_impossible") is True:
                    # a v2.0 file read as 1.1 (`electra squad`'s default): it had asked "is this a v2.0 file?"
                    raise UserError(
                        f"{where_q}: an unanswerable question (is_impossible: true), which SQuAD 1.1 has not; this is "
                        f"a SQuAD 2.0 file: pass {spelled(None, 'version', '--version')} 2.0."
                    )
                if not impossible and not answers:
                    raise UserError(
                        f"{where_q}: no answers; an answerable question needs at least one"
                        + (
                            " (or set is_impossible: true)."
                            if version == "2.0"
                            else " (is this a v2.0 file?)."
                        )
                    )
                examples.append(SquadExample(qid, title, context, question, answers, impossible, plausible))
    return examples


def _field(obj: Any, name: str, kind: type, where: str) -> Any:
    if not isinstance(obj, dict) or name not in obj:
        raise UserError(f"{where}: missing field '{name}'; see the official SQuAD format.")
    value = obj[name]
    if not isinstance(value, kind):
        raise UserError(f"{where}: field '{name}' should be {kind.__name__}, got {type(value).__name__}.")
    return value


def _answers(qa: dict, name: str, context: str, where: str, required: bool = True) -> list[Answer]:
    if name not in qa and not required:
        return []
    answers = []
    for raw in _field(qa, name, list, where):
        text = _field(raw, "text", str, f"{where} ({name})")
        start = _field(raw, "answer_start", int, f"{where} ({name})")
        if name == "answers" and not text.strip():
            # it "matches" anywhere, and training would label the token at answer_start as the answer
            raise UserError(
                f"{where}: an answer whose text is empty or blank (answer_start={start}); give the answer's words, "
                "or remove it (a question with no answer in its context is SQuAD 2.0's is_impossible: true)."
            )
        found = context[start : start + len(text)] if start >= 0 else ""
        if found != text:
            raise UserError(
                f"{where}: answer {text!r} does not match the context at answer_start={start} "
                f"(found {found!r}); fix the offset or the text."
            )
        answers.append(Answer(text, start))
    return answers
