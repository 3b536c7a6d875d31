"""Fine-tune one checkpoint on GLUE tasks over several seeds, the way the ELECTRA paper does (its Table 5.2 /
appendix: AdamW eps 1e-6, 10% warmup then linear decay, no weight decay, batch 32, layer-wise LR decay,
learning rate by model size, 10 epochs for RTE and STS-B and 3 otherwise, median over seeds).

The training loop runs through Accelerate, so `accelerate launch` gives multi-GPU data parallelism and
`--mixed-precision bf16` autocasts the forward passes.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from electra.errors import UserError
from glue.data import Collator, encode_examples
from glue.metrics import compute_metrics
from glue.model import GlueModel, load_encoder
from glue.tasks import PAPER_AVERAGE_TASKS, TaskSpec, read_examples, swap_pairs, task_file

logger = logging.getLogger(__name__)

# (largest hidden size, name, learning rate, layer decay): the paper's per-size fine-tuning settings.
SIZE_DEFAULTS = ((256, "small", 3e-4, 0.8), (768, "base", 1e-4, 0.8), (math.inf, "large", 5e-5, 0.9))
LONG_TASKS = {"rte": 10, "stsb": 10}  # epochs; every other task trains 3


def size_defaults(hidden_size: int) -> tuple[str, float, float]:
    """(size name, learning rate, layer decay) for a model of this hidden size."""
    for limit, name, lr, decay in SIZE_DEFAULTS:
        if hidden_size <= limit:
            return name, lr, decay
    raise AssertionError("unreachable")


def paper_epochs(task: str) -> int:
    return LONG_TASKS.get(task, 3)


@dataclass
class FinetuneSettings:
    learning_rate: float | None = None  # None: by model size (3e-4 small, 1e-4 base, 5e-5 large)
    layer_decay: float | None = None  # None: 0.8 (0.9 for large)
    epochs: float | None = None  # None: the paper's (10 for RTE/STS-B, 3 otherwise)
    max_steps: int | None = None  # overrides epochs
    batch_size: int = 32  # global batch (split over processes)
    eval_batch_size: int = 128
    max_seq_length: int = 128
    warmup_fraction: float = 0.1
    weight_decay: float = 0.0
    adam_epsilon: float = 1e-6
    max_grad_norm: float = 1.0  # the reference clips the global gradient norm at 1
    double_unordered: bool = True  # MRPC / STS-B also train on (B, A)
    original_off_by_one: bool = False  # the reference code's layer-wise rates (see electra/finetuning.py)
    max_train_examples: int | None = None  # a fixed random subset of train (quick runs, tests)
    skip_malformed: bool = False  # drop rows with too few fields instead of stopping at the first
    mixed_precision: str = "no"


@dataclass
class TaskData:
    spec: TaskSpec
    train: list[dict]
    dev: dict[str, list[dict]]  # result name -> features with labels
    test: dict[str, tuple[list[str], list[dict]]] = field(
        default_factory=dict
    )  # server stem -> (ids, features)


@dataclass
class SeedRun:
    seed: int
    metrics: dict[str, dict[str, float]]  # dev result name -> {metric: value}
    steps: int
    train_shapes: dict[int, int]  # padded length -> sequences trained at it (all processes)
    eval_shapes: dict[int, int]  # padded length -> sequences evaluated/predicted at it
    seconds: float
    test_predictions: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def resolve_model_dir(path: str | Path) -> Path:
    """A Hugging Face checkpoint directory, or a pretraining run directory (its export.json names the model to
    fine-tune: the discriminator, or the MLM model for the MLM baseline)."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    if (path / "export.json").is_file():
        from electra.modeling import finetune_dir

        exported = finetune_dir(path)
        if (exported / "config.json").is_file():
            return exported
        path = exported
    raise UserError(
        f"{path}/config.json: not found; --model must be a Hugging Face checkpoint directory "
        "(e.g. RUN/discriminator) or a pretraining run directory with export.json."
    )


def check_files(specs: list[TaskSpec], data_dir: Path, predict_test: bool) -> None:
    """Fail before any training if a needed file is missing (a long `--task all` run must not die at task 6)."""
    for spec in specs:
        needed = [spec.train_file, *spec.dev_files.values()] + (
            list(spec.test_files.values()) if predict_test else []
        )
        for relative in needed:
            path = task_file(data_dir, spec, relative)
            if not path.is_file():
                raise UserError(
                    f"{path}: file not found; task {spec.name} needs it (GLUE layout: {spec.directory}/{relative})."
                )


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
    return TaskData(spec, train_features, dev, test)


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


def _predict(
    model,
    features: list[dict],
    collator: Collator,
    accelerator,
    batch_size: int,
    shapes: Counter | None = None,
) -> np.ndarray:
    """Logits for `features` in order (gathered over processes); counts padded batch shapes into `shapes`."""
    from torch.utils.data import DataLoader

    if shapes is not None:
        for start in range(0, len(features), batch_size):
            chunk = features[start : start + batch_size]
            shapes[max(len(f["input_ids"]) for f in chunk)] += len(chunk)

    loader = accelerator.prepare(
        DataLoader(features, batch_size=batch_size, shuffle=False, collate_fn=collator)
    )
    model.eval()
    outputs = []
    with torch.no_grad():
        for batch in loader:
            batch.pop("labels", None)
            _, logits = model(**batch)
            outputs.append(accelerator.gather_for_metrics(logits.float()).cpu())
    model.train()
    return torch.cat(outputs).numpy()


def _decide(spec: TaskSpec, logits: np.ndarray) -> np.ndarray:
    return logits if spec.is_regression else logits.argmax(-1)


def run_seed(
    data: TaskData,
    model_dir: str | Path,
    tokenizer,
    seed: int,
    settings: FinetuneSettings,
    accelerator,
    init_from: str | Path | None = None,
    show_groups: bool = False,
) -> tuple[SeedRun, GlueModel]:
    """One fine-tuning run: train, evaluate on every dev set, predict the test sets that were loaded."""
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader
    from tqdm.auto import tqdm

    from electra.finetuning import build_finetune_optimizer, describe_lr_groups

    spec = data.spec
    started = time.time()
    set_seed(seed)
    encoder = load_encoder(init_from or model_dir)
    model = GlueModel(encoder, spec.num_labels, spec.name, spec.labels)
    if init_from and model.load_head_if_same_task(init_from):
        logger.info("%s: task layer loaded from %s", spec.name, init_from)
    _, size_lr, size_decay = size_defaults(encoder.config.hidden_size)
    lr = settings.learning_rate or size_lr
    decay = settings.layer_decay or size_decay

    collator = Collator(tokenizer.pad_token_id or 0, spec.is_regression)
    per_device = max(1, settings.batch_size // accelerator.num_processes)
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        data.train, batch_size=per_device, shuffle=True, collate_fn=collator, generator=generator
    )
    steps_per_epoch = math.ceil(len(data.train) / (per_device * accelerator.num_processes))
    epochs = settings.epochs if settings.epochs is not None else paper_epochs(spec.name)
    total = settings.max_steps or max(1, round(epochs * steps_per_epoch))

    model.to(accelerator.device)
    optimizer, scheduler = build_finetune_optimizer(
        model,
        lr,
        decay,
        total,
        warmup_fraction=settings.warmup_fraction,
        weight_decay=settings.weight_decay,
        adam_epsilon=settings.adam_epsilon,
        original_off_by_one=settings.original_off_by_one,
    )
    if show_groups:
        accelerator.print(f"{spec.name}: {total} steps, learning rate per parameter group:")
        accelerator.print(describe_lr_groups(optimizer.param_groups))
    # The scheduler is stepped by hand once per update: `total` already counts global (all-process) steps.
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    model.train()
    step, train_shapes, eval_shapes = 0, Counter(), Counter()
    progress = tqdm(
        total=total, desc=f"{spec.name} seed {seed}", disable=not accelerator.is_local_main_process
    )
    while step < total:
        for batch in loader:
            loss, _ = model(**batch)
            accelerator.backward(loss)
            if settings.max_grad_norm:
                accelerator.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            train_shapes[batch["input_ids"].shape[1]] += (
                batch["input_ids"].shape[0] * accelerator.num_processes
            )
            step += 1
            progress.update(1)
            if step % 10 == 0 or step == total:
                progress.set_postfix(loss=f"{loss.item():.4f}")
            if step >= total:
                break
    progress.close()

    metrics = {}
    for name, features in data.dev.items():
        logits = _predict(model, features, collator, accelerator, settings.eval_batch_size, eval_shapes)
        metrics[name] = compute_metrics(spec, _decide(spec, logits), [f["labels"] for f in features])
    test_predictions = {}
    for stem, (ids, features) in data.test.items():
        logits = _predict(model, features, collator, accelerator, settings.eval_batch_size, eval_shapes)
        decided = _decide(spec, logits)
        if spec.is_regression:
            labels = [f"{min(5.0, max(0.0, float(v))):.3f}" for v in decided]
        else:
            labels = [spec.labels[int(v)] for v in decided]
        test_predictions[stem] = list(zip(ids, labels))
    unwrapped = accelerator.unwrap_model(model)
    run = SeedRun(
        seed, metrics, step, dict(train_shapes), dict(eval_shapes), time.time() - started, test_predictions
    )
    return run, unwrapped


def finetune_flops(
    model: GlueModel, train_shapes: dict[int, int], eval_shapes: dict[int, int]
) -> tuple[float, str]:
    """FLOPs of one fine-tuning run (training plus evaluation), from the padded batch shapes it really ran.

    Uses the FLOP package's analytic count (`flops.analytic.finetune_flops`: training charged as 2 x forward, as
    the paper counts pretraining) when it is importable; otherwise an estimate labelled as such: 6·N FLOPs per
    trained token and 2·N per evaluated token, N = parameters outside the embeddings.
    """
    try:
        from flops.analytic import finetune_flops as analytic
    except ImportError:
        analytic = None
    if analytic is not None:
        try:
            config, labels = model.encoder.config, model.num_labels
            train = sum(analytic(config, length, n, labels).train_flops for length, n in train_shapes.items())
            evaluation = sum(
                analytic(config, length, n, labels).forward_flops_per_sequence * n
                for length, n in eval_shapes.items()
            )
            return float(
                train + evaluation
            ), "flops.analytic.finetune_flops (train 2x forward, plus eval forward)"
        except (TypeError, AttributeError, ValueError) as exc:  # an API change must not fail a finished run
            logger.warning(
                "flops.analytic.finetune_flops failed (%s); reporting the 6·N·tokens estimate", exc
            )
    embeddings = sum(p.numel() for name, p in model.named_parameters() if ".embeddings." in f".{name}")
    n = sum(p.numel() for p in model.parameters()) - embeddings
    train_tokens = sum(length * count for length, count in train_shapes.items())
    eval_tokens = sum(length * count for length, count in eval_shapes.items())
    return float(6 * n * train_tokens + 2 * n * eval_tokens), "estimate: 6·N·train tokens + 2·N·eval tokens"


def summarise(spec: TaskSpec, runs: list[SeedRun]) -> dict[str, dict]:
    """Per dev set: the primary metric's median and per-seed values, and every metric's median."""
    rows = {}
    for name in spec.dev_files:
        metric_names = list(runs[0].metrics[name])
        per_seed = {m: [run.metrics[name][m] for run in runs] for m in metric_names}
        rows[name] = {
            "task": spec.name,
            "metric": spec.primary_metric,
            "median": _median(per_seed[spec.primary_metric]),
            "seeds": per_seed[spec.primary_metric],
            "seed_ids": [run.seed for run in runs],
            "medians": {m: _median(values) for m, values in per_seed.items()},
            "per_seed": per_seed,
        }
    return rows


def _median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else math.nan


def glue_average(rows: dict[str, dict]) -> tuple[float, list[str]]:
    """The paper's GLUE dev average: the primary metric's median over CoLA, SST-2, MRPC, STS-B, QQP, MNLI
    (matched), QNLI and RTE, of those that were run; WNLI and MNLI-mm are reported but not averaged."""
    used = [name for name in PAPER_AVERAGE_TASKS if name in rows and not math.isnan(rows[name]["median"])]
    if not used:
        return math.nan, []
    return float(np.mean([rows[name]["median"] for name in used])), used


def run_glue(
    model_dir: str | Path,
    specs: list[TaskSpec],
    data_dir: Path,
    settings: FinetuneSettings,
    seeds: list[int],
    output_dir: Path | None = None,
    init_from: str | Path | None = None,
    predict_test: bool = False,
    save_best: bool = False,
) -> dict:
    """Fine-tune on every task with every seed; write results.json / results.md (and test TSVs, checkpoints)."""
    from accelerate import Accelerator
    from transformers import AutoConfig, AutoTokenizer

    from glue.report import format_table, write_outputs

    model_dir = resolve_model_dir(model_dir)
    init_from = resolve_model_dir(init_from) if init_from else None
    if not seeds:
        raise UserError("--seeds must be at least 1.")
    check_files(specs, data_dir, predict_test)
    accelerator = Accelerator(mixed_precision=settings.mixed_precision)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    config = AutoConfig.from_pretrained(str(model_dir))
    size, size_lr, size_decay = size_defaults(config.hidden_size)
    resolved = asdict(settings) | {
        "learning_rate": settings.learning_rate or size_lr,
        "layer_decay": settings.layer_decay or size_decay,
        "size": size,
    }
    rows: dict[str, dict] = {}
    all_runs: dict[str, list[dict]] = {}
    test_files: dict[str, list[tuple[str, str]]] = {}
    total_flops, flops_method = 0.0, None
    for spec in specs:
        data = load_task_data(spec, data_dir, tokenizer, settings, predict_test)
        runs: list[SeedRun] = []
        best_score, best_predictions = -math.inf, {}
        for index, seed in enumerate(seeds):
            run, model = run_seed(
                data, model_dir, tokenizer, seed, settings, accelerator, init_from, show_groups=index == 0
            )
            flops, flops_method = finetune_flops(model, run.train_shapes, run.eval_shapes)
            total_flops += flops
            score = run.metrics[next(iter(spec.dev_files))][spec.primary_metric]
            if index == 0 or (not math.isnan(score) and score > best_score):
                best_score = score if not math.isnan(score) else -math.inf
                best_predictions = run.test_predictions
                if save_best and output_dir is not None and accelerator.is_main_process:
                    model.save(output_dir / "checkpoints" / spec.name, tokenizer)
            runs.append(run)
            del model
            accelerator.free_memory()
            accelerator.print(
                f"{spec.name} seed {seed}: {run.metrics} ({run.steps} steps, {run.seconds:.0f}s)"
            )
        rows.update(summarise(spec, runs))
        all_runs[spec.name] = [asdict(run) | {"test_predictions": None} for run in runs]
        test_files.update(best_predictions)
    average, averaged = glue_average(rows)
    results = {
        "model": str(model_dir),
        "init_from": str(init_from) if init_from else None,
        "tasks": [spec.name for spec in specs],
        "settings": resolved,
        "seeds": seeds,
        "results": rows,
        "average": average,
        "average_over": averaged,
        "average_convention": "mean of per-task medians of the paper's metric (MCC CoLA, Spearman STS-B, accuracy "
        "otherwise) over CoLA, SST-2, MRPC, STS-B, QQP, MNLI-m, QNLI, RTE where run; WNLI and MNLI-mm not averaged",
        "finetune_flops": total_flops,
        "finetune_flops_method": flops_method,
        "runs": all_runs,
    }
    if accelerator.is_main_process:
        print(format_table(results))
        if output_dir is not None:
            write_outputs(results, output_dir, test_files if predict_test else None)
    return results
