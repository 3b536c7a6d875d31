"""A pretraining run's folder: what the run reads and writes (`RunInputs`), the guard that never writes over a
finished run or a user's files, the record a `--resume` must match (corpus, vocabulary, processes, stream layout),
and what `--overwrite` may delete.

Why one module: every rule about the output folder is read before any work starts, and a newcomer looking for
"why was my folder refused" finds them together.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from electra.core.config import PretrainConfig, load_saved_config
from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.core.output_lock import refuse_live_run
from electra.core.overwrite import refuse_file_as_directory, refuse_foreign_directory
from electra.core.run_inputs import RunInputs
from electra.core.run_records import RUN_RECORD, refuse_changed_settings, write_run_record
from electra.core.settings import spelled, spelling
from electra.data.corpus import read_corpus_bytes
from electra.data.packing import corpus_fingerprint, tokenizer_fingerprint
from electra.data.streaming import LEDGER_FOLDER, stream_window_chars
from electra.data.tokenization import load_or_train_tokenizer
from electra.export.checkpoint import latest_checkpoint, latest_intact_checkpoint
from electra.export.layout import save_tokenizer

# Settings that may change between the interrupted run and its resumption without changing the result.
RESUMABLE_CHANGES = {
    "log_every",
    "save_every",
    "keep_checkpoints",
    "dataloader_workers",
    "flops_budget",
    "time_budget_minutes",
    "eval_every",
    "extra",
}

arg = spelling(RunInputs)  # --resume on the command line, resume=True in Python
cfg = spelling(PretrainConfig)


# What a pretraining run writes into its directory (`--overwrite` removes these, in a run's own directory only).
RUN_FILES = (
    "checkpoints",
    "logs",
    "metrics.csv",
    "summary.json",
    "run.json",
    "config.json",
    "tokenizer",
    "curves.png",
    "export.json",
    "discriminator",
    "generator",
    "mlm",
    "README.md",  # the export's model card
    "wandb",  # --report-to wandb's local files
    LEDGER_FOLDER,  # --streaming's examples per window
)


# Inside the folders a run writes, the names it writes there (fnmatch patterns of the path below the folder; "*"
# crosses folders). Anything else in them was put there by someone else, and --overwrite keeps it.
_EXPORT_NAMES = (
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "README.md",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "added_tokens.json",
    "generation_config.json",
    "two_tower_config.json",
)


_WRITTEN_INSIDE = {
    "checkpoints": ("latest", "step-*", ".*"),
    "logs": ("events.out.tfevents.*", "*/events.out.tfevents.*"),
    "tokenizer": _EXPORT_NAMES,
    "discriminator": _EXPORT_NAMES,
    "generator": _EXPORT_NAMES,
    "mlm": _EXPORT_NAMES,
    "wandb": ("*",),
    LEDGER_FOLDER: ("slot-*-of-*.txt",),
}


def check_output_dir(
    config: PretrainConfig,
    output_dir: Path,
    checkpoints_dir: Path,
    resume: bool,
    overwrite: bool = False,
    sized: bool = False,
) -> Path | None:
    refuse_file_as_directory(output_dir)
    refuse_live_run(output_dir)  # before anything there is deleted, or taken for a checkpoint to resume
    existing = latest_checkpoint(checkpoints_dir)
    if not resume:
        if not holds_own_run(output_dir):  # new, empty, or the user's: written beside, never over
            refuse_foreign_directory(output_dir, overwrite, produced=RUN_FILES)
            return None
        ours = [name for name in RUN_FILES if (output_dir / name).exists()]
        holds_run = existing is not None or (output_dir / "summary.json").exists()
        if holds_run and not overwrite:
            raise UserError(
                f"{output_dir} already holds a run; pass {arg('resume')} to continue it, {arg('overwrite')} to "
                f"delete that run's files ({', '.join(ours)}; nothing else) and start over, or choose another "
                f"{arg('output_dir')}."
            )
        # A run killed before its first checkpoint, or --overwrite: this command's files go, nothing else.
        strangers = [path for name in ours for path in files_not_written_by_a_run(output_dir / name)]
        if strangers:
            listing = ", ".join(str(path.relative_to(output_dir)) for path in strangers[:3])
            raise UserError(
                f"{output_dir}: {arg('overwrite')} would delete {listing}{', ...' if len(strangers) > 3 else ''}, which no "
                "run writes; move them out of the run's folders first."
            )
        for name in ours:
            target = output_dir / name
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        return None
    if existing is None:
        raise UserError(f"{arg('resume')}: {checkpoints_dir} has no complete checkpoint to resume from.")
    existing = latest_intact_checkpoint(checkpoints_dir)
    saved = load_saved_config(output_dir / "config.json")
    saved.vocab_size = config.vocab_size
    if sized:  # derived from the budget when the run started: take them as they were
        config.max_steps, config.warmup_steps = saved.max_steps, saved.warmup_steps
    refuse_changed_settings(
        output_dir / "config.json",
        asdict(saved),
        asdict(config),
        f"rerun with the saved settings (`{spelled(None, 'config_file', '--config')} {output_dir / 'config.json'} "
        f"{arg('resume')}` repeats them all) or start a new {arg('output_dir')}.",
        ignore=RESUMABLE_CHANGES | {"vocab_size"},
    )
    return existing


def holds_own_run(output_dir: Path) -> bool:
    """True when `output_dir` was started by `electra pretrain`: its run record is there and is one of ours.

    Only then are RUN_FILES names in it this command's own, and `--overwrite` may delete them; a user's
    `config.json` or `logs/` in a folder of their own never is."""
    try:
        record = json.loads((output_dir / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"corpus_sample", "tokenizer_sha256", "world_size"} <= record.keys()


def files_not_written_by_a_run(path: Path) -> list[Path]:
    """The files under one of RUN_FILES's folders that a run does not write there (a user's notes in
    discriminator/, say): `--overwrite` deletes the folder, so it must not hold them."""
    patterns = _WRITTEN_INSIDE.get(path.name)
    if patterns is None or not path.is_dir():
        return []
    return sorted(
        file
        for file in path.rglob("*")
        if not file.is_dir()
        and not any(fnmatch.fnmatchcase(file.relative_to(path).as_posix(), p) for p in patterns)
    )


def check_resume(
    output_dir: Path, inputs: RunInputs, world: int, config: PretrainConfig, workers: int
) -> None:
    """Refuse to continue a run on another corpus, vocabulary, number of processes or stream layout (one line,
    before any work): token ids would change meaning, or every process would read other data than the checkpoint
    expects. `workers`: each process's data-loader workers (a `--streaming` run's layout)."""
    streaming = config.streaming
    path = output_dir / RUN_RECORD
    if not path.is_file():
        return  # a run from before the record existed
    record = read_json_record(path)
    if record is None or not {"world_size", "corpus_sample", "tokenizer_sha256"} <= record.keys():
        raise UserError(
            f"{arg('resume')}: {path} is damaged (not the run record this command writes), so this resume cannot "
            f"be checked against the corpus and vocabulary {output_dir} trained on; delete it to resume unchecked "
            f"(with that corpus), or start a new {arg('output_dir')}."
        )
    if record["world_size"] != world and not inputs.elastic:
        raise UserError(
            f"{arg('resume')}: {output_dir} was trained with {record['world_size']} process(es), this launch has "
            f"{world}; resume with {record['world_size']} (accelerate launch --num_processes "
            f"{record['world_size']}), or add {arg('elastic')} to continue on these with the same global batch "
            "(not bit for bit)."
        )
    if record["world_size"] != world and streaming:
        raise UserError(
            f"{arg('elastic')}: {output_dir} streams its examples ({cfg('streaming')}), and a stream's place in the "
            f"corpus depends on the number of processes; resume it with {record['world_size']} process(es)."
        )
    if "stream" in record or streaming:
        saved_layout, layout = record.get("stream"), stream_layout(workers) if streaming else None
        if saved_layout != layout:
            cached = f"a cached run (no {cfg('streaming')})"
            raise UserError(
                f"{arg('resume')}: {output_dir} streamed its examples as {saved_layout or cached}, this launch as "
                f"{layout or 'a cached run'}; resume with the same {cfg('streaming')}, dataloader_workers and "
                f"ELECTRA_STREAM_WINDOW, or start a new {arg('output_dir')}."
            )
    if corpus_sample(inputs.corpus) != record["corpus_sample"]:
        raise UserError(
            f"{arg('resume')}: the corpus {inputs.corpus} is not the one {output_dir} trained on "
            f"({record['corpus']}, unchanged); resume with that corpus or start a new {arg('output_dir')}."
        )
    if inputs.vocab is not None:
        given = load_or_train_tokenizer(inputs.vocab, None, 1, config.lowercase, text_form=config.text_form)
        if tokenizer_sha256(given) != record["tokenizer_sha256"]:
            raise UserError(
                f"{arg('resume')}: {arg('vocab')} {inputs.vocab} is not the vocabulary {output_dir} trained with "
                f"({output_dir / 'tokenizer'}); drop {arg('vocab')} to use the run's own."
            )


def resumed_layout(output_dir: Path, config: PretrainConfig, world: int) -> tuple[int, int]:
    """(the accumulation a resume on `world` processes runs with, the processes the run had before).

    On the run's own number of processes: its own accumulation (the run record keeps the one an elastic resume
    chose). On another (`--elastic`, which `check_resume` required): the accumulation that keeps both the
    micro-batch and the global batch (`train_batch_size`), or one line refusing when `world` cannot share the
    batch out so."""
    record = read_json_record(output_dir / RUN_RECORD) or {}
    before = record.get("world_size", world)
    accumulation = record.get("gradient_accumulation_steps", config.gradient_accumulation_steps)
    if before == world:
        return accumulation, before
    batch = config.train_batch_size
    micro = batch // (before * accumulation)
    if batch % (micro * world):
        fits = [n for n in range(1, batch // micro + 1) if (batch // micro) % n == 0]
        raise UserError(
            f"{arg('elastic')}: the global batch {batch} ({before} processes x {micro} x {accumulation} accumulation) "
            f"cannot be shared out over {world} processes with micro-batches of {micro}; resume on "
            f"{', '.join(map(str, fits))} processes."
        )
    return batch // (micro * world), before


def record_elastic_resume(output_dir: Path, world: int, accumulation: int) -> None:
    """After an elastic resume: the run record says its new processes and accumulation, so the next plain
    `--resume` on them continues it as this one does."""
    record = read_json_record(output_dir / RUN_RECORD) or {}
    record.update(world_size=world, gradient_accumulation_steps=accumulation)
    write_run_record(output_dir / RUN_RECORD, record)


def record_new_run(
    config: PretrainConfig, inputs: RunInputs, tokenizer: Any, world: int, workers: int
) -> None:
    """A new run's config, tokenizer and run.json (corpus, vocabulary and processes a --resume must match)."""
    output_dir = inputs.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    config.save(output_dir / "config.json")
    save_tokenizer(tokenizer, output_dir / "tokenizer", config)
    record = {"corpus": str(Path(inputs.corpus).resolve()), "corpus_sample": corpus_sample(inputs.corpus)}
    record.update(tokenizer_sha256=tokenizer_sha256(tokenizer), world_size=world)
    if config.streaming:  # the streams' layout: a resume must read the same windows in the same slots
        record["stream"] = stream_layout(workers)
    write_run_record(output_dir / RUN_RECORD, record)


def stream_layout(workers: int) -> dict[str, int]:
    """What decides which examples each stream of a `--streaming` run reads, beside processes and corpus: the
    data-loader workers of each process and the window size."""
    return {"workers": workers, "window_chars": stream_window_chars()}


def corpus_sample(corpus: str | Path) -> str:
    """A digest of the corpus that changes when it does: each file's name, size and first 64 KiB."""
    digest = hashlib.sha256()
    for name, size, _ in corpus_fingerprint(corpus):
        digest.update(f"{Path(name).name}\0{size}\0".encode())
        digest.update(read_corpus_bytes(Path(name), 65536))
    return digest.hexdigest()


def tokenizer_sha256(tokenizer: Any) -> str:
    return tokenizer_fingerprint(tokenizer)


def how_to_go_on(stop_reason: str, output_dir: Path) -> str:
    """What trains a finished run further. Its schedule decayed to zero at max_steps, which a resume must keep
    (`RESUMABLE_CHANGES`), so only a budget can be raised; past max_steps it is continued pretraining."""
    budget = {"flops_budget": "flops_budget", "time_budget": "time_budget_minutes"}.get(stop_reason)
    if budget is not None:
        return f"raise {cfg(budget)} to train further"
    return (
        f"its schedule ends at max_steps, which a resume keeps; to train further, continue from it with "
        f"{cfg('init_from')} {output_dir} and a new {arg('output_dir')}"
    )
