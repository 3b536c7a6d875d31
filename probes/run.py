"""One probe of one encoder over several seeds (the probes by name, and what each reads: `electra.probes.inputs`).

A probe is judged by the gap between a pretrained encoder and a randomly initialised copy of it (`random_encoder_dir`):
a random transformer already carries word identity, so a probe that a random encoder nearly solves cannot tell
objectives apart. Features are extracted once per (model, probe), for the union of every seed's training
subsample and the dev set; the seeds then differ only in which training examples the linear probe sees (and its
starting weights), which is the spread the result reports.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from electra.core.errors import UserError, first_line
from electra.core.files import file_sha256
from electra.export.layout import fit_length
from electra.finetune.models import resolve_model_dir
from electra.probes.data import brown_files
from electra.probes.inputs import ProbeData, ProbeSpec, get_probe
from electra.probes.linear import accuracy, fit_probe, load_frozen, sentence_features, token_features


def _spread(items: list, limit: int | None) -> list[int]:
    """Indices of at most `limit` items, evenly spaced over the list (so a capped dev set still spans it)."""
    if limit is None or len(items) <= limit:
        return list(range(len(items)))
    return [i * len(items) // limit for i in range(limit)]


def _subsample(n: int, max_train: int | None, seed: int) -> list[int]:
    if max_train is None or max_train >= n:
        return list(range(n))
    return sorted(random.Random(seed).sample(range(n), max_train))


def training_samples(
    spec: ProbeSpec, data: ProbeData, data_root: str | Path, seeds: Sequence[int], max_train: int | None
) -> dict[int, list[int]]:
    """Each seed's training examples (indices into `data.train_inputs`), refused in one line naming the training
    file where they hold a single class: a probe fitted on one class answers it everywhere, and its "accuracy" is
    the majority baseline, reported as if the encoder had been measured."""
    limit = max_train if max_train is not None else spec.default_max_train
    chosen = {seed: _subsample(len(data.train_inputs), limit, seed) for seed in seeds}
    where = Path(data_root) / spec.needs[0]

    def classes(which: Sequence[int]) -> set:
        if spec.unit == "sentence":
            return {data.train_labels[i] for i in which}
        return {tag for i in which for tag in data.train_labels[i]}

    every = classes(range(len(data.train_inputs)))
    if len(every) < 2:
        raise UserError(
            f"{where}: every training {spec.unit}'s label is {next(iter(every), None)!r}; the {spec.name} probe "
            "needs at least two classes (on one it scores only the majority baseline); give data of two or more."
        )
    for seed, which in chosen.items():
        found = classes(which)
        if len(found) < 2:
            raise UserError(
                f"{where}: seed {seed}'s training sample (--max-train {limit}) holds one class only, "
                f"{next(iter(found))!r}; the {spec.name} probe needs at least two: raise --max-train."
            )
    return chosen


def data_sha256(spec: ProbeSpec, data_root: str | Path) -> dict[str, str]:
    """SHA-256 of each file the probe reads, by its path under the data folder (a folder: its Brown files): what
    tells a `--resume`'s earlier result from one on other data at the same path."""
    root = Path(data_root)
    digests = {}
    for relative in spec.needs:
        path = root / relative
        for file in brown_files(path) if path.is_dir() else [path]:
            digests[file.relative_to(root).as_posix()] = file_sha256(file)
    return digests


# beside the weights (*.safetensors), the checkpoint's files a probe's result hangs on
MODEL_FILES = ("config.json", "tokenizer.json")


def model_sha256(model_dir: str | Path) -> dict[str, str]:
    """SHA-256 of a checkpoint's weights, config and tokenizer, by file name: a model retrained or replaced in
    place is another encoder under the same path."""
    directory = Path(model_dir)
    files = sorted(directory.glob("*.safetensors")) + [directory / name for name in MODEL_FILES]
    return {file.name: file_sha256(file) for file in files if file.is_file()}


def run_probe(
    model_dir: str | Path,
    probe: str | ProbeSpec,
    data_root: str | Path,
    seeds: Sequence[int] = (1, 2, 3),
    max_train: int | None = None,
    max_length: int = 128,
    batch_size: int = 64,
    weight_decay: float = 1e-3,
    max_iter: int = 200,
) -> dict:
    """Dev accuracy of a linear probe on the frozen encoder of `model_dir`, one fit per seed.

    `max_train` training sentences are drawn per seed (None: the probe's default). Returns the per-seed
    accuracies (aligned with `seeds`), their median, min and max, the dev accuracy of always answering the
    training set's commonest label (`majority`), sizes (`n_train` sentences per seed, `n_dev` scored items:
    sentences or words) and timings.

    The inputs were checked at the door, before the first probe of a run: `electra probe` and `compare` check
    the counts (at least one seed, `max_train` at least 1) with their settings and call `check_probe_inputs` on
    every probe's files and `max_length`; a Python caller does the same. They are not checked again here."""
    spec = get_probe(probe) if isinstance(probe, str) else probe
    start = time.perf_counter()
    encoder, tokenizer = load_frozen(model_dir)
    max_length = fit_length(max_length, encoder.config, "--max-length")
    data = spec.read(Path(data_root))
    chosen = training_samples(spec, data, data_root, seeds, max_train)
    union = sorted(set().union(*chosen.values()))
    dev = _spread(data.dev_inputs, spec.max_dev)
    train_x, train_y, train_rows = _features(
        spec, encoder, tokenizer, data.train_inputs, data.train_labels, union, max_length, batch_size
    )
    dev_x, dev_y, _ = _features(
        spec, encoder, tokenizer, data.dev_inputs, data.dev_labels, dev, max_length, batch_size
    )
    extracted = time.perf_counter()
    scores = []
    for seed in seeds:
        rows = torch.tensor([r for i in chosen[seed] for r in train_rows[i]], dtype=torch.long)
        labels = [train_y[r] for r in rows.tolist()]
        fitted = fit_probe(train_x[rows], labels, seed=seed, weight_decay=weight_decay, max_iter=max_iter)
        scores.append(accuracy(fitted, dev_x, dev_y))
    commonest = Counter(train_y).most_common(1)[0][0]
    done = time.perf_counter()
    return {
        "probe": spec.name,
        "model": str(model_dir),
        "model_dir": str(resolve_model_dir(model_dir)),
        "unit": spec.unit,
        "seeds": list(seeds),
        "accuracy": scores,
        "median": statistics.median(scores),
        "min": min(scores),
        "max": max(scores),
        "majority": sum(label == commonest for label in dev_y) / len(dev_y),
        "n_train": len(chosen[seeds[0]]),
        "n_dev": len(dev_y),
        "n_classes": len(set(train_y)),
        "max_length": max_length,
        "extract_seconds": round(extracted - start, 3),
        "seconds": round(done - start, 3),
    }


def _features(
    spec: ProbeSpec,
    encoder,
    tokenizer,
    inputs: list,
    labels: list,
    which: list[int],
    max_length: int,
    batch_size: int,
) -> tuple[torch.Tensor, list, dict[int, list[int]]]:
    """(features, their labels, example index -> its feature rows) for the examples `which`."""
    subset = [inputs[i] for i in which]
    if spec.unit == "sentence":
        x = sentence_features(encoder, tokenizer, subset, max_length, batch_size)
        return x, [labels[i] for i in which], {i: [r] for r, i in enumerate(which)}
    x, kept = token_features(encoder, tokenizer, subset, max_length, batch_size)
    rows: dict[int, list[int]] = {i: [] for i in which}
    for r, (s, _) in enumerate(kept):
        rows[which[s]].append(r)
    return x, [labels[which[s]][w] for s, w in kept], rows


def random_encoder_dir(model_dir: str | Path, out_dir: str | Path, seed: int = 0) -> Path:
    """Write a randomly initialised encoder with `model_dir`'s config and tokenizer to `out_dir` (the reference a
    probe's gap is measured against). The global random state is left as it was."""
    source = resolve_model_dir(model_dir)
    out_dir = Path(out_dir)
    try:
        config = AutoConfig.from_pretrained(str(source), local_files_only=True)
    except (OSError, ValueError) as exc:  # a corrupt config.json: transformers' own error, one line of it
        said = first_line(exc)
        raise UserError(f"{source}/config.json: could not be read ({said}).") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModel.from_config(config)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(source), local_files_only=True).save_pretrained(str(out_dir))
    return out_dir
