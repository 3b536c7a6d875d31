"""What a resumed TLM or TARTAN run must share with the run it continues, and the refusal of one that does not."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from electra.core.config import PretrainConfig, load_saved_config
from electra.core.files import file_sha256
from electra.core.run_records import INPUT_DIGESTS, check_run_record, refuse_changed_settings, resume_fix
from electra.tlm.settings import TLMSettings
from electra.tlm.task_data import corpus_of
from electra.training.run_folder import RESUMABLE_CHANGES, corpus_sample

# Settings that only change where and how a run is watched or saved, not what it learns: a resume may change them.
RESUMABLE_SETTINGS = frozenset({"out", "progress", "save_every", "resume", "cache_dir", "eval_batch_size"})
_PATH_SETTINGS = ("task_train", "task_dev", "task_test", "retrieved", "config_file", "vocab", "init_from")
_WHOLE_FILES = ("task_train", "task_dev", "task_test", "config_file", "vocab")  # small: hashed whole


def resume_record(settings: TLMSettings) -> dict[str, Any]:
    """The settings a resumed run must share with the run it continues (files as absolute paths, so a relative
    spelling from another folder still matches), and what its input files held (`input_digests`)."""
    record = {name: value for name, value in asdict(settings).items() if name not in RESUMABLE_SETTINGS}
    # what tells this output (its classifier in OUT/model) from a model (`electra.export.layout.refuse_run_folder`)
    record["command"] = "tlm train" if settings.weighting == "tlm" else "tartan"
    for name in _PATH_SETTINGS:
        if record.get(name):
            record[name] = str(Path(record[name]).resolve())
    return record | {INPUT_DIGESTS: input_digests(settings)}


def input_digests(settings: TLMSettings) -> dict[str, str]:
    """A digest of each input file's contents. The same path can hold another file by a resume (a task file
    relabelled, a retrieval redone into the same folder), and a run continued on it would mix two datasets under
    one results.json. Task files, the config and a vocabulary file are hashed whole; the retrieved corpus, which
    can be gigabytes, by `corpus_sample` (each file's name, size and first 64 KiB), as pretraining's resume does."""
    digests = {}
    for name in _WHOLE_FILES:
        path = getattr(settings, name)
        if path and Path(path).is_file():
            digests[name] = file_sha256(path)
    if settings.retrieved and Path(settings.retrieved).exists():
        digests["retrieved"] = corpus_sample(corpus_of(settings.retrieved))
    return digests


def check_resume(out: Path, record: dict[str, Any], config: PretrainConfig) -> None:
    """Refuse (one line, before anything loads) a `resume` under other settings, other input contents or another
    model shape: its checkpoints would load into a model of another shape (a traceback), or be continued, and
    results.json labelled, under settings or data that did not produce them. OUT/config.json, the model's, is
    compared too (it is all a run without OUT/run.json has)."""
    check_run_record(out, record)
    if (out / "config.json").is_file():
        model = asdict(load_saved_config(out / "config.json"))
        ignore = RESUMABLE_CHANGES | {"vocab_size"}  # the vocabulary's size is the saved tokenizer's
        refuse_changed_settings(out / "config.json", model, asdict(config), resume_fix(), ignore)
