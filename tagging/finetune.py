"""Fine-tune one checkpoint as a tagger over several seeds, with GLUE's recipe (AdamW eps 1e-6, 10% warmup then
linear decay, no weight decay, batch 32, layer-wise learning-rate decay and learning rate by model size) and the
one training engine; report each seed's scores on --dev (and --test) and their median.

A run with an output folder keeps each seed's logs, checkpoints (`save_every`) and result under
OUTPUT/runs/seed-N/ (a `resume` reuses finished seeds and continues an unfinished one), the best seed's (by the
primary dev metric) predictions as CoNLL files, and its model as one Hugging Face directory with a model card.
The files are read in `electra.tagging.data`; the summary table and the card are written by `electra.tagging.report`.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import set_seed
from transformers import AutoConfig, AutoTokenizer

from electra.core.errors import UserError
from electra.core.files import file_sha256, read_json_record, write_json_atomically
from electra.core.outputs import StepOutput
from electra.core.run_records import INPUT_DIGESTS, check_run_record, keep_run_record
from electra.data.tokenization import require_tokenizer_fits
from electra.export.layout import fit_length
from electra.finetune.models import load_encoder, resolve_model_dir
from electra.finetune.recipe import finetune_args, rates, resolved_settings, total_updates
from electra.finetune.results import json_safe, read_seed_result, write_seed_result
from electra.finetune.seeds import SeedJob, median, run_seeds, spread
from electra.finetune.settings import RESUMABLE_SETTINGS
from electra.tagging.conll import to_bio, write_conll
from electra.tagging.cvt_views import TransformerCvtTagger
from electra.tagging.data import EvalSet, TagData, load_data, primary_metric
from electra.tagging.features import Collator, words_from_windows
from electra.tagging.model import HEAD_KEY, TaggerModel
from electra.tagging.report import format_summary, write_card
from electra.tagging.settings import TagSettings
from electra.tagging.spans import score_tags
from electra.training.engine import Engine
from electra.training.optim import describe_lr_groups
from electra.training.processes import make_accelerator, per_process_batch
from electra.training.task import Task, shuffled_epochs

COMMAND = "tag"  # run.json's "command": what tells a tagging output from another command's
RUN_RESULT = "result.json"
MODEL_DIR = "model"


@dataclass
class SeedRun:
    seed: int
    metrics: dict[str, dict[str, float]]  # "dev"/"test" -> metric -> value
    steps: int
    seconds: float
    train_seconds: float = 0.0


class TagSeedTask(Task):
    """One seed's fine-tuning for the engine: shuffled windows from a generator seeded per run (a resumed run
    replays the same order) and the tagging loss; under --cvt each update also takes an unlabeled batch, whose
    loss trains the auxiliary modules (`electra.tagging.cvt_views`)."""

    def __init__(
        self, data: TagData, model: TaggerModel, collator: Collator, per_device: int, seed: int, acc
    ):
        self.model, self.data, self.collator = model, data, collator
        self.per_device, self.seed, self.accelerator = per_device, seed, acc

    def batches(self, start: int):
        labeled = shuffled_epochs(
            self.data.train, self.per_device, self.seed, self.collator, self.accelerator, start
        )
        if not self.data.unlabeled:
            return labeled
        unlabeled = shuffled_epochs(
            self.data.unlabeled, self.per_device, self.seed + 1, self.collator, self.accelerator, start
        )
        return ({"labeled": a, "unlabeled": b} for a, b in zip(labeled, unlabeled))

    def step(self, model, batch) -> StepOutput:
        if "unlabeled" not in batch:
            loss, _ = model(**batch)
            return StepOutput(loss, {"loss": loss.detach()})
        loss, _ = model(**batch["labeled"])
        views, parts = model.unlabeled_loss(**batch["unlabeled"])
        metrics = {"loss": loss.detach(), "cvt_loss": views.detach()}
        metrics.update({f"cvt_{name}": value.detach() for name, value in parts.items()})
        return StepOutput(loss + views, metrics)

    def tokens(self, batch) -> int:
        if "unlabeled" in batch:
            return sum(int(part["attention_mask"].sum()) for part in batch.values())
        return int(batch["attention_mask"].sum())


def predict_tags(
    model: TaggerModel, evalset: EvalSet, labels: Sequence[str], pad_id: int, batch_size: int, device
) -> list[list[str]]:
    """Per sentence of `evalset`, the predicted label of each word (the argmax at its first piece)."""
    collator = Collator(pad_id)
    model.eval()
    rows: list[np.ndarray] = []
    with torch.no_grad():
        for start in range(0, len(evalset.features), batch_size):
            batch = collator(evalset.features[start : start + batch_size])
            batch = {k: v.to(device) for k, v in batch.items()}
            _, logits = model(**batch)
            rows.extend(logits.argmax(-1).cpu().numpy())
    model.train()
    lengths = [len(s.rows) for s in evalset.sentences]
    ids = words_from_windows(rows, evalset.windows, lengths)
    return [[labels[i] for i in sentence] for sentence in ids]


def in_file_scheme(tags: list[str], data: TagData, settings: TagSettings) -> list[str]:
    """Predicted tags in the training file's scheme: BIOES-trained predictions back to BIO for a BIO file."""
    if settings.encoding == "bioes" and not data.file_bioes:
        return to_bio(tags)
    return tags


def run_seed(
    data: TagData,
    model_dir: Path,
    pad_id: int,
    seed: int,
    settings: TagSettings,
    accelerator,
    run_dir: Path | None = None,
    resume: bool = False,
    show_groups: bool = False,
) -> tuple[SeedRun, TaggerModel, dict[str, list[list[str]]]]:
    """One fine-tuning run: train, then tag and score every eval set. Returns the run, the model and the
    predictions per eval set (in the file's tag scheme)."""
    started = time.time()
    set_seed(seed)
    encoder = load_encoder(model_dir)
    model = TaggerModel(encoder, data.labels)
    if settings.cvt:
        layers = encoder.config.num_hidden_layers
        view_layers = min(settings.view_layers or -(-layers // 2), layers)
        model = TransformerCvtTagger(model, data.sep_id, view_layers, settings.modules())
    per_device = per_process_batch(settings.batch_size, accelerator.num_processes)
    total = total_updates(
        settings, len(data.train), per_device, accelerator.num_processes, settings.epochs or 3.0
    )
    args = finetune_args(
        settings, total, *rates(settings, encoder.config.hidden_size), run_dir, f"tag seed {seed}"
    )
    task = TagSeedTask(data, model, Collator(pad_id), per_device, seed, accelerator)
    if show_groups:
        accelerator.print(f"tag: {total} steps, learning rate per parameter group:")
        accelerator.print(describe_lr_groups(task.parameter_groups(model, args)))
    engine = Engine(args, accelerator)
    result = engine.fit(task, engine.resume_checkpoint(resume, f"seed {seed}"))
    trained = time.time() - started
    model = accelerator.unwrap_model(model)
    if isinstance(
        model, TransformerCvtTagger
    ):  # the auxiliary modules served training; the tagger is the model
        model = model.tagger
    metrics, predictions = {}, {}
    for name, evalset in data.evals.items():
        tags = predict_tags(model, evalset, data.labels, pad_id, settings.eval_batch_size, accelerator.device)
        tags = [in_file_scheme(t, data, settings) for t in tags]
        gold = [s.labels for s in evalset.sentences]
        metrics[name] = score_tags(gold, tags, data.spans)
        predictions[name] = tags
    run = SeedRun(seed, metrics, result.step, time.time() - started, trained)
    return run, model, predictions


def summarise(runs: Sequence[SeedRun]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per eval set and metric: the median over seeds, the spread (max - min), and each seed's value."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for name in runs[0].metrics:
        summary[name] = {}
        for metric in runs[0].metrics[name]:
            values = [run.metrics[name].get(metric, math.nan) for run in runs]
            summary[name][metric] = {"median": median(values), "spread": spread(values), "seeds": values}
    return summary


def run_record(model_dir: Path, files: dict[str, Path], settings: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the run it continues: the model, the files (by path and contents) and
    every setting that changes what is learnt or scored."""
    return {
        "command": COMMAND,
        "model": str(model_dir.resolve()),
        **{name: str(path.resolve()) for name, path in files.items()},
        INPUT_DIGESTS: {name: file_sha256(path) for name, path in files.items()},
        **{name: value for name, value in settings.items() if name not in RESUMABLE_SETTINGS},
    }


def run_tag(
    model: str | Path,
    train: str | Path,
    dev: str | Path,
    settings: TagSettings,
    seeds: Sequence[int],
    test: str | Path | None = None,
    output_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Fine-tune `model` on `train` with every seed, score on `dev` (and `test`), print and return the summary.

    With `output_dir`: results.json and results.md, runs/seed-N/ per seed, the best seed's predictions
    (dev.predictions.txt, test.predictions.txt: each row with its predicted tag appended) and its model
    (model/, a Hugging Face directory with README.md). The seeds are checked at the door (`check_seeds`)."""
    model_dir = resolve_model_dir(model)
    files = {"train": Path(train), "dev": Path(dev)} | ({"test": Path(test)} if test else {})
    accelerator = make_accelerator(settings.mixed_precision)
    if accelerator.num_processes > 1:
        raise UserError("`electra tag` runs in one process; start it without a launcher.")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    config = AutoConfig.from_pretrained(str(model_dir))
    require_tokenizer_fits(tokenizer, config.vocab_size, model_dir)
    settings = replace(settings, max_seq_length=fit_length(settings.max_seq_length, config))
    resolved = resolved_settings(settings, config.hidden_size)
    output = Path(output_dir) if output_dir is not None else None
    data = load_data(files["train"], {k: v for k, v in files.items() if k != "train"}, tokenizer, settings)
    if output is not None:
        record = run_record(model_dir, files, resolved)
        if resume:
            check_run_record(output, record)
        keep_run_record(output, record, resume)
    job = TagJob(model_dir, tokenizer, settings, data, accelerator, output, resume)
    runs, best = job.run_all(list(seeds))
    metric = primary_metric(data)
    results = {
        "command": COMMAND,
        "model": str(model_dir),
        "files": {name: str(path) for name, path in files.items()},
        "settings": resolved,
        "labels": data.labels,
        "metric": metric,
        "train_sentences": data.train_sentences,
        "eval_sentences": {name: len(s.sentences) for name, s in data.evals.items()},
        "seeds": list(seeds),
        "best_seed": best,
        "summary": summarise(runs),
        "runs": [asdict(run) for run in runs],
    }
    print(format_summary(results))
    if output is not None:
        write_json_atomically(output / "results.json", json_safe(results), indent=2)
        (output / "results.md").write_text(format_summary(results, markdown=True) + "\n", encoding="utf-8")
        write_card(output / MODEL_DIR, results, data)
    return results


@dataclass
class TagJob(SeedJob[SeedRun]):
    """What every seed of a run shares, and where its runs, predictions and best model go: the seeds of
    `electra.finetune.seeds.run_seeds`, the best by the primary dev metric."""

    model_dir: Path
    tokenizer: Any
    settings: TagSettings
    data: TagData
    accelerator: Any
    output: Path | None
    resume: bool

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id or 0

    @property
    def saves(self) -> bool:
        return self.output is not None

    def run_dir(self, seed: int) -> Path | None:
        return self.output / "runs" / f"seed-{seed}" if self.output is not None else None

    def run_all(self, seeds: list[int]) -> tuple[list[SeedRun], int]:
        """Every seed (a resume reuses the finished ones); returns the runs and the best seed, whose
        predictions and model are in the output (its model trained again from its checkpoint where an earlier
        invocation finished it without being the best then)."""
        runs, best = run_seeds(self, seeds)
        if self.output is not None:
            for name in self.data.evals:
                shutil.copyfile(
                    self.run_dir(best) / f"{name}.predictions.txt", self.output / f"{name}.predictions.txt"
                )
        return runs, best

    def finished(self, seed: int) -> SeedRun | None:
        return read_seed_result(self.run_dir(seed), lambda record: SeedRun(**record)) if self.resume else None

    def train(self, seed: int, first: bool) -> tuple[SeedRun, TaggerModel]:
        """One seed's run, with its predictions and result written in its run folder."""
        run, model, predictions = self._run(seed, self.resume, first)
        run_dir = self.run_dir(seed)
        if run_dir is not None:
            for name, tags in predictions.items():
                write_conll(run_dir / f"{name}.predictions.txt", self.data.evals[name].sentences, tags)
            write_seed_result(run_dir, run)
        return run, model

    def _run(self, seed: int, resume: bool, first: bool = False):
        return run_seed(
            self.data,
            self.model_dir,
            self.pad_id,
            seed,
            self.settings,
            self.accelerator,
            self.run_dir(seed),
            resume,
            show_groups=first,
        )

    def score(self, run: SeedRun) -> float:
        return run.metrics["dev"][primary_metric(self.data)]

    def keep(self, seed: int, model: TaggerModel) -> None:
        """The best seed's model in OUTPUT/model (its config records which seed it holds)."""
        s = self.settings
        head = {"columns": s.columns, "label": s.label, "encoding": s.encoding, "seed": seed}
        model.save(self.output / MODEL_DIR, self.tokenizer, head)

    def saved_seed(self) -> int | None:
        return saved_seed(self.output)

    def save_again(self, seed: int) -> None:
        print(
            f"tag: the best seed, {seed}, finished earlier without its model kept; running it again to save it"
        )
        _, model, _ = self._run(seed, resume=True)
        self.keep(seed, model)

    def report(self, seed: int, run: SeedRun) -> None:
        metric = primary_metric(self.data)
        score = run.metrics["dev"][metric]
        print(f"tag seed {seed}: dev {metric} {100 * score:.2f} ({run.steps} steps, {run.seconds:.0f}s)")


def saved_seed(output: Path | None) -> int | None:
    """The seed whose model OUTPUT/model holds (None: none saved)."""
    if output is None:
        return None
    config = read_json_record(output / MODEL_DIR / "config.json") if (output / MODEL_DIR).is_dir() else None
    head = (config or {}).get(HEAD_KEY)
    return head.get("seed") if isinstance(head, dict) else None
