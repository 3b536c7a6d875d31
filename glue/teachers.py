"""Teachers for born-again multi-task distillation: a single-task model's outputs on its own training set.

`electra glue --save-train-logits` writes, per task, OUTPUT/teachers/TASK.json: the best seed's outputs with dropout
off (logits for a classification task, the 0-5 score for STS-B) keyed by example id, and a fingerprint of what
they were computed from (the training file's SHA-256, the tokenizer's vocabulary, the sequence length). The
multi-task student (`electra.glue.multitask`) reads them by id, so an example and its teacher row cannot drift
apart, and refuses a file whose fingerprint is not its own: a teacher from other data would teach other labels.

Ids are the reader's (`train.tsv:LINE`); the swapped pairs MRPC and STS-B also train on ("double unordered") have
their own (`train.tsv:LINE:swapped`) and their own teacher outputs, since a model's output on (B, A) is not its
output on (A, B). The file is JSON: readable, diffable, and never unpickled.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from electra.core.errors import UserError
from electra.core.files import file_sha256, read_json_record, write_json_atomically
from electra.glue.tasks import TaskSpec, task_file

TEACHER_FORMAT = "electra-glue-teacher/1"
TEACHERS_DIR = "teachers"  # OUTPUT/teachers/TASK.json


def tokenizer_digest(tokenizer) -> str:
    """SHA-256 of the tokenizer's class and vocabulary (piece -> id): two tokenizers with the same digest cut text
    into the same ids."""
    vocab = sorted(tokenizer.get_vocab().items())
    lower = getattr(tokenizer, "do_lower_case", None)
    text = json.dumps([type(tokenizer).__name__.removesuffix("Fast"), lower, vocab], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def teacher_fingerprint(spec: TaskSpec, data_dir: Path, tokenizer, max_seq_length: int) -> dict:
    """What a teacher's outputs depend on besides its weights: the training file, the tokenizer and the length."""
    return {
        "train_file": f"{spec.directory}/{spec.train_file}",
        "train_sha256": file_sha256(task_file(data_dir, spec, spec.train_file)),
        "tokenizer_sha256": tokenizer_digest(tokenizer),
        "max_seq_length": int(max_seq_length),
    }


def write_teacher(
    path: Path,
    spec: TaskSpec,
    ids: Sequence[str],
    outputs: Sequence,
    fingerprint: dict,
    model: str,
    seed: int,
) -> None:
    """One task's teacher file: `outputs[i]` (logits, or a score for regression) belongs to example `ids[i]`."""
    if len(ids) != len(outputs):
        raise ValueError(f"{len(outputs)} teacher outputs for {len(ids)} examples")
    rows = {}
    for guid, value in zip(ids, outputs):
        rows[guid] = (
            float(np.asarray(value).reshape(-1)[0]) if spec.is_regression else [float(v) for v in value]
        )
    record = {
        "format": TEACHER_FORMAT,
        "task": spec.name,
        "kind": "score" if spec.is_regression else "logits",
        "labels": list(spec.labels) if spec.labels else None,
        "model": model,
        "seed": seed,
        "fingerprint": fingerprint,
        "rows": rows,
    }
    write_json_atomically(path, record)


@dataclass
class Teacher:
    """A task's teacher outputs, read and checked: `rows[id]` is a float array (logits) or a float (score)."""

    task: str
    path: Path
    kind: str
    rows: dict

    def outputs_for(self, ids: Sequence[str]) -> np.ndarray:
        """The outputs in the order of `ids` ([n, labels] logits or [n] scores). Every id must have a row: a
        student whose training set holds examples the teacher never saw is refused, naming the first."""
        missing = [guid for guid in ids if guid not in self.rows]
        if missing:
            raise UserError(
                f"{self.path}: no teacher output for {len(missing)} of the {len(ids)} {self.task} training examples "
                f"(first: {missing[0]}); it was made with another --max-train-examples or --no-double-unordered: "
                "make it again with this run's settings (electra glue --save-train-logits)."
            )
        return np.asarray([self.rows[guid] for guid in ids], dtype=np.float32)


def find_teacher_files(directories: Sequence[str | Path], tasks: Sequence[str]) -> dict[str, Path]:
    """Each task's teacher file among `directories` (an `electra glue --save-train-logits` output, whose teachers
    are in DIR/teachers/, or a folder of TASK.json files). A task with no teacher, or with one in two folders, is
    refused in one line."""
    found: dict[str, Path] = {}
    for directory in directories:
        directory = Path(directory)
        if not directory.is_dir():
            raise UserError(
                f"--teachers {directory}: not a directory; give an `electra glue --save-train-logits` output."
            )
        for task in tasks:
            for candidate in (directory / TEACHERS_DIR / f"{task}.json", directory / f"{task}.json"):
                if candidate.is_file():
                    if task in found:
                        raise UserError(
                            f"--teachers: two teachers for {task} ({found[task]} and {candidate}); give one folder "
                            "per task."
                        )
                    found[task] = candidate
                    break
    absent = [task for task in tasks if task not in found]
    if absent:
        raise UserError(
            f"--teachers {' '.join(str(d) for d in directories)}: no teacher for {', '.join(absent)}; make one with "
            f"`electra glue --task {','.join(absent)} --save-train-logits --output DIR` and add DIR."
        )
    return found


def read_teacher(path: Path, spec: TaskSpec, fingerprint: dict) -> Teacher:
    """A teacher file, checked against the student's own `fingerprint` (`teacher_fingerprint`): the first part
    that differs is named in one line with the fix."""
    record = read_json_record(path)
    if not record or record.get("format") != TEACHER_FORMAT or not isinstance(record.get("rows"), dict):
        raise UserError(
            f"{path}: not a teacher file `electra glue --save-train-logits` wrote; make it again."
        )
    if record.get("task") != spec.name:
        raise UserError(
            f"{path}: holds the teacher of {record.get('task')}, not of {spec.name}; rename or remake it."
        )
    theirs = record.get("fingerprint") or {}
    remake = f"make the teacher again: electra glue --task {spec.name} --save-train-logits --output DIR"
    if theirs.get("train_sha256") != fingerprint["train_sha256"]:
        raise UserError(
            f"{path}: made from another training file than {fingerprint['train_file']} (SHA-256 "
            f"{str(theirs.get('train_sha256'))[:12]}... vs {fingerprint['train_sha256'][:12]}...); {remake} on "
            "this run's --data-dir."
        )
    if theirs.get("tokenizer_sha256") != fingerprint["tokenizer_sha256"]:
        raise UserError(
            f"{path}: made with another tokenizer than this run's --model; {remake} from this --model."
        )
    if theirs.get("max_seq_length") != fingerprint["max_seq_length"]:
        raise UserError(
            f"{path}: made at --max-seq-length {theirs.get('max_seq_length')}, this run uses "
            f"{fingerprint['max_seq_length']}; {remake} at this length, or use its length."
        )
    kind = "score" if spec.is_regression else "logits"
    if record.get("kind") != kind or (record.get("labels") or None) != (
        list(spec.labels) if spec.labels else None
    ):
        raise UserError(f"{path}: its outputs are not {spec.name}'s ({kind} over {spec.labels}); {remake}.")
    return Teacher(spec.name, path, kind, record["rows"])


def teacher_digests(files: dict[str, Path]) -> dict[str, str]:
    """SHA-256 of each teacher file, for the run record: a resume with other teachers would mix two students."""
    return {task: file_sha256(path) for task, path in sorted(files.items())}
