"""What a GLUE run reads and must agree with, checked before any training: the task files (present, every row
well formed), the seeds and lengths, a `--init-from` fine-tuned from `--model`, and, for a resume, the record of the
model, settings and task files the finished seeds were run with. Then each task's examples, encoded.

Every check here runs before `--overwrite` deletes an earlier run and before a model loads: a long `--task all` run
must not die at task 6 on a file it could have read at the start.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoConfig

from electra.core.errors import UserError
from electra.core.files import file_sha256, read_json_record
from electra.core.run_records import read_run_record
from electra.core.settings import spelled, spelling
from electra.finetune.recipe import check_seeds
from electra.finetune.settings import RESUMABLE_SETTINGS
from electra.glue.data import encode_examples
from electra.glue.settings import FinetuneSettings, GlueInputs
from electra.glue.tasks import TaskSpec, read_examples, swap_pairs, task_file

logger = logging.getLogger(__name__)

glue = spelling(GlueInputs)  # --model on the command line, model in Python


@dataclass
class TaskData:
    spec: TaskSpec
    train: list[dict]
    dev: dict[str, list[dict]]  # result name -> features with labels
    test: dict[str, tuple[list[str], list[dict]]] = field(
        default_factory=dict
    )  # server stem -> (ids, features)
    train_ids: list[str] = field(default_factory=list)  # `train`'s example ids (teachers are keyed by them)


def is_glue_record(path: Path) -> bool | None:
    """Whether the OUTPUT/run.json at `path` is one `electra glue` wrote (None: no such file, an empty one, or
    one that cannot be read, which the resume check reports). Records from before the `command` key existed are
    told by settings only GLUE records."""
    record = read_json_record(path) if path.is_file() else None
    if not record:
        return None
    if "command" in record:
        return record["command"] == "glue"
    return {"model", "double_unordered", "original_off_by_one"} <= record.keys()


# What a checkpoint fine-tuned from --model shares with it: `--init-from`'s encoder is trained with --model's
# tokenizer, length and size settings.
INIT_FROM_SHAPE = ("vocab_size", "hidden_size", "num_hidden_layers", "max_position_embeddings")


def check_init_from(model_dir: str | Path, init_from: str | Path | None) -> None:
    """`init_from` must be a fine-tune of `model_dir` (both resolved), in one line before any work: another
    model's encoder was trained with --model's tokenizer, an IndexError traceback when its vocabulary was smaller,
    and otherwise ran with ids that mean other words, and with the settings recorded for --model's size."""
    if init_from is None:
        return
    model, init = (AutoConfig.from_pretrained(str(d)) for d in (model_dir, init_from))
    for name in INIT_FROM_SHAPE:
        ours, theirs = getattr(model, name, None), getattr(init, name, None)
        if ours != theirs:
            raise UserError(
                f"{glue('init_from')} {init_from}: its {name} is {theirs} where {glue('model')} {model_dir}'s is "
                f"{ours}, so it is not fine-tuned from that model (whose tokenizer and settings are used); give a "
                f"checkpoint fine-tuned from it, or that checkpoint's own base model as {glue('model')}."
            )


def _needed_files(spec: TaskSpec, predict_test: bool) -> list[str]:
    """The files of `spec` a run reads, relative to its task directory."""
    return [spec.train_file, *spec.dev_files.values()] + (
        list(spec.test_files.values()) if predict_test else []
    )


def check_files(specs: list[TaskSpec], data_dir: Path, predict_test: bool) -> None:
    """Fail before any training if a needed file is missing (a long `--task all` run must not die at task 6).
    Where several tasks lack files (`--task all` on a partial download), the message names them all and the
    list of those that are complete: it had named the first, so each fix met the next refusal."""
    missing: dict[str, tuple[Path, str]] = {}  # task -> its first missing file, and that file's GLUE place
    for spec in specs:
        for relative in _needed_files(spec, predict_test):
            path = task_file(data_dir, spec, relative)
            if path.is_dir():
                raise UserError(
                    f"{path} is a directory; task {spec.name} needs a TSV file there (GLUE layout: "
                    f"{spec.directory}/{relative})."
                )
            if not path.is_file() and spec.name not in missing:
                missing[spec.name] = (path, f"{spec.directory}/{relative}")
    if not missing:
        return
    name, (path, place) = next(iter(missing.items()))
    message = f"{path}: file not found; task {name} needs it (GLUE layout: {place})"
    others = [task for task in missing if task != name]
    complete = [spec.name for spec in specs if spec.name not in missing]
    if others:
        message += f"; {', '.join(others)} {'lack' if len(others) > 1 else 'lacks'} files too"
    if complete:
        # named without a flag: `electra glue` takes the list as --task, `electra compare` as --glue-tasks
        message += f"; add the missing files, or run only the complete tasks: {','.join(complete)}"
    raise UserError(message + ".")


def check_task_rows(specs: list[TaskSpec], data_dir: Path, predict_test: bool, skip_malformed: bool) -> None:
    """Read every file the run needs once, before any training, so a malformed row (a ragged line, a label
    outside the task's set, undecodable bytes) is one line at the start: found when its task came up, it ended a
    `--task all` run after the tasks before it had trained, and without --output their results were lost."""
    for spec in specs:
        labelled = [spec.train_file, *spec.dev_files.values()]
        for relative in _needed_files(spec, predict_test):
            path = task_file(data_dir, spec, relative)
            read_examples(path, spec, relative in labelled, skip_malformed, quiet=True)


def check_run_inputs(specs: list[TaskSpec], settings: FinetuneSettings, seeds: list[int]) -> None:
    """The checks of a run's numbers that need the tasks or seeds, made before any work (and before `--overwrite`
    deletes an earlier run): a seed numpy refuses stopped the first run with a ValueError traceback, and a
    `max_seq_length` with no room for text past [CLS] A [SEP] (B [SEP]) trained on special tokens alone, or, for
    a pair task at 1 or 2, left every sequence untruncated without a word."""
    check_seeds(seeds)
    for spec in specs:
        least = min_seq_length(spec)
        if settings.max_seq_length < least:
            layout = "[CLS] A [SEP] B [SEP]" if spec.text_b else "[CLS] A [SEP]"
            raise UserError(
                f"{spelled(FinetuneSettings, 'max_seq_length')} {settings.max_seq_length} leaves no room for text in {spec.name}'s {layout}; "
                f"give at least {least} (the paper uses 128)."
            )


def min_seq_length(spec: TaskSpec) -> int:
    """The shortest sequence that holds a task's special tokens and one piece of each text."""
    return 5 if spec.text_b else 3


def load_task_data(
    spec: TaskSpec, data_dir: Path, tokenizer, settings: FinetuneSettings, predict_test: bool = False
) -> TaskData:
    def read(relative: str, labelled: bool):
        return read_examples(task_file(data_dir, spec, relative), spec, labelled, settings.skip_malformed)

    train = read(spec.train_file, True)
    if settings.max_train_examples and settings.max_train_examples < len(train):
        train = random.Random(0).sample(train, settings.max_train_examples)
    if spec.symmetric and settings.double_unordered:
        train = train + swap_pairs(train)
    encode = lambda examples: encode_examples(examples, tokenizer, spec, settings.max_seq_length)  # noqa: E731
    dev = {name: encode(read(relative, True)) for name, relative in spec.dev_files.items()}
    test = {}
    if predict_test:
        for stem, relative in spec.test_files.items():
            examples = read(relative, False)
            test[stem] = ([ex.guid for ex in examples], encode(examples))
    train_features = encode(train)
    _warn_if_mostly_unknown(train_features, tokenizer, spec)
    return TaskData(spec, train_features, dev, test, [ex.guid for ex in train])


def _warn_if_mostly_unknown(features: list[dict], tokenizer, spec: TaskSpec) -> None:
    """A tokenizer whose vocabulary failed to load maps every word to [UNK]; training then silently learns the
    majority class. Say so instead."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return
    sample = [i for f in features[:500] for i in f["input_ids"][1:-1]]
    if sample and sum(i == unk for i in sample) > 0.5 * len(sample):
        logger.warning(
            "%s: %.0f%% of the tokens are %s: the checkpoint's tokenizer (vocabulary of %d) does not cover this text",
            spec.name,
            100 * sum(i == unk for i in sample) / len(sample),
            tokenizer.unk_token,
            len(tokenizer),
        )


DATA_RECORD = "data.json"  # OUTPUT/runs/TASK/data.json: the SHA-256 of each task file the task's seeds read


def task_data_fingerprints(spec: TaskSpec, data_dir: Path, predict_test: bool = False) -> dict[str, str]:
    """SHA-256 of each file of `spec` a run reads, by its place in the GLUE layout (so the same files under
    another --data-dir still match): what tells a finished result from one made on other data."""
    return {
        os.path.normpath(f"{spec.directory}/{relative}"): file_sha256(task_file(data_dir, spec, relative))
        for relative in _needed_files(spec, predict_test)
    }


def check_task_data(
    output_dir: Path, specs: list[TaskSpec], data_dir: Path, predict_test: bool, resume: bool
) -> dict[str, dict[str, str]]:
    """Per task, the fingerprints of its files to record in OUTPUT/runs/TASK/data.json; a `resume` first compares
    them with the record there and refuses, in one line before any work, a task file that has changed since.

    Without this, a resume after editing a dev or train file (or pointing --data-dir at another copy) reused the
    finished seeds' numbers from the old files beside new seeds' from the new ones, one median over both, and
    continued an interrupted seed's checkpoint on other data. A file only one side read (test files first asked
    for at a resume) is not compared; the record keeps both."""
    records = {}
    for spec in specs:
        current = task_data_fingerprints(spec, data_dir, predict_test)
        where = output_dir / "runs" / spec.name / DATA_RECORD
        saved = read_run_record(where) if resume else None
        if saved is not None:
            changed = [name for name in current if name in saved and saved[name] != current[name]]
            if changed:
                path = task_file(data_dir, spec, os.path.relpath(changed[0], spec.directory))
                raise UserError(
                    f"{glue('resume')}: {path} is not the file the {spec.name} seeds in {output_dir} were run on "
                    f"(its SHA-256 differs from {where}'s); restore that file, use another {glue('output_dir')}, or "
                    f"drop {glue('resume')} and pass {glue('overwrite')} to start over."
                )
            current = {**saved, **current}
        records[spec.name] = current
    return records


def resume_record(model_dir: str | Path, init_from: str | Path | None, settings: dict) -> dict:
    """What a resumed GLUE run must share with the run it continues: the model, `--init-from` (as absolute paths,
    so a relative spelling from another folder still matches) and every setting that changes what is learnt
    (`settings` as resolved for the model's size)."""
    return {
        "command": "glue",  # what tells this output from another command's (`electra.glue.cli.refuse_foreign_run`)
        "model": str(Path(model_dir).resolve()),
        "init_from": str(Path(init_from).resolve()) if init_from else None,
        **{name: value for name, value in settings.items() if name not in RESUMABLE_SETTINGS},
    }


def record_in_results(results: dict) -> dict | None:
    """The resume record of an output from before OUTPUT/run.json existed, from its results.json."""
    if not isinstance(results.get("settings"), dict) or "model" not in results:
        return None  # nothing recorded to compare with
    return resume_record(results["model"], results.get("init_from"), results["settings"])
