"""The probes by name and what each reads, checked before any model is probed (`check_probe_inputs`): `electra
probe` and `compare` ask here first, so a run of several probes and models does not die at the last one, its
earlier results lost, on a file or a length it could have been refused at the start. The probe itself
(`electra.probes.run`) trusts what passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.core.errors import UserError
from electra.probes.data import DEV_EVERY, read_brown, read_sst2, split_brown

MIN_MAX_LENGTH = 3  # [CLS], one word-piece, [SEP]


@dataclass
class ProbeData:
    """Train and dev examples: a text (sentence probes) or a word list (token probes) with its label(s)."""

    train_inputs: list
    train_labels: list  # one label per sentence, or one list of tags per sentence
    dev_inputs: list
    dev_labels: list


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    description: str
    unit: str  # "sentence": one label per text; "token": one label per word, features at its first piece
    read: Callable[[Path], ProbeData]  # data root (the folder holding glue/ and corpus/) -> the examples
    # what `read` opens, relative to the data root (checked before any probe runs); the first holds the training
    # examples (what a one-class refusal names)
    needs: tuple[str, ...]
    default_max_train: int | None  # training sentences when the caller gives none (None: all)
    max_dev: int | None  # dev sentences kept, evenly spaced (None: all)


def _need(path: Path, probe: str, what: str) -> Path:
    if not path.exists():
        raise UserError(
            f"{path}: not found; the {probe} probe reads {what} under the data folder (--data, the folder "
            "holding glue/ and corpus/)."
        )
    return path


def _read_sst2(root: Path) -> ProbeData:
    folder = root / "glue" / "SST-2"
    train = read_sst2(_need(folder / "train.tsv", "sst2", "glue/SST-2/train.tsv"))
    dev = read_sst2(_need(folder / "dev.tsv", "sst2", "glue/SST-2/dev.tsv"))
    return ProbeData(train[0], train[1], dev[0], dev[1])


def _read_pos(root: Path) -> ProbeData:
    folder = _need(root / "corpus" / "brown", "pos", "corpus/brown/")
    train, dev = split_brown(read_brown(folder))
    if not train or not dev:  # fewer than DEV_EVERY sentences: nothing to score the probe on
        raise UserError(
            f"{folder}: {len(train) + len(dev)} tagged sentences, too few for a dev split (every "
            f"{DEV_EVERY}th sentence); give the whole Brown corpus."
        )

    def unzip(sentences):
        return [[w for w, _ in s] for s in sentences], [[t for _, t in s] for s in sentences]

    return ProbeData(*unzip(train), *unzip(dev))


PROBES: dict[str, ProbeSpec] = {
    "sst2": ProbeSpec(
        "sst2",
        "SST-2 sentiment from the mean of the last layer (dev: SST-2 dev, 872 sentences)",
        "sentence",
        _read_sst2,
        ("glue/SST-2/train.tsv", "glue/SST-2/dev.tsv"),
        default_max_train=10000,  # a seed's own sample: the spread over seeds is the probe's noise
        max_dev=None,
    ),
    "pos": ProbeSpec(
        "pos",
        "Brown part-of-speech base tag of each word from its first word-piece (dev: every 10th sentence)",
        "token",
        _read_pos,
        ("corpus/brown",),
        default_max_train=2000,  # ~40k words: L-BFGS over ~140 tags stays a few seconds on a CPU
        max_dev=1000,
    ),
}


def get_probe(name: str) -> ProbeSpec:
    if name not in PROBES:
        raise UserError(f"unknown probe {name!r}; choose from {', '.join(PROBES)}.")
    return PROBES[name]


def parse_probe_list(value: str) -> list[ProbeSpec]:
    """A comma list of probe names (order kept, duplicates dropped)."""
    specs = [get_probe(part.strip()) for part in value.split(",") if part.strip()]
    if not specs:
        raise UserError(f"--probes is empty; name one or more of {', '.join(PROBES)}.")
    return list(dict.fromkeys(specs))


def check_probe_inputs(specs: Sequence[ProbeSpec], data_root: str | Path, max_length: int) -> None:
    """One line for a data file a probe would read that is missing, or a --max-length with no room for a word,
    asked before any model is probed: a run of several probes and models must not die at the last one, its
    earlier results lost."""
    if max_length < MIN_MAX_LENGTH:
        raise UserError(
            f"--max-length must be at least {MIN_MAX_LENGTH} ([CLS], one word-piece, [SEP]), got {max_length}; "
            "below that the tokenizer keeps no word (or does not truncate at all)."
        )
    for spec in specs:
        for relative in spec.needs:
            _need(Path(data_root) / relative, spec.name, relative)
