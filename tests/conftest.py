"""Shared fixtures: the real public data beside the checkout, and small local models."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def lock_held_elsewhere(directory: Path) -> Iterator[int]:
    """`directory`'s run lock held by another live process, as a second command meets a running one; yields that
    process's pid. The process is killed on the way out (the kernel then releases its lock)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from electra.core.output_lock import output_lock\n"
            f"with output_lock({str(directory)!r}):\n    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _shared_data_dir() -> Path | None:
    candidates = [
        os.environ.get("ELECTRA_SHARED_DATA"),
        REPO.parent / "shared" / "data",
        REPO / "shared" / "data",
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (or $ELECTRA_SHARED_DATA); tests that need real data skip with a reason when it is absent."""
    path = _shared_data_dir()
    if path is None:
        pytest.skip("real data not found: put it at ../shared/data or set ELECTRA_SHARED_DATA")
    return path


MICRO = dict(
    hidden_size=32,
    num_hidden_layers=2,
    intermediate_size=64,
    num_attention_heads=2,
    embedding_size=24,
    generator_hidden_multiplier=0.5,
    max_position_embeddings=64,
    max_seq_length=48,
    tokenizer_vocab_size=600,
    train_batch_size=8,
    warmup_steps=2,
    max_steps=6,
    log_every=2,
    save_every=3,
    learning_rate=1e-3,
)


@pytest.fixture
def micro_overrides() -> dict:
    """A model small enough that a few optimizer steps take well under a second."""
    return dict(MICRO)


SAMPLE_TEXT = (
    "The committee met on Tuesday to review the annual budget. Members asked about the rising cost of repairs. "
    "The chairman said the report would be ready next month. Several residents attended the meeting.\n\n"
    "A storm crossed the coast during the night. Power lines fell in three towns. Crews worked until dawn to "
    "restore service. Schools opened late the following morning.\n\n"
    "The library added new books to its collection. Children gathered for the reading hour on Saturday. "
    "Volunteers sorted donations in the back room. The librarian thanked everyone for their help.\n\n"
)


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    """A few hundred short documents of plain English, written to a directory of text files."""
    directory = tmp_path / "corpus"
    directory.mkdir()
    for i in range(12):
        (directory / f"doc{i:02d}.txt").write_text(SAMPLE_TEXT * 6)
    return directory


NOUNS = (
    "committee council farmer teacher river bridge library storm village doctor harbor market garden engine "
    "student captain window letter school station mountain painter kitchen soldier museum island valley"
).split()
VERBS = (
    "visited repaired crossed painted opened closed watched described measured carried found praised".split()
)
ADJECTIVES = "old new quiet busy narrow wide bright dark small large early late northern southern".split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()


def write_distinct_corpus(directory: Path, documents: int = 12, sentences: int = 60, seed: int = 0) -> Path:
    """`documents` text files of plain English in which no two sentences repeat (each draws its words and a number
    from a seeded generator), so every packed example differs from every other: a resume that starts one batch off
    trains on other text, which a corpus of repeated paragraphs can hide."""
    import random

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for i in range(documents):
        paragraphs = []
        for _ in range(sentences // 6):
            lines = []
            while len(lines) < 6:
                a, b = rng.sample(NOUNS, 2)
                line = (
                    f"The {rng.choice(ADJECTIVES)} {a} {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} {b} "
                    f"on {rng.choice(DAYS)} at {rng.randrange(1, 13)} with {rng.randrange(2, 500)} people."
                )
                if line not in seen:
                    seen.add(line)
                    lines.append(line)
            paragraphs.append(" ".join(lines))
        (directory / f"doc{i:02d}.txt").write_text("\n\n".join(paragraphs) + "\n")
    return directory


@pytest.fixture
def distinct_corpus(tmp_path) -> Path:
    """Twelve documents of 60 sentences, no sentence twice (`write_distinct_corpus`)."""
    return write_distinct_corpus(tmp_path / "distinct-corpus")


@pytest.fixture(scope="session")
def sample_tokenizer():
    """A 400-piece WordPiece vocabulary of SAMPLE_TEXT: enough for micro models."""
    from electra.data.tokenization import train_wordpiece_tokenizer

    return train_wordpiece_tokenizer([SAMPLE_TEXT] * 5, vocab_size=400)


def pair_batch(tokenizer) -> dict:
    """Two padded sentence pairs: the batch the model tests step on."""
    enc = tokenizer(
        ["The committee met on Tuesday to review the annual budget.", "Crews worked until dawn."],
        ["Members asked about the rising cost.", "Schools opened late."],
        padding=True,
        return_tensors="pt",
    )
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def save_tiny_electra(directory: Path, dropout: bool = True) -> Path:
    """A tiny random ELECTRA encoder (seed 0) and its word-level tokenizer saved as `transformers` saves them, for
    fine-tuning tests that need no shared data; `dropout=False` makes its outputs independent of the random stream
    (runs over several processes draw differently)."""
    import torch
    from transformers import ElectraConfig, ElectraModel, ElectraTokenizerFast

    from tests.golden_trace import WORDS

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "what", "?", *WORDS]
    tokenizer = ElectraTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    torch.manual_seed(0)
    config = ElectraConfig(
        vocab_size=len(vocab),
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        **({} if dropout else {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
    )
    ElectraModel(config).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def run_command_as(name: str, work) -> int:
    """`electra NAME` with the command's work replaced by `work(args)`: what `cli.main` does around any command
    (its one-line errors, signals, exit statuses) checked on work the test controls."""
    import argparse

    from electra.app import cli

    built = cli.build_parser

    def build_parser(command=None):
        parser = built(command)
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[name].set_defaults(func=work)
        return parser

    cli.build_parser = build_parser
    try:
        return cli.main([name])
    finally:
        cli.build_parser = built


@contextlib.contextmanager
def killed_after_checkpoint(monkeypatch, step: int, where: str = "") -> Iterator[None]:
    """Inside, the engine raises KeyboardInterrupt right after it writes the checkpoint of `step` (in a folder
    whose path contains `where`), as a kill there would; the real save is back on leaving."""
    import electra.training.run_checkpoints as checkpoints_module

    real = checkpoints_module.save_checkpoint

    def save_then_die(directory, at, *args, **kwargs):
        path = real(directory, at, *args, **kwargs)
        if at == step and where in str(directory):
            raise KeyboardInterrupt(f"killed after the step-{step} checkpoint")
        return path

    monkeypatch.setattr(checkpoints_module, "save_checkpoint", save_then_die)
    try:
        yield
    finally:
        monkeypatch.setattr(checkpoints_module, "save_checkpoint", real)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread inside: tiny LSTMs on a busy machine ran each step 100x slower with two threads
    handing work back and forth."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pretrain_child(
    corpus: Path, output: Path, cache: Path, settings: dict, resume: bool = False
) -> list[str]:
    """`python -m electra pretrain` at tiny as a child process runs it, `settings` as --set flags (quiet: no plot,
    no progress bars)."""
    import sys

    command = [sys.executable, "-m", "electra", "pretrain", "--size", "tiny", "--corpus", str(corpus)]
    command += ["--output", str(output), "--cache-dir", str(cache), "--no-plot", "--no-progress"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    return command + (["--resume"] if resume else [])


def one_thread_environment() -> dict[str, str]:
    """One thread in every process: the same kernels sum in the same order, so two runs can agree bit for bit."""
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
