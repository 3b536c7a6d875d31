"""The model a fine-tuning command starts from: a folder resolved to the checkpoint it names, and that checkpoint's
bare encoder."""

from __future__ import annotations

from pathlib import Path

from torch import nn
from transformers import AutoModel

from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.core.run_records import RUN_RECORD
from electra.core.settings import spelled
from electra.export.layout import (
    MANIFEST,
    finetune_dir,
    load_pretrained,
    read_model_config,
    refuse_run_folder,
)

# Where fine-tuning commands keep the models they save, relative to their output folder: GLUE's --save-best (one
# folder per task, or the multi-task student) and `electra tag`'s best seed.
SAVED_MODELS = ("checkpoints/*/config.json", "model/config.json")


def resolve_model_dir(path: str | Path, option: str | None = None) -> Path:
    """A Hugging Face checkpoint directory, or a pretraining run directory (its export.json names the model to
    fine-tune: the discriminator, or the MLM model for the MLM baseline). `option` is the flag or argument that
    named it (default: --model, or `model` in Python).

    A fine-tuning command's output folder is refused in one line that lists the models it saved; any other run's
    folder is named for what it is (`electra.export.layout.refuse_run_folder`)."""
    path, option = Path(path), option or spelled(None, "model", "--model")
    if path.is_file():
        raise UserError(
            f"{option} {path} is a file; give the checkpoint's directory (e.g. RUN/discriminator)."
        )
    _refuse_finetune_output(path, option)
    refuse_run_folder(path, option, "fine-tune it")
    model_dir = finetune_dir(path)
    if read_model_config(model_dir) is not None:
        return model_dir
    raise UserError(
        f"{model_dir}/config.json: not found; {option} must be a Hugging Face checkpoint directory "
        "(e.g. RUN/discriminator) or a pretraining run directory with export.json."
    )


def _refuse_finetune_output(path: Path, option: str) -> None:
    """A fine-tuning output given where a model is expected, answered with the models it saved: the folder holds
    runs and results, and its models sit one or two levels down."""
    if not (path / RUN_RECORD).is_file() or (path / MANIFEST).is_file():
        return
    command = (read_json_record(path / RUN_RECORD) or {}).get("command")
    saved = sorted(str(found.parent) for pattern in SAVED_MODELS for found in path.glob(pattern))
    if isinstance(command, str) and saved:
        raise UserError(
            f"{option} {path} is an `electra {command}` output, not a model; give one of the models it saved: "
            f"{', '.join(saved)}."
        )


def load_encoder(model_dir: str | Path) -> nn.Module:
    """The bare encoder (ElectraModel, BertModel, ...) of a local checkpoint: pretraining heads are dropped."""
    return load_pretrained(AutoModel, model_dir)
