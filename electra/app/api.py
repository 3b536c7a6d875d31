"""The public Python API: what `import electra` offers (see README, "From Python").

    import electra

    config = electra.build_config("tiny", overrides={"max_steps": 200})
    run = electra.pretrain(config, output_dir="runs/tiny")            # embedded corpus unless corpus=...
    glue = electra.finetune_glue("runs/tiny", tasks=["sst2"], data_dir="glue_data")
    scorer = electra.load_scorer("runs/tiny")                         # the method its objective declares
    print(scorer.sentence_plls(["A sentence to score."]))

New objectives subclass `electra.Objective` and register with `@electra.register_objective`.
"""

from __future__ import annotations

import contextlib
import copy
import random
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.core.config import PretrainConfig
from electra.core.config_files import load_config_file
from electra.core.errors import ElectraWarning, UserError
from electra.core.overwrite import refuse_unusable_output
from electra.core.run_inputs import RunInputs, check_run_request
from electra.core.settings import coerce_value, python_spelling, settings_from
from electra.data.embedded_corpus import ensure_embedded_corpus
from electra.export.layout import Export, finetune_dir
from electra.export.layout import read_export as _read_export
from electra.glue.cli import prepare_output as _prepare_glue_output
from electra.glue.finetune import run_glue
from electra.glue.inputs import check_run_inputs
from electra.glue.settings import FinetuneSettings
from electra.glue.tasks import parse_task_list
from electra.objectives import (
    Objective,
    check_config,
    flop_report,
    get_objective,
    objective_names,
    register_objective,
)
from electra.objectives import build_config as _build_config
from electra.pll.scoring import Scorer
from electra.pll.scoring import load_scorer as _load_scorer
from electra.squad.cli import prepare_output as _prepare_squad_output
from electra.squad.settings import SquadSettings
from electra.squad.train import finetune as _finetune_squad
from electra.training.continued import continued_settings
from electra.training.model import PretrainingModel, build_pretraining_model
from electra.training.pretraining import PretrainResult
from electra.training.pretraining import pretrain as _pretrain

__all__ = [
    "Export",
    "Objective",
    "PretrainingModel",
    "PretrainResult",
    "Scorer",
    "build_config",
    "build_pretraining_model",
    "finetune_dir",
    "finetune_glue",
    "finetune_squad",
    "flop_report",
    "get_objective",
    "load_scorer",
    "objective_names",
    "pretrain",
    "read_export",
    "register_objective",
]


def build_config(
    size: str | None = None,
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> PretrainConfig:
    """Size preset < the objective's defaults < config file < `overrides` (later wins), validated; `size` None is
    tiny. Values are coerced as `--set` does ("200" for max_steps is 200; 2.5 is refused).

    With `init_from` in `overrides` (continued pretraining), the config takes that checkpoint's shape and vocabulary
    size, and `size=None` the recipe of the preset it was built as, as `electra pretrain --init-from` does."""
    with python_spelling():
        from_file = load_config_file(config_file) if config_file is not None else {}
        given = overrides if isinstance(overrides, Mapping) else {}
        init_from = given.get("init_from") or from_file.get("init_from")
        if init_from:  # the file's shape fields are checked against the checkpoint, as `overrides` are
            size, overrides, note = continued_settings(init_from, {**from_file, **given}, size)
            if note:
                warnings.warn(note, ElectraWarning, stacklevel=2)
        config = _build_config(size or "tiny", config_file, overrides)
    setattr(config, _CHECKED, _values(config))  # `pretrain` checks it again only if a field changes
    return config


_CHECKED = "_electra_checked_values"  # the field values `build_config` checked, kept on the config


def _values(config: PretrainConfig) -> dict[str, Any]:
    return {spec.name: getattr(config, spec.name) for spec in fields(config)}


def pretrain(
    config: PretrainConfig, output_dir: str | Path, corpus: str | Path | None = None, **inputs: Any
) -> PretrainResult:
    """Pretrain `config` (from `electra.build_config`) into `output_dir` (a new directory, or an interrupted run
    with `resume=True`).

    `corpus` is a text file, a directory, JSONL or a saved dataset; None trains on the embedded corpus. The other
    keywords are `electra.core.run_inputs.RunInputs` fields, coerced as `build_config` coerces its overrides:

    - vocab: a BERT-style vocab.txt (or a tokenizer directory); default: train WordPiece on the corpus
    - cache_dir: where tokenizers and packed examples are cached (default ~/.cache/electra)
    - num_proc: processes that build the examples (at least 1)
    - resume: continue the run in `output_dir` from its latest checkpoint, under the settings it saved
    - elastic: with `resume`, continue on another number of processes, keeping the global batch and the order of
      the examples (not bit for bit)
    - overwrite: delete the run in `output_dir` (its own files only) and start over; not with `resume`
    - size_to_budget: fit max_steps (and warmup) to `config.flops_budget`
    - keep_warmup: with `size_to_budget`, keep the config's warmup_steps
    - doc_boundary: what separates documents: "auto", "file" or "blank"
    - strict_utf8: refuse non-UTF-8 files instead of reading them as Latin-1
    - text_field: the field holding the text in JSON lines, Parquet and saved datasets ("text")

    A config `build_config` made is checked once, there; fields set after it (`config.max_steps = 500`) are
    coerced and checked here, as are configs made otherwise. The caller's config is left as it was, and so are
    the random generators of torch, numpy and `random`."""
    if not isinstance(config, PretrainConfig):
        raise TypeError(
            f"config must be a PretrainConfig, not {type(config).__name__}; make one with "
            "electra.build_config(size, overrides={...})."
        )
    with python_spelling(), _keeping_random_state():
        if getattr(config, _CHECKED, None) != _values(config):
            # a field assigned after build_config is coerced and checked here, before the paths are looked at:
            # else max_steps = 2.5 would train and be recorded in config.json, and "3" fail deep inside the run.
            config = settings_from(type(config), _values(config), "config")
            check_config(config)
        else:  # the run sizes and records its own copy; the caller's stays as it was
            config = copy.deepcopy(config)
        run = settings_from(RunInputs, {"corpus": "", "output_dir": "", **inputs}, "electra.pretrain")
        check_run_request(
            corpus=corpus,
            vocab=run.vocab,
            num_proc=run.num_proc,
            resume=run.resume,
            overwrite=run.overwrite,
            elastic=run.elastic,
            init_from=config.init_from,
            generator_from=config.generator_from,
        )
        refuse_unusable_output(output_dir)
        source = str(corpus) if corpus is not None else str(ensure_embedded_corpus())
        return _pretrain(config, replace(run, corpus=source, output_dir=Path(output_dir)))


@contextlib.contextmanager
def _keeping_random_state() -> Iterator[None]:
    """A run seeds the random generators of torch, numpy and `random` (`set_seed`); they are restored when it
    ends, else a notebook's own draws after the call (a data shuffle, a sample) would come out the same on
    every pass of a loop around it. A GPU's is restored only when CUDA was already in use: saving its state
    would start CUDA on every device. The run's own results never depend on them."""
    python, numpy_state = random.getstate(), np.random.get_state()
    devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(numpy_state)


def _flag(name: str, value: Any, source: str) -> bool:
    """A keyword that is a switch, coerced as a boolean setting is: "no" must not read as true (it is a non-empty
    string), or `overwrite="no"` would delete an earlier run."""
    return coerce_value(name, value, "bool", source)


def read_export(path: str | Path) -> Export | None:
    """The manifest of a run's export (`path` is the run, or one of its parts); None for a directory that is not
    one. A path that does not exist is refused: a mistyped run must not read as "not an export"."""
    if not Path(path).exists():
        raise UserError(f"{path} does not exist; give the output_dir of a pretraining run.")
    return _read_export(path)


def load_scorer(
    model_dir: str | Path,
    method: str = "auto",
    device: str = "auto",
    batch_size: int = 64,
    within_word: str = "none",
) -> Scorer:
    """The PLL scorer of a run's export, one of its parts, or a local `transformers` masked-LM directory:
    `method="auto"` takes what the export's objective declares (`electra.pll.scoring.load_scorer`). `device` is "auto",
    "cpu", "cuda" or "cuda:N"; `batch_size` (at least 1) is coerced as `build_config` coerces its overrides."""
    with python_spelling():
        batch_size = coerce_value("batch_size", batch_size, "int", "electra.load_scorer")
        return _load_scorer(model_dir, method, device, batch_size, within_word)


def finetune_glue(
    model: str | Path,
    tasks: str | Sequence[str],
    data_dir: str | Path | None = None,
    seeds: Sequence[int] = (1,),
    output_dir: str | Path | None = None,
    init_from: str | Path | None = None,
    predict_test: bool = False,
    save_best: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    **settings: Any,
) -> dict:
    """Fine-tune an export (or any local ELECTRA/BERT checkpoint) on GLUE tasks, as `electra glue` does; returns
    the results dict.

    `tasks` is a list of names or one string as `--task` takes it ("rte", "sst2,mrpc", "all"); `data_dir` None
    reads $GLUE_DIR. An `output_dir` holding an earlier run's results is refused unless `resume=True` (continue
    it) or `overwrite=True` (delete that run's files first; a user's other files stay). `settings` are
    `electra.glue.finetune.FinetuneSettings` fields (learning_rate, epochs, max_steps, ...), coerced to their types, as
    are `seeds` and the switches (predict_test, save_best, resume, overwrite). The random generators of torch,
    numpy and `random` are left as they were."""
    source = "electra.finetune_glue"
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise TypeError(f"{source}: seeds is a list of seeds (e.g. [1, 2, 3]), not {type(seeds).__name__}.")
    with python_spelling(), _keeping_random_state():
        seeds = [coerce_value("seeds", seed, "int", source) for seed in seeds]
        predict_test = _flag("predict_test", predict_test, source)
        save_best = _flag("save_best", save_best, source)
        resume = _flag("resume", resume, source)
        overwrite = _flag("overwrite", overwrite, source)
        specs = parse_task_list(tasks if isinstance(tasks, str) else ",".join(tasks))
        finetune = settings_from(FinetuneSettings, settings, source)
        if (predict_test or save_best or resume or finetune.save_every) and output_dir is None:
            raise UserError("predict_test, save_best, save_every and resume need an output_dir.")
        check_run_inputs(specs, finetune, seeds)  # before `overwrite` deletes an earlier run
        if output_dir is not None:
            refuse_unusable_output(output_dir)
        data = _prepare_glue_output(
            output_dir, model, init_from, specs, data_dir, predict_test, overwrite, resume
        )
        return run_glue(
            model,
            specs,
            data,
            finetune,
            seeds,
            output_dir=Path(output_dir) if output_dir is not None else None,
            init_from=init_from,
            predict_test=predict_test,
            save_best=save_best,
            resume=resume,
        )


def finetune_squad(
    model: str | Path, output_dir: str | Path, overwrite: bool = False, **settings: Any
) -> dict:
    """Fine-tune on SQuAD and/or evaluate (`train=`, `eval=` file paths, `version="1.1"|"2.0"`, `resume=True`, and
    any other `electra.squad.train.SquadSettings` field), as `electra squad` does; returns the evaluation results. An
    `output_dir` holding earlier results is refused unless `resume=True` or `overwrite=True`. The random
    generators of torch, numpy and `random` are left as they were."""
    with python_spelling(), _keeping_random_state():
        overwrite = _flag("overwrite", overwrite, "electra.finetune_squad")
        chosen = settings_from(
            SquadSettings,
            {**settings, "model": finetune_dir(model), "output": output_dir},
            "electra.finetune_squad",
        )
        refuse_unusable_output(output_dir)
        parsed = _prepare_squad_output(chosen, overwrite)
        return _finetune_squad(chosen, parsed)
