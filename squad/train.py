"""Fine-tune on SQuAD and evaluate with the official metrics.

Defaults are the ELECTRA paper's fine-tuning settings for Base (learning rate 1e-4, layer-wise decay 0.8, batch 32,
2 epochs, 10% warmup, weight decay 0.01, gradient clipping 1.0). Training runs on the library's engine
(`electra.training.engine`), so GLUE and SQuAD decay layers the same way, log the same way (OUTPUT/train/metrics.csv and
TensorBoard) and can checkpoint and resume (`--save-every`, `--resume`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from electra.core.errors import UserError
from electra.core.files import file_sha256, write_json_atomically
from electra.core.outputs import StepOutput
from electra.core.run_records import INPUT_DIGESTS, check_run_record, keep_run_record
from electra.data.packing import pad_batch
from electra.data.tokenization import require_tokenizer_fits
from electra.export.layout import finetune_dir, fit_length
from electra.export.model_card import CARD, CardFacts, render_card
from electra.finetune.recipe import finetune_args
from electra.squad.data import SquadExample, read_squad
from electra.squad.features import build_features
from electra.squad.heads import HeadConfig
from electra.squad.inputs import load_tokenizer
from electra.squad.metrics import official_scores
from electra.squad.model import SquadModel, native_qa_class
from electra.squad.postprocess import Predictions, WindowResult, postprocess
from electra.squad.settings import SquadSettings
from electra.training.engine import Engine
from electra.training.optim import describe_lr_groups
from electra.training.processes import main_process_first, make_accelerator, per_process_batch
from electra.training.run_log import progress_off
from electra.training.task import Task, shuffled_epochs

logger = logging.getLogger(__name__)


def head_config(settings: SquadSettings) -> HeadConfig:
    """The span head the settings ask for; answerability defaults to on for SQuAD 2.0 only."""
    answerable = settings.version == "2.0" if settings.answerable is None else settings.answerable
    return HeadConfig(
        settings.head, answerable, settings.answerable_weight, settings.beam_size, settings.head_inner_size
    )


# What a resume may change: how training is watched and saved, and how the trained model is evaluated (the
# evaluation is recomputed, and labelled, with the settings given now).
RESUMABLE_SETTINGS = frozenset(
    {
        "output",
        "resume",
        "save_every",
        "log_every",
        "progress",
        "cache_dir",
        "eval",
        "eval_batch_size",
        "beam_size",
        "n_best_size",
        "max_answer_length",
        "na_threshold",
    }
)


def resume_record(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings (`asdict(SquadSettings)`, or those a results.json saved) that a resumed training must share
    with the run it continues; the model, tokenizer and training file as absolute paths, so a relative spelling
    from another folder still matches. It is taken before the model loads, so `max_seq_length` is the one asked
    for (a results.json from before run.json existed saved it fitted to the model)."""
    record = {name: value for name, value in settings.items() if name not in RESUMABLE_SETTINGS}
    # what tells this output from a pretraining run's (`electra.export.layout.refuse_run_folder`)
    record["command"] = "squad"
    if record.get("model"):
        record["model"] = str(finetune_dir(record["model"]).resolve())
    for name in ("tokenizer", "train"):
        if record.get(name):
            record[name] = str(Path(record[name]).resolve())
    return record


def _record_in_results(results: dict[str, Any]) -> dict[str, Any] | None:
    """The resume record of an output from before OUTPUT/run.json existed, from its results.json."""
    if not isinstance(results.get("settings"), dict) or "train" not in results:
        return None  # nothing recorded to compare with
    return resume_record(results["settings"])


def collate(rows: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest window (dynamic padding: short contexts cost less)."""
    batch = pad_batch(rows, pad_token_id)
    for name in ("start_positions", "end_positions", "is_impossible", "window"):
        if name in rows[0]:
            batch[name] = torch.tensor([r[name] for r in rows], dtype=torch.long)
    return batch


def finetune(settings: SquadSettings, parsed: dict[str, list[SquadExample]] | None = None) -> dict[str, Any]:
    """Train (when `settings.train`), save the model, evaluate (when `settings.eval`); returns the eval results.
    `parsed` is what `electra.squad.inputs.check_inputs` read from the same settings."""
    parsed = parsed or {}
    accelerator = make_accelerator(settings.mixed_precision)
    set_seed(settings.seed)
    output = Path(settings.output)
    output.mkdir(parents=True, exist_ok=True)
    cache_dir = settings.cache_dir or str(output / "cache")
    model_dir = finetune_dir(settings.model)  # a pretraining run's export: its fine-tuning part
    if settings.train is not None:  # before anything loads: the settings as given (max_seq_length unfitted)
        record = resume_record(asdict(settings))
        # the file's content, not just its path: a training file edited in place would otherwise be continued on
        record[INPUT_DIGESTS] = {"train": file_sha256(settings.train)}
        if settings.resume:
            check_run_record(output, record, _record_in_results)
        if accelerator.is_main_process:
            keep_run_record(output, record, settings.resume)
    tokenizer = load_tokenizer(settings.tokenizer or model_dir)
    if settings.train is not None:
        model = SquadModel.from_encoder(model_dir, head_config(settings))
    else:  # evaluation only: the directory must be a fine-tuned SQuAD model
        model = SquadModel.load(settings.model)
    require_tokenizer_fits(tokenizer, model.encoder.get_input_embeddings().num_embeddings, model_dir)
    settings.max_seq_length = fit_length(settings.max_seq_length, model.encoder.config)
    results: dict[str, Any] = {}
    if settings.train is not None:
        examples = parsed.get("train") or read_squad(settings.train, settings.version)
        if settings.max_train_examples:
            examples = examples[: settings.max_train_examples]
        with main_process_first(accelerator):  # the main process writes the cache, the others read it
            features = build_features(examples, tokenizer, settings.feature_settings(), True, cache_dir)
        results["train"] = train_model(
            model, features, tokenizer.pad_token_id, settings, accelerator, output / "train"
        )
        if accelerator.is_main_process:
            accelerator.unwrap_model(model).save(output / "model", tokenizer)
    if settings.eval is not None:
        examples = parsed.get("eval") or read_squad(settings.eval, settings.version)
        predictions, has_classifier = predict(model, tokenizer, examples, settings, accelerator, cache_dir)
        if accelerator.is_main_process:
            results["eval"] = score_and_write(examples, predictions, settings, output)
    if accelerator.is_main_process:
        record = {"settings": asdict(settings), **results}
        write_json_atomically(output / "results.json", record)
        if settings.train is not None:
            write_squad_card(output / "model", settings, results, accelerator.unwrap_model(model))
    return results


def write_squad_card(
    model_dir: Path, settings: SquadSettings, results: dict[str, Any], model: SquadModel
) -> None:
    """The fine-tuned model's README.md: what it was trained from and on, its scores, and how to load it."""
    native = native_qa_class(model.encoder, model.head_config)
    train = results.get("train", {})
    head = settings.head + (" + answerability classifier" if model.head_config.answerable else "")
    rows = [
        ("base model", f"`{settings.model}`"),
        (
            "data",
            f"SQuAD {settings.version}: `{Path(str(settings.train)).name}`, {train.get('windows', 0):,} windows",
        ),
        ("head", head),
        (
            "steps",
            f"{train.get('steps', 0):,}, batch {settings.batch_size}, learning rate {settings.learning_rate:g}, "
            f"layer-wise decay {settings.layer_decay:g}, max length {settings.max_seq_length}, seed {settings.seed}",
        ),
    ]
    scores = {k: float(v) for k, v in results.get("eval", {}).items() if isinstance(v, (int, float))}
    if results.get("eval"):
        rows.append(("evaluated on", f"`{Path(str(settings.eval)).name}`"))
    if native:
        loads = [
            (
                f"How to load ({native})",
                "import torch\nfrom transformers import AutoModelForQuestionAnswering, AutoTokenizer\n\n"
                f'tokenizer = AutoTokenizer.from_pretrained("{model_dir}")\n'
                f'model = AutoModelForQuestionAnswering.from_pretrained("{model_dir}")\n'
                'inputs = tokenizer("Who wrote it?", "The book was written by Ada.", return_tensors="pt")\n'
                "with torch.no_grad():\n    out = model(**inputs)\n"
                "start, end = int(out.start_logits.argmax()), int(out.end_logits.argmax())\n"
                'print(tokenizer.decode(inputs["input_ids"][0, start : end + 1]))',
            )
        ]
    else:
        loads = [
            (
                "How to load (ELECTRA's span head: a class from this library)",
                f"from electra.squad.hf_model import ElectraForSquad  # installed with electra\n\n"
                f'model = ElectraForSquad.from_pretrained("{model_dir}")  # encoder + start/end/answerability head',
            )
        ]
    facts = CardFacts(
        title=f"{model_dir.parent.name}: SQuAD {settings.version} fine-tuning",
        summary="An extractive question-answering model fine-tuned by `electra squad`. "
        + (
            "Its head is transformers' own."
            if native
            else "Its head is ELECTRA's (the end depends on the start; "
            "no transformers class has it): `AutoModel` loads the encoder, `ElectraForSquad` the whole model."
        ),
        facts=rows,
        metrics=scores,
        tags=("question-answering", "squad"),
    )
    (model_dir / CARD).write_text(render_card(facts, loads, "question-answering" if native else None))


class SquadTask(Task):
    """SQuAD windows in an order seeded by `settings.seed` (so a resumed run sees the same batches), the span loss,
    and the first and last losses (the summary `results.json` reports; both travel in checkpoints, so a run
    resumed at its last step still reports them)."""

    def __init__(
        self, model: SquadModel, features: Any, pad_token_id: int, settings: SquadSettings, accelerator
    ):
        self.model, self.features, self.pad_token_id = model, features, pad_token_id
        self.settings, self.accelerator = settings, accelerator
        self.per_process = per_process_batch(settings.batch_size, accelerator.num_processes)
        self.first_loss: torch.Tensor | float | None = None
        self.recent: deque = deque(maxlen=20)

    def batches(self, start: int):
        collate_rows = partial(collate, pad_token_id=self.pad_token_id)
        s = self.settings
        return shuffled_epochs(self.features, self.per_process, s.seed, collate_rows, self.accelerator, start)

    def step(self, model, batch) -> StepOutput:
        loss = model(**batch).loss
        if self.first_loss is None:
            self.first_loss = loss.detach()
        self.recent.append(loss.detach())
        return StepOutput(loss, {"loss": loss.detach()})

    def tokens(self, batch) -> int:
        return batch["input_ids"].numel()

    def state_dict(self) -> dict[str, Any]:
        return {
            "first_loss": None if self.first_loss is None else float(self.first_loss),
            "recent": [float(loss) for loss in self.recent],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first_loss = state.get("first_loss")
        self.recent.clear()
        self.recent.extend(state.get("recent", []))


def train_model(
    model: SquadModel,
    features: Any,
    pad_token_id: int,
    settings: SquadSettings,
    accelerator: Any,
    log_dir: Path | None = None,
) -> dict[str, float]:
    """Fine-tune `model` on the training windows; logs (and checkpoints, with `settings.save_every`) in `log_dir`."""
    if len(features) == 0:
        raise UserError(f"{settings.train}: no training windows were built.")
    per_epoch = math.ceil(len(features) / settings.batch_size)  # batch_size: all processes' together
    total_steps = settings.max_steps or max(1, math.ceil(settings.epochs * per_epoch))
    args = finetune_args(
        settings, total_steps, settings.learning_rate, settings.layer_decay, log_dir, "squad fine-tune"
    )
    task = SquadTask(model, features, pad_token_id, settings, accelerator)
    logger.info("layer-wise learning rates:\n%s", describe_lr_groups(task.parameter_groups(model, args)))
    started = time.time()
    engine = Engine(args, accelerator)
    result = engine.fit(task, engine.resume_checkpoint(settings.resume, "the fine-tuning"))
    recent = [float(loss) for loss in task.recent]
    # None (JSON null), never NaN (not JSON): a resume from a checkpoint written before the losses travelled with
    # it, at its last step, trains nothing and so has no loss of its own to report.
    first = float(task.first_loss) if task.first_loss is not None else None
    final = float(np.mean(recent)) if recent else None
    if accelerator.num_processes > 1 and first is not None and final is not None:
        # each process saw its share of every batch: the batch's loss is their mean (as metrics.csv logs it)
        both = accelerator.reduce(torch.tensor([first, final], device=accelerator.device), "mean")
        first, final = (float(value) for value in both)
    summary: dict[str, Any] = {
        "steps": result.step,
        "first_loss": first,
        "final_loss": final,
        "seconds": time.time() - started,
        "windows": len(features),
    }
    if summary["first_loss"] is None or summary["final_loss"] is None:
        summary["loss_note"] = "no step ran in this invocation and the checkpoint it resumed holds no loss"
    return summary


def predict(
    model: Any,
    tokenizer: Any,
    examples: Sequence[SquadExample],
    settings: SquadSettings,
    accelerator: Any,
    cache_dir: str | None = None,
) -> tuple[Predictions, bool]:
    """Beam outputs for every window, then post-processing into texts, n-best lists and no-answer scores."""
    with main_process_first(accelerator):
        features = build_features(examples, tokenizer, settings.feature_settings(), False, cache_dir)
    model_inputs = features.select_columns(["input_ids", "token_type_ids"]).add_column(
        "window", list(range(len(features)))
    )
    loader = DataLoader(
        model_inputs,
        batch_size=settings.eval_batch_size,
        collate_fn=lambda rows: collate(rows, tokenizer.pad_token_id),
    )
    # The bare model on the device (a model prepared for training stays wrapped once); autocast for bf16/fp16.
    model = accelerator.unwrap_model(model).to(accelerator.device)
    loader = accelerator.prepare(loader)
    model.eval()
    gathered: dict[str, list[np.ndarray]] = {}
    has_classifier = False
    for batch in tqdm(
        loader,
        desc="squad predict",
        disable=not (settings.progress and accelerator.is_local_main_process) or progress_off(),
    ):
        window = batch.pop("window")
        with torch.no_grad(), accelerator.autocast():
            out = model(**batch)
        has_classifier = out.has_classifier
        parts = {
            "window": window,
            "start_top_scores": out.start_top_scores,
            "start_top_index": out.start_top_index,
            "end_top_scores": out.end_top_scores,
            "end_top_index": out.end_top_index.contiguous(),
            "null_score": out.null_score,
        }
        for name, tensor in parts.items():
            gathered.setdefault(name, []).append(accelerator.gather_for_metrics(tensor).float().cpu().numpy())
    arrays = {name: np.concatenate(chunks) for name, chunks in gathered.items()}
    order = np.argsort(arrays["window"], kind="stable")
    results = [
        WindowResult(
            arrays["start_top_scores"][i],
            arrays["start_top_index"][i].astype(np.int64),
            arrays["end_top_scores"][i],
            arrays["end_top_index"][i].astype(np.int64),
            float(arrays["null_score"][i]),
        )
        for i in order
    ]
    predictions = postprocess(
        examples,
        features["example_index"],
        features["offsets"],
        features["max_context"],
        results,
        settings.version,
        has_classifier,
        settings.n_best_size,
        settings.max_answer_length,
    )
    return predictions, has_classifier


def score_and_write(
    examples: Sequence[SquadExample], predictions: Predictions, settings: SquadSettings, output: Path
) -> dict[str, Any]:
    """Official metrics; writes predictions.json (official format), nbest_predictions.json, null_odds.json."""
    golds = {e.qid: [a.text for a in e.answers] for e in examples}
    if settings.version == "1.1":
        final = predictions.final()
        metrics: dict[str, Any] = official_scores("1.1", golds, final)
    else:
        tuned = official_scores("2.0", golds, predictions.best_text, predictions.na_scores)
        threshold = settings.na_threshold if settings.na_threshold is not None else tuned["best_f1_thresh"]
        metrics = official_scores("2.0", golds, predictions.best_text, predictions.na_scores, threshold)
        metrics["na_threshold"] = threshold
        final = predictions.final(threshold)
        write_json_atomically(output / "null_odds.json", predictions.na_scores)
    write_json_atomically(output / "predictions.json", final, ensure_ascii=False)
    write_json_atomically(output / "nbest_predictions.json", predictions.nbest, indent=1, ensure_ascii=False)
    logger.info("SQuAD %s: %s", settings.version, json.dumps(metrics))
    return metrics
