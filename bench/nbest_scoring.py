"""Cloze scoring of n-best lists: towers run once per distinct prefix/suffix (the library's path) vs once per
sentence (the batched baseline it replaced), timed in the same run, with the largest score difference between them.

With a trained cloze run and a real list:

    python bench/nbest_scoring.py --model runs/scorer-cloze-words --nbest ../shared/data/asr_tts_wiki/dev.json

Without arguments: a random `tiny`-shape generator (throughput does not depend on the weights) on synthetic lists,
200 utterances of 50 hypotheses that differ from a reference by one to three edits, as recognizers' lists do.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from electra.generators.shared_towers import cloze_log_q, shared_fraction
from electra.generators.two_tower import TwoTowerGenerator
from electra.objectives import build_config
from electra.pll.nbest import read_nbest
from electra.pll.scoring import load_scorer

CLS, SEP = 2, 3


def per_sentence_log_q(
    generator: TwoTowerGenerator, sequences: list[list[int]], positions: list[list[int]], batch: int = 64
) -> list[torch.Tensor]:
    """The baseline: sentences of similar length batched with padding, both towers over every piece."""
    out: list[torch.Tensor] = [torch.zeros(0) for _ in sequences]
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        width = max(len(sequences[i]) for i in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            ids[r, : len(sequences[i])] = torch.tensor(sequences[i])
            mask[r, : len(sequences[i])] = 1
        contexts = generator.contexts(ids, mask)
        row_of = torch.tensor([r for r, i in enumerate(rows) for _ in positions[i]], dtype=torch.long)
        column = torch.tensor([t for i in rows for t in positions[i]], dtype=torch.long)
        # The same head as the library's, so the ratio measures the sharing alone.
        values = generator.log_q(contexts[row_of, column], ids[row_of, column])
        for i, piece in zip(rows, torch.split(values, [len(positions[i]) for i in rows])):
            out[i] = piece
    return out


def synthetic_lists(vocab: int, utterances: int, hypotheses: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    sentences = []
    for _ in range(utterances):
        reference = [rng.randrange(5, vocab) for _ in range(rng.randint(15, 35))]
        sentences.append([CLS, *reference, SEP])
        for _ in range(hypotheses - 1):
            words = list(reference)
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(words))
                edit = rng.choice(("substitute", "insert", "delete"))
                if edit == "substitute":
                    words[at] = rng.randrange(5, vocab)
                elif edit == "insert":
                    words.insert(at, rng.randrange(5, vocab))
                elif len(words) > 1:
                    del words[at]
            sentences.append([CLS, *words, SEP])
    return [list(s) for s in {tuple(s): None for s in sentences}]  # distinct texts, as `electra score` scores


def load_inputs(args: argparse.Namespace) -> tuple[TwoTowerGenerator, list[list[int]], list[list[int]], str]:
    if args.model:
        scorer = load_scorer(args.model, method="cloze", device="cpu")
        generator, name = scorer.generator, args.model
        if args.nbest:
            utterances, _ = read_nbest(args.nbest)
            texts = sorted({h.text for u in utterances for h in u.hyps})
            encoded = scorer.encode(texts)
            return generator, [e.ids for e in encoded], [e.scored for e in encoded], f"{name} on {args.nbest}"
    else:
        torch.manual_seed(0)
        config = build_config("tiny", overrides={"objective": "electric", "tokenizer_vocab_size": 8192})
        config.vocab_size = 8192
        generator, name = TwoTowerGenerator(config), "random tiny generator"
    sequences = synthetic_lists(generator.config.vocab_size, args.utterances, args.hypotheses)
    return generator, sequences, [list(range(1, len(s) - 1)) for s in sequences], f"{name} on synthetic lists"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="a run (or its generator/) with a two-tower generator")
    parser.add_argument("--nbest", help="an n-best JSON to score (needs --model for its tokenizer)")
    parser.add_argument("--utterances", type=int, default=200, help="synthetic lists")
    parser.add_argument("--hypotheses", type=int, default=50, help="per synthetic list")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each path, taking turns")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    generator, sequences, positions, what = load_inputs(args)
    generator.eval()
    paths = {"shared": cloze_log_q, "per_sentence": per_sentence_log_q}
    times: dict[str, list[float]] = {name: [] for name in paths}
    results = {}
    with torch.inference_mode():
        for run in paths.values():  # warm-up on an eighth
            run(generator, sequences[: len(sequences) // 8 + 1], positions[: len(sequences) // 8 + 1])
        for _ in range(args.repeats):
            for name, run in paths.items():
                start = time.perf_counter()
                results[name] = run(generator, sequences, positions)
                times[name].append(time.perf_counter() - start)
    difference = max(
        (float((a - b).abs().max()) for a, b in zip(results["shared"], results["per_sentence"]) if a.numel()),
        default=0.0,
    )
    left, right = shared_fraction(sequences)
    report = {
        "what": what,
        "threads": torch.get_num_threads(),
        "sentences": len(sequences),
        "pieces": sum(len(s) for s in sequences),
        "left_tower_nodes_per_piece": round(left, 3),
        "right_tower_nodes_per_piece": round(right, 3),
        "max_abs_difference": difference,
    }
    print(
        f"{what}: {len(sequences)} distinct sentences, {report['pieces']} pieces, {report['threads']} threads"
    )
    print(f"the towers run on {left:.0%} (left) and {right:.0%} (right) of the pieces")
    for name, seconds in times.items():
        low, mid, high = min(seconds), statistics.median(seconds), max(seconds)
        report[name] = {"min_s": round(low, 2), "median_s": round(mid, 2), "max_s": round(high, 2)}
        report[name]["sentences_per_s"] = round(len(sequences) / mid, 1)
        print(
            f"{name:>13}: {mid:7.2f} s median (min {low:.2f}, max {high:.2f}), {len(sequences) / mid:7.1f} sentences/s"
        )
    ratio = statistics.median(times["per_sentence"]) / statistics.median(times["shared"])
    report["speedup"] = round(ratio, 2)
    print(f"shared / per-sentence: {ratio:.2f}x faster; largest score difference {difference:.2e} nats")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
