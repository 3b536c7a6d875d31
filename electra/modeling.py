"""The pretraining model: mask -> generator -> corrupted input -> discriminator, with the loss and its metrics.

Reads top-down like the reference `PretrainingModel`. Which generator and which discriminator loss are used is
decided by `config.objective` and `config.generator`; each is a small module behind a narrow seam
(`generators.base.Generator`, a loss function per objective), so new objectives plug in here without touching
the data pipeline or the training loop.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from discriminators.replaced_token import ReplacedTokenDiscriminator, replaced_token_loss
from electra.config import PretrainConfig
from electra.hf_configs import discriminator_hf_config, generator_hf_config
from electra.masking import apply_mask_tokens, choose_positions, sample_from_log_probs, sample_tokens
from generators.base import Generator
from generators.masked_lm import MaskedLMGenerator
from generators.unigram import UnigramGenerator


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> SpecialIds:
        return cls(
            tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id
        )


@dataclass
class PretrainingOutput:
    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


class PretrainingModel(nn.Module):
    def __init__(self, config: PretrainConfig, special: SpecialIds, token_counts=None):
        super().__init__()
        self.config = config
        self.special = special
        self.register_buffer(
            "special_ids",
            torch.tensor([special.pad, special.cls, special.sep, special.mask]),
            persistent=False,
        )
        if config.objective == "mlm":
            self.discriminator = None
            self.generator = MaskedLMGenerator(discriminator_hf_config(config, special.pad))
            return
        if config.objective in ("replace-mlm", "all-tokens-mlm"):  # efficiency-analysis variants
            from electra.stepping_stones import build_main_model

            self.discriminator = build_main_model(config, special.pad)
            self.generator = self._build_generator(config, token_counts)
            return
        self.discriminator = ReplacedTokenDiscriminator(discriminator_hf_config(config, special.pad))
        self.generator = self._build_generator(config, token_counts)
        self._init_head_at_base_rate()

    def _init_head_at_base_rate(self) -> None:
        """Start the discriminator's output at the base rate of its labels instead of 0.

        From a zero bias the first steps must move every output by about log(p / (1 - p)); Adam moves each weight
        by ~lr per step, so the cheapest route is to collapse all token states onto one vector, and the encoder then
        needs hundreds of steps to recover (seen on `tiny`, where accuracy sat at the always-"original" baseline).
        Starting at the prior removes that push. Electric's head starts at its NCE offset for the same reason.
        """
        head = self.discriminator.model.discriminator_predictions
        if self.config.objective == "electric":
            from discriminators.energy import init_energy_offset

            init_energy_offset(head, self.config.vocab_size, self.config.mask_prob)
            return
        # ELECTRA 15% scores only the masked positions, most of which start out replaced: there the prior is ~even.
        p = 0.5 if self.config.objective == "electra-15" else self.config.mask_prob
        with torch.no_grad():
            head.dense_prediction.bias.fill_(math.log(p / (1.0 - p)))

    def _build_generator(self, config: PretrainConfig, token_counts) -> Generator:
        shared = self.discriminator.encoder.embeddings if config.embedding_sharing != "none" else None
        if config.generator == "unigram":
            if token_counts is None:
                raise ValueError("the unigram generator needs corpus token counts")
            return UnigramGenerator(
                token_counts, [self.special.pad, self.special.cls, self.special.sep, self.special.mask]
            )
        if config.generator == "two-tower":
            from generators.two_tower import TwoTowerGenerator

            return TwoTowerGenerator(config, shared_embeddings=shared)
        encoder = self.discriminator.encoder if config.embedding_sharing == "all" else None
        return MaskedLMGenerator(
            generator_hf_config(config, self.special.pad), shared_embeddings=shared, shared_encoder=encoder
        )

    @property
    def encoder(self) -> nn.Module:
        """The `transformers.ElectraModel` that is kept and fine-tuned."""
        if self.discriminator is None:
            return self.generator.model.electra
        return self.discriminator.encoder

    # ------------------------------------------------------------------
    def forward(self, input_ids, attention_mask, token_type_ids=None) -> PretrainingOutput:
        cfg = self.config
        positions = choose_positions(input_ids, attention_mask, self.special_ids, cfg.mask_prob)
        targets = input_ids[positions]
        if cfg.objective == "mlm":
            return self._mlm_step(input_ids, attention_mask, token_type_ids, positions, targets)
        if cfg.objective == "electric":
            return self._electric_step(input_ids, attention_mask, token_type_ids, positions)
        if cfg.objective in ("electra-15", "replace-mlm", "all-tokens-mlm"):
            from electra.stepping_stones import stepping_stone_step

            return stepping_stone_step(self, input_ids, attention_mask, token_type_ids, positions)

        corrupted, logits, log_probs = self.corrupt(input_ids, attention_mask, token_type_ids, positions)
        is_replaced = corrupted != input_ids  # a sample equal to the original counts as original

        disc_logits = self.discriminator(corrupted, attention_mask, token_type_ids)
        disc_loss = replaced_token_loss(disc_logits, is_replaced, attention_mask)
        loss = cfg.discriminator_loss_weight * disc_loss
        metrics = {"discriminator_loss": disc_loss.detach()}
        if self.generator.trainable:
            gen_loss = F.nll_loss(log_probs, targets)
            loss = loss + cfg.generator_loss_weight * gen_loss
            metrics["generator_loss"] = gen_loss.detach()
        metrics.update(_generator_metrics(logits, targets))
        metrics.update(_discriminator_metrics(disc_logits, is_replaced, attention_mask))
        metrics["loss"] = loss.detach()
        return PretrainingOutput(loss, metrics)

    def corrupt(self, input_ids, attention_mask, token_type_ids, positions):
        """ELECTRA's corruption: the generator reads the (masked) input and its samples replace the picked positions.

        Returns (corrupted ids, generator logits at the picked positions, their fp32 log-probabilities).
        """
        cfg = self.config
        generator_input = input_ids
        if self.generator.needs_masked_input:
            generator_input = apply_mask_tokens(
                input_ids,
                positions,
                self.special.mask,
                cfg.vocab_size,
                cfg.mask_token_prob,
                cfg.random_token_prob,
            )
        logits = self.generator.logits_at(generator_input, attention_mask, token_type_ids, positions)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        if cfg.sampling_temperature == 1.0:
            samples = sample_from_log_probs(log_probs)
        else:
            samples = sample_tokens(logits, cfg.sampling_temperature)
        return input_ids.masked_scatter(positions, samples), logits, log_probs

    def _mlm_step(self, input_ids, attention_mask, token_type_ids, positions, targets) -> PretrainingOutput:
        cfg = self.config
        masked = apply_mask_tokens(
            input_ids,
            positions,
            self.special.mask,
            cfg.vocab_size,
            cfg.mask_token_prob,
            cfg.random_token_prob,
        )
        logits = self.generator.logits_at(masked, attention_mask, token_type_ids, positions)
        loss = F.cross_entropy(logits.float(), targets)
        metrics = {"mlm_loss": loss.detach(), "loss": loss.detach()}
        metrics.update(
            {k.replace("generator", "mlm"): v for k, v in _generator_metrics(logits, targets).items()}
        )
        return PretrainingOutput(loss, metrics)

    def _electric_step(self, input_ids, attention_mask, token_type_ids, positions) -> PretrainingOutput:
        from discriminators.energy import electric_training_step

        return electric_training_step(self, input_ids, attention_mask, token_type_ids, positions)

    # ------------------------------------------------------------------
    def export(self, output_dir: str | Path, tokenizer) -> dict[str, Path]:
        """Hugging Face directories: what `transformers` (and the fine-tuners here) load directly."""
        output_dir = Path(output_dir)
        written: dict[str, Path] = {}
        if self.discriminator is None:
            written["mlm"] = _save_hf(self.generator.hf_model(), output_dir / "mlm", tokenizer, self.config)
            finetune = "mlm"
        else:
            written["discriminator"] = _save_hf(
                self.discriminator.model, output_dir / "discriminator", tokenizer, self.config
            )
            finetune = "discriminator"
            if isinstance(self.generator, MaskedLMGenerator):
                written["generator"] = _save_hf(
                    self.generator.hf_model(), output_dir / "generator", tokenizer, self.config
                )
            elif hasattr(self.generator, "save_pretrained"):
                self.generator.save_pretrained(output_dir / "generator")
                tokenizer.save_pretrained(str(output_dir / "generator"))
                written["generator"] = output_dir / "generator"
        (output_dir / "export.json").write_text(
            json.dumps(
                {
                    "objective": self.config.objective,
                    "finetune": finetune,
                    "dirs": {k: v.name for k, v in written.items()},
                },
                indent=2,
            )
            + "\n"
        )
        return written


def _save_hf(model, directory: Path, tokenizer, config: PretrainConfig) -> Path:
    model.config.electra_objective = config.objective
    model.save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))
    return directory


def finetune_dir(run_dir: str | Path) -> Path:
    """The export a fine-tuner should load from a pretraining run directory (discriminator, or the MLM model)."""
    run_dir = Path(run_dir)
    meta = run_dir / "export.json"
    if meta.is_file():
        return run_dir / json.loads(meta.read_text())["finetune"]
    return run_dir


def _generator_metrics(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {"generator_accuracy": (logits.argmax(-1) == targets).float().mean()}


def _discriminator_metrics(logits, is_replaced, attention_mask) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        real = attention_mask.bool()
        predicted = (logits > 0) & real
        actual = is_replaced & real
        n_real = real.sum().clamp_min(1)
        true_positive = (predicted & actual).sum().float()
        return {
            "discriminator_auc": _auc(logits[real].float(), actual[real]),
            "discriminator_accuracy": ((predicted == actual) & real).sum().float() / n_real,
            "replaced_precision": true_positive / predicted.sum().clamp_min(1),
            "replaced_recall": true_positive / actual.sum().clamp_min(1),
            "replaced_fraction": actual.sum().float() / n_real,
        }


def _auc(scores: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """Area under the ROC curve (Mann-Whitney): how well the scores rank replaced above original tokens.

    Accuracy stays at the always-"original" baseline until some token is judged more likely replaced than not;
    the AUC shows the discriminator learning long before that (the reference implementation logs it too).
    """
    n_pos = positive.sum()
    n_neg = positive.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return torch.tensor(float("nan"), device=scores.device)
    ranks = scores.argsort().argsort().float()
    pairs_below = ranks[positive].sum() - n_pos * (n_pos - 1) / 2
    return pairs_below / (n_pos * n_neg)


def build_pretraining_model(config: PretrainConfig, tokenizer, token_counts=None) -> PretrainingModel:
    """Sizes the vocabulary from the tokenizer (so a trained WordPiece of any size just works) and builds the model."""
    if config.vocab_size != len(tokenizer):
        config.vocab_size = len(tokenizer)
    return PretrainingModel(config, SpecialIds.from_tokenizer(tokenizer), token_counts=token_counts)
