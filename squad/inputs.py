"""What a SQuAD run reads and must agree with, checked before any work and before `--overwrite` deletes an earlier
run: the model directory and its config, the SQuAD files of the version asked for (every question parsed), a
`--cache-dir` that can be written, and the model's limits (its tokenizer against its embeddings, `--max-seq-length`
cut to its positions), and the tokenizer (`load_tokenizer`: a local directory and a fast tokenizer, for the
character offsets). `electra squad` and `electra.finetune_squad` ask here first; `electra.squad.train` trusts what
passed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.core.overwrite import refuse_unusable_output
from electra.core.settings import spelling
from electra.data.tokenization import require_tokenizer_fits
from electra.export.layout import finetune_dir, read_model_config, refuse_run_folder
from electra.squad.data import SquadExample, read_squad
from electra.squad.settings import SquadSettings

squad = spelling(SquadSettings)  # --model on the command line, model in Python


def check_inputs(settings: SquadSettings) -> dict[str, list[SquadExample]]:
    """What can be checked before any work (and before `--overwrite` deletes an earlier run; that there is
    something to do, the settings checked as they were made): the model directory exists, and the data files are
    SQuAD files of the version asked for. Returns the questions read ("train", "eval"), for
    `electra.squad.train.finetune` to use instead of parsing the files again."""
    refuse_run_folder(settings.model, squad("model"), "fine-tune it")
    model_dir = finetune_dir(settings.model) if settings.train is not None else Path(settings.model)
    if read_model_config(model_dir) is None:
        raise UserError(
            f"{model_dir}/config.json: not found; {squad('model')} must be a checkpoint directory (a pretraining "
            f"run, its discriminator/, or a fine-tuned SQuAD model for {squad('eval')} alone)."
        )
    # a file, or /proc/x, had failed in a traceback once the features were built
    if settings.cache_dir is not None:
        refuse_unusable_output(settings.cache_dir, option=squad("cache_dir"))
    # every question parsed: a bad --eval must not wait for training
    return {
        split: read_squad(path, settings.version)
        for split, path in (("train", settings.train), ("eval", settings.eval))
        if path is not None
    }


def check_model_fits(settings: SquadSettings) -> None:
    """The model's limits, met before any work and before `--overwrite` deletes an earlier run (they had been met
    once the model loaded, with the earlier run deleted and a run.json written for a run that never started): a
    tokenizer with more pieces than the model's embeddings, and a `--max-seq-length` that, cut to the model's
    positions, leaves no room for context after the question. Read from config.json; a config that does not say
    is left to the model's loading."""
    model_dir = finetune_dir(settings.model) if settings.train is not None else Path(settings.model)
    config = read_json_record(model_dir / "config.json") or {}
    rows, positions = config.get("vocab_size"), config.get("max_position_embeddings")
    tokenizer_dir = Path(settings.tokenizer) if settings.tokenizer else finetune_dir(settings.model)
    tokenizer = load_tokenizer(tokenizer_dir)  # a hub name, or no tokenizer at all, is refused here too
    if isinstance(rows, int):
        require_tokenizer_fits(tokenizer, rows, tokenizer_dir)
    if isinstance(positions, int) and settings.max_seq_length > positions:
        try:
            replace(settings.feature_settings(), max_seq_length=positions)
        except UserError:
            raise UserError(
                f"{model_dir}: the model takes {positions} positions, so {squad('max_seq_length')} "
                f"{settings.max_seq_length} is cut to {positions}, which leaves no room for context after a "
                f"question of up to {settings.max_query_length} tokens; give {squad('max_query_length')} "
                f"{positions - 4} or less."
            ) from None


def load_tokenizer(model_dir: str | Path) -> Any:
    """The checkpoint's fast tokenizer (offsets are needed for span mapping); a local directory only (nothing is
    fetched from a hub: this library never reaches the network at run time)."""
    if not Path(model_dir).is_dir():
        raise UserError(
            f"{model_dir}: not a local directory; {squad('tokenizer')} (and {squad('model')}) must name a "
            "directory holding tokenizer.json or vocab.txt (hub names are not fetched)."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{model_dir}: no tokenizer could be loaded ({exc.__class__.__name__}); save the tokenizer with the "
            "checkpoint (tokenizer.save_pretrained(dir))."
        ) from exc
    if not tokenizer.is_fast:
        raise UserError(f"{model_dir}: the tokenizer is not a fast tokenizer; SQuAD needs character offsets.")
    return tokenizer
