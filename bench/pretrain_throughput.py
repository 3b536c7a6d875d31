"""Training throughput of our ELECTRA step against the step users assemble from `transformers` by hand.

Baseline (measured in the same run, same shapes, same optimizer): `ElectraForMaskedLM` generator that computes
full-vocabulary logits at every position, `ElectraForPreTraining` discriminator, shared embeddings, eager
attention, fp32, Gumbel sampling over the masked rows. Ours: `electra.modeling.PretrainingModel` (logits only at
masked rows, SDPA attention, sampling from the loss's own log-probabilities), in fp32 and in bf16 autocast.

    python bench/pretrain_throughput.py --size small --batch-size 32 --steps 5

Prints tokens/s for each and the ratio to the baseline. Timings on a shared machine vary: compare the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

from electra.config import build_config
from electra.hf_configs import discriminator_hf_config, generator_hf_config
from electra.modeling import PretrainingModel, SpecialIds
from electra.train import build_optimizer

SPECIAL = SpecialIds(pad=0, cls=101, sep=102, mask=103)


class NaiveElectra(torch.nn.Module):
    """What a user writes from the transformers docs: full-sequence generator logits, HF losses."""

    def __init__(self, disc_config: ElectraConfig, gen_config: ElectraConfig):
        super().__init__()
        self.discriminator = ElectraForPreTraining(disc_config)
        self.generator = ElectraForMaskedLM(gen_config)
        self.generator.electra.embeddings = self.discriminator.electra.embeddings
        self.generator.generator_lm_head.weight = self.discriminator.electra.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask, token_type_ids):
        special = (input_ids == SPECIAL.cls) | (input_ids == SPECIAL.sep) | (input_ids == SPECIAL.pad)
        probability = torch.full(input_ids.shape, 0.15).masked_fill(special, 0.0)
        masked = torch.bernoulli(probability).bool()
        labels = input_ids.masked_fill(~masked, -100)
        masked_input = input_ids.clone()
        masked_input[masked & (torch.rand(input_ids.shape) < 0.85)] = SPECIAL.mask
        gen = self.generator(
            masked_input, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels
        )
        with torch.no_grad():
            logits = gen.logits[masked].float()
            gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp(1e-9, 1 - 1e-9)))
            sampled = (logits + gumbel).argmax(-1)
        corrupted = input_ids.clone()
        corrupted[masked] = sampled
        disc_labels = (corrupted != input_ids).long()
        disc = self.discriminator(
            corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=disc_labels
        )
        return gen.loss + 50.0 * disc.loss


def make_batch(batch_size: int, length: int, vocab: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(1000, vocab, (batch_size, length))
    ids[:, 0] = SPECIAL.cls
    ids[:, length // 2] = SPECIAL.sep
    ids[:, -1] = SPECIAL.sep
    types = torch.zeros_like(ids)
    types[:, length // 2 + 1 :] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": types}


def time_steps(step, steps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="small")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--no-bf16", action="store_true", help="skip the bf16 autocast measurement")
    args = parser.parse_args()

    config = build_config(
        args.size, overrides={"vocab_size": args.vocab_size, "max_seq_length": args.seq_len}
    )
    batch = make_batch(args.batch_size, args.seq_len, args.vocab_size)
    tokens = args.batch_size * args.seq_len
    results: dict[str, float] = {}

    def measure(name: str, model: torch.nn.Module, loss_of, autocast: bool = False) -> None:
        torch.manual_seed(0)
        optimizer = build_optimizer(model, config)
        context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()

        def step():
            with context:
                loss = loss_of(model)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        times = time_steps(step, args.steps, args.warmup)
        results[name] = tokens / statistics.median(times)
        print(
            f"{name:<28} {results[name]:>9.0f} tok/s   (median of {args.steps} steps, {statistics.median(times):.2f} s/step)",
            flush=True,
        )

    print(
        f"size={args.size} batch={args.batch_size} seq={args.seq_len} vocab={args.vocab_size} threads={torch.get_num_threads()}"
    )
    torch.manual_seed(0)
    eager = build_config(args.size, overrides={"vocab_size": args.vocab_size, "attn_implementation": "eager"})
    naive = NaiveElectra(discriminator_hf_config(eager), generator_hf_config(eager)).train()
    measure("baseline (HF, naive, fp32)", naive, lambda m: m(**batch))
    del naive
    ours = PretrainingModel(config, SPECIAL).train()
    measure("ours fp32", ours, lambda m: m(**batch).loss)
    if not args.no_bf16:
        measure("ours bf16 autocast", ours, lambda m: m(**batch).loss, autocast=True)
    base = results["baseline (HF, naive, fp32)"]
    for name, value in results.items():
        print(f"ratio {name:<28} {value / base:5.2f}x")


if __name__ == "__main__":
    main()
