"""The behaviour trace that guards refactors: what a fixed-seed `tiny` run computes, step by step.

It records, through the command line only (so the same recorder runs before and after a change of internals):
every logged metric of the first 20 steps of `tiny` on the embedded corpus (with a vocabulary derived from it
deterministically) for every built-in objective; the dev
Pearson and Spearman correlations of one short GLUE fine-tune of the ELECTRA run's discriminator on a small
STS-B-format task written here; and the PLL of five sentences under every scoring method the runs support.

    python -m tests.golden_trace --write tests/golden/trace.json   # re-record (say why in the commit)

`tests/test_golden_trace.py` replays it and compares.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OBJECTIVES = ("electra", "mlm", "electric", "electra-tt", "electra-15", "replace-mlm", "all-tokens-mlm")
STEPS = 20
SENTENCES = (
    "The function returns a new list of the values.",
    "A module is a file that holds definitions and statements.",
    "values list the of new returns function a The.",
    "Errors should never pass silently unless explicitly silenced.",
    "The interpreter reads each line and runs it at once.",
)
# (scoring method, objective whose run provides it, directory inside the run, score options)
SCORING = (
    ("electric", "electric", "", {}),
    ("cloze", "electric", "", {}),
    ("electra-tt", "electra-tt", "", {}),
    ("mlm", "mlm", "", {}),
    ("mlm", "electra", "generator", {}),
    ("mlm", "replace-mlm", "discriminator", {"within_word": "whole"}),
)
WORDS = (
    "module",
    "function",
    "class",
    "list",
    "error",
    "file",
    "loop",
    "string",
    "value",
    "name",
    "test",
    "line",
)


def export_word_model(directory: Path, layers: int = 1) -> Path:
    """A randomly initialised ELECTRA (hidden 32) over a vocabulary of WORDS, exported as a pretraining run into
    `directory`: small enough that a test fine-tunes it on `write_stsb`'s task several times in seconds."""
    import torch
    from transformers import ElectraTokenizerFast

    from electra.objectives import build_config
    from electra.training.model import build_pretraining_model

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", *WORDS]
    tokenizer = ElectraTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    small = dict(
        hidden_size=32,
        num_hidden_layers=layers,
        intermediate_size=64,
        num_attention_heads=2,
        embedding_size=16,
    )
    torch.manual_seed(0)
    build_pretraining_model(build_config("tiny", overrides=small), tokenizer).export(directory, tokenizer)
    return directory


def write_stsb(directory: Path, seed: int = 0) -> Path:
    """A small STS-B-format task: sentence pairs scored 0-5 by how many words they share (a continuous dev metric,
    so any change in what fine-tuning computes shows in the Spearman correlation)."""
    rng = random.Random(seed)
    root = directory / "STS-B"
    root.mkdir(parents=True, exist_ok=True)
    for name, size in (("train.tsv", 160), ("dev.tsv", 64)):
        rows = ["sentence1\tsentence2\tscore"]
        for _ in range(size):
            first = rng.sample(WORDS, 5)
            shared = rng.randrange(6)
            second = first[:shared] + rng.sample([w for w in WORDS if w not in first], 5 - shared)
            rng.shuffle(second)
            rows.append(f"the {' '.join(first)}\tthe {' '.join(second)}\t{shared:.1f}")
        (root / name).write_text("\n".join(rows) + "\n")
    return directory


def corpus_and_vocab(workdir: Path) -> tuple[Path, Path, str]:
    """The embedded corpus, its SHA-256, and a vocabulary derived from it deterministically.

    WordPiece training (`tokenizers`) is not reproducible from one process to the next (the vocabulary's content
    and order change), so the trace uses a frequency vocabulary with sorted ties instead: every character, its
    `##` continuation, and the most frequent lower-cased words.
    """
    import hashlib
    from collections import Counter

    from tokenizers import normalizers, pre_tokenizers

    from electra.data.embedded_corpus import ensure_embedded_corpus

    corpus = ensure_embedded_corpus(workdir / "cache" / "corpus")
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    splitter = pre_tokenizers.BertPreTokenizer()
    words: Counter = Counter()
    for line in corpus.read_text(encoding="utf-8").splitlines():
        text = normalizer.normalize_str(json.loads(line)["text"])
        words.update(word for word, _ in splitter.pre_tokenize_str(text))
    chars = sorted({c for word in words for c in word})
    frequent = [w for w, _ in sorted(words.items(), key=lambda item: (-item[1], item[0])) if len(w) > 1][
        :3000
    ]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars), *frequent]
    vocab = workdir / "vocab.txt"
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return corpus, vocab, digest


def pretrain(objective: str, workdir: Path, cache: Path, corpus: Path, vocab: Path) -> Path:
    from electra.app.cli import main

    output = workdir / f"run-{objective}"
    code = main(
        [
            "pretrain",
            "--size",
            "tiny",
            "--objective",
            objective,
            "--max-steps",
            str(STEPS),
            "--seed",
            "42",
            "--set",
            "log_every=1",
            "--set",
            "save_every=1000",
            "--set",
            "eval_fraction=0",  # the trace pins what training computes; held-out evaluation came later
            "--output",
            str(output),
            "--corpus",
            str(corpus),
            "--vocab",
            str(vocab),
            "--cache-dir",
            str(cache),
            "--no-plot",
        ]
    )
    if code != 0:
        raise RuntimeError(f"pretraining {objective} exited with {code}")
    return output


def step_metrics(run_dir: Path) -> list[dict[str, float]]:
    """Every training metric of every logged step except the wall-clock ones."""
    from electra.training.run_log import read_metrics

    timing = {"tokens_per_second", "elapsed_seconds", "mfu"}
    return [{k: v for k, v in row.items() if k not in timing} for row in read_metrics(run_dir, "train")]


def glue_metrics(model_dir: Path, workdir: Path) -> dict[str, float]:
    from electra.app.cli import main

    data = write_stsb(workdir / "glue")
    out = workdir / "glue-out"
    code = main(
        [
            "glue",
            "--model",
            str(model_dir),
            "--task",
            "stsb",
            "--data-dir",
            str(data),
            "--max-steps",
            "20",
            "--learning-rate",
            "1e-3",
            "--max-seq-length",
            "32",
            "--batch-size",
            "16",
            "--seed",
            "3",
            "--output",
            str(out),
        ]
    )
    if code != 0:
        raise RuntimeError(f"glue exited with {code}")
    return json.loads((out / "results.json").read_text())["results"]["stsb"]["medians"]


def plls(runs: dict[str, Path]) -> dict[str, list[float]]:
    from electra.pll.scoring import load_scorer

    out = {}
    for method, objective, inside, options in SCORING:
        model_dir = runs[objective] / inside if inside else runs[objective]
        scorer = load_scorer(model_dir, method=method, device="cpu", batch_size=8, **options)
        key = f"{method}@{objective}" + "".join(f",{k}={v}" for k, v in options.items())
        out[key] = scorer.sentence_plls(list(SENTENCES))
    return out


def torch_release() -> str:
    """major.minor of the running torch: within one release the kernels sum in the same order on every host of a
    kind; across releases they need not."""
    from electra.training.pretraining import torch_release as release

    return ".".join(str(part) for part in release())


def cpu_kind() -> str:
    """The vector instructions ATen's CPU kernels run with (AVX2, AVX512, ...): MKL and ATen pick kernels by them,
    and their sums run in another order on another kind (an AVX-512 Xeon moved a gradient norm of a trace recorded
    on an AVX2 EPYC by 5e-4 at step 15 of 20)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def record(workdir: Path) -> dict:
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    cache = workdir / "cache"
    corpus, vocab, digest = corpus_and_vocab(workdir)
    runs = {objective: pretrain(objective, workdir, cache, corpus, vocab) for objective in OBJECTIVES}
    return {
        "corpus_sha256": digest,
        "torch": torch_release(),
        "cpu": cpu_kind(),
        "steps": {objective: step_metrics(run) for objective, run in runs.items()},
        "glue_stsb": glue_metrics(runs["electra"] / "discriminator", workdir),
        "pll": plls(runs),
    }


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", type=Path, help="where to write the trace JSON")
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary directory)")
    args = parser.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        trace = record(args.workdir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trace = record(Path(tmp))
    text = json.dumps(trace, indent=1, sort_keys=True) + "\n"
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
