"""Sentences/s of Electric scoring vs masked-LM PLL for the same-size model, on 20-token sentences.

Both go through the library's own scorers with the same batch size (sentences per forward for Electric, masked
copies per forward for the masked LM, whose LM head runs at the masked position only — the fastest fair
baseline). Weights are random: throughput does not depend on them. Electric needs one forward per sentence and
the masked LM one per token, so the ratio should approach the sentence length.

    python bench/pll_throughput.py                      # ELECTRA-Small shape, CPU or the visible GPU
    python bench/pll_throughput.py --size tiny --sentences 64
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining, ElectraTokenizerFast

from electra.objectives import build_config
from electra.pll.model_dirs import pick_device
from electra.pll.scoring import ElectricScorer, MaskedLMScorer

REPO = Path(__file__).resolve().parents[1]


def load_tokenizer() -> ElectraTokenizerFast:
    """The BERT uncased WordPiece vocabulary from ../shared/data when present, else a synthetic one."""
    vocab_file = REPO.parent / "shared" / "data" / "bert_vocab" / "vocab.txt"
    if vocab_file.is_file():
        words = vocab_file.read_text(encoding="utf-8").splitlines()
    else:
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [_letters(i) for i in range(30517)]
    return ElectraTokenizerFast(vocab={w: i for i, w in enumerate(words)})


def _letters(index: int) -> str:
    """A distinct four-letter lowercase word per index: `make_sentences` draws whole alphabetic words only."""
    return "".join(chr(ord("a") + index // 26**power % 26) for power in (3, 2, 1, 0))


def make_sentences(tokenizer: ElectraTokenizerFast, count: int, length: int, seed: int) -> list[str]:
    """`count` sentences of exactly `length` word pieces, from whole-word vocabulary entries."""
    rng = random.Random(seed)
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and w.islower() and len(w) > 2]
    out = []
    while len(out) < count:
        sentence = " ".join(rng.choice(words) for _ in range(length))
        if len(tokenizer(sentence)["input_ids"]) == length + 2:
            out.append(sentence)
    return out


def hf_config(size: str, vocab_size: int) -> ElectraConfig:
    cfg = build_config(size)
    return ElectraConfig(
        vocab_size=vocab_size,
        embedding_size=cfg.embedding_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
    )


def _timed(scorer, sentences: list[str]) -> float:
    if scorer.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    scorer.score(sentences)
    if scorer.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(scorers: dict, sentences: list[str], repeats: int) -> dict[str, float]:
    """Sentences/s of each scorer, best of `repeats`; the scorers take turns so load changes hit both alike."""
    for scorer in scorers.values():
        scorer.score(sentences[: max(1, len(sentences) // 8)])  # warm-up (allocator, kernels)
    best = {name: float("inf") for name in scorers}
    for _ in range(repeats):
        for name, scorer in scorers.items():
            best[name] = min(best[name], _timed(scorer, sentences))
    return {name: len(sentences) / seconds for name, seconds in best.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="small", help="model size preset (tiny, mini, small, base, large)")
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--length", type=int, default=20, help="word pieces per sentence")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs; the best is reported")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = pick_device(args.device)
    tokenizer = load_tokenizer()
    sentences = make_sentences(tokenizer, args.sentences, args.length, seed=0)
    config = hf_config(args.size, len(tokenizer))
    electric = ElectricScorer(ElectraForPreTraining(config), tokenizer, device, args.batch_size)
    mlm = MaskedLMScorer(ElectraForMaskedLM(config), tokenizer, device, args.batch_size)
    rates = measure({"electric": electric, "mlm": mlm}, sentences, args.repeats)
    electric_rate, mlm_rate = rates["electric"], rates["mlm"]
    result = {
        "size": args.size,
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "threads": torch.get_num_threads(),
        "sentence_pieces": args.length,
        "sentences": args.sentences,
        "batch_size": args.batch_size,
        "electric_sentences_per_s": round(electric_rate, 2),
        "masked_lm_pll_sentences_per_s": round(mlm_rate, 2),
        "speedup": round(electric_rate / mlm_rate, 2),
    }
    print(f"model {args.size} on {result['device']}, {args.length}-piece sentences, batch {args.batch_size}")
    print(f"Electric (one pass):     {electric_rate:10.1f} sentences/s")
    print(f"masked-LM PLL (n passes): {mlm_rate:9.1f} sentences/s")
    print(f"ratio: {electric_rate / mlm_rate:.1f}x (target >= 10x)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
