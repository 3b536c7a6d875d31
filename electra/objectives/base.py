"""What an objective is: the one class a new pretraining objective subclasses (and nothing else it must edit).

An objective declares, in one module: its name and the config defaults it needs, how its parts are built (generator
kind, discriminator head, head initialisation), the training step (batch -> loss and named metrics), what its FLOP
accounting counts, what it exports, and how its export scores text. The model (`electra.training.model`), the training
engine, `flops`, `pll`, `compare` and `tlm` read these declarations through the registry
(`electra.objectives.registry`), so adding an objective is one module and one `@register_objective`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM

from electra.core.config import PretrainConfig
from electra.core.errors import UserError
from electra.core.outputs import SpecialIds, StepOutput
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelled
from electra.export.layout import ExportPart, load_pretrained, masked_lm_dir, save_hf_model
from electra.flops.analytic import FlopPlan
from electra.flops.shapes import shape_from_any
from electra.generators.base import Generator
from electra.generators.build import build_generator
from electra.generators.frozen import FrozenMaskedLMGenerator
from electra.generators.masked_lm import MaskedLMGenerator
from electra.generators.two_tower import TwoTowerGenerator
from electra.nn.masking import apply_mask_tokens


class Parts(Protocol):
    """What an objective sees of the model it builds and steps (an `electra.training.model.PretrainingModel`)."""

    config: PretrainConfig
    special: SpecialIds
    special_ids: torch.Tensor
    word_starts: torch.Tensor | None  # [vocabulary] bool: pieces that begin a word (set when cloze_span=word)
    generator: Generator | None
    discriminator: nn.Module | None


class Objective:
    """Base class of every pretraining objective. Subclasses set `name` and implement `build`, `step` and
    `flop_plan`; the defaults below suit an objective whose kept model is `model.discriminator`."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line for `--help` and the README
    config_defaults: ClassVar[
        Mapping[str, Any]
    ] = {}  # applied between the size preset and the user's settings
    finetune_part: ClassVar[str] = "discriminator"  # the exported part a fine-tuner loads
    # The `pll` method an exported discriminator supports on its own (Electric's head is a negative energy).
    discriminator_scoring: ClassVar[str | None] = None
    # Whether the first step's measured FLOPs should match `flop_plan` (False where steps differ by design).
    startup_flop_check: ClassVar[bool] = True
    # The config values this objective trains with, declared here and refused once, in one line, by
    # `electra.objectives.check_config`: field -> (the values it may take, the rest of the line after
    # "config: objective=NAME ", where {value} is the value given). None among the values: the field stays unset.
    requires: ClassVar[Mapping[str, tuple[tuple[Any, ...], str]]] = {}

    def validate(self, config: PretrainConfig) -> None:
        """Refuse settings this objective cannot train, with a one-line `UserError`: the rules between fields
        that `requires` cannot declare (`check_config` has checked `requires` first)."""

    def build(self, model: Parts, token_counts: Any = None) -> None:
        """Attach the parts to `model` (`model.discriminator = ...`, `model.generator = ...`).

        The order of construction decides the initial weights a seed gives, and the order parts are attached
        decides parameter order: keep both fixed once an objective has been released.
        """
        raise NotImplementedError

    def step(
        self,
        model: Parts,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
    ) -> StepOutput:
        """One training forward: the loss to minimise and detached metrics (a `loss` entry among them)."""
        raise NotImplementedError

    def flop_plan(self, config: PretrainConfig) -> FlopPlan:
        """What `electra.flops.analytic.count_flops` charges for one training sequence of this objective."""
        raise NotImplementedError

    def kept_encoder(self, model: Parts) -> nn.Module:
        """The `transformers` encoder that is kept and fine-tuned."""
        return model.discriminator.encoder

    def kept_module(self, model: Parts) -> nn.Module:
        """The `transformers` model of the kept part (what the export's fine-tuning part holds)."""
        return model.discriminator.model

    def generator_module(self, model: Parts) -> nn.Module | None:
        """The generator's module as its export part stores it (None: nothing trained to load or save)."""
        if isinstance(model.generator, MaskedLMGenerator):
            return model.generator.hf_model()
        if isinstance(model.generator, TwoTowerGenerator):
            return model.generator
        return None

    def generator_kind(self, model: Parts) -> str | None:
        part = generator_export_part(model.generator, self.name)
        return part.kind if part else None

    def export_parts(self, model: Parts) -> list[ExportPart]:
        """The parts `electra.export.layout` writes: the kept model, then the generator when it has weights."""
        parts = [
            ExportPart(
                "discriminator",
                type(model.discriminator.model).__name__,
                save_hf_model(model.discriminator.model, self.name, self.discriminator_scoring),
            )
        ]
        generator = generator_export_part(model.generator, self.name)
        return parts + ([generator] if generator else [])

    def scoring(self, model: Parts) -> dict[str, list[str]]:
        """Text-scoring methods of `pll` the export supports -> the parts each reads; the first is the default.
        By default: what the exported generator can score, if anything."""
        return generator_scoring(model.generator)


def masked_input(model: Parts, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The masked LM's input: the picked positions become [MASK] (or a random token, or stay) as configured."""
    cfg = model.config
    return apply_mask_tokens(
        input_ids, positions, model.special.mask, cfg.vocab_size, cfg.mask_token_prob, cfg.random_token_prob
    )


def generator_export_part(generator: Generator | None, objective: str) -> ExportPart | None:
    """The generator as an export part: a `transformers` masked LM, or the two-tower model's own format."""
    if isinstance(generator, (MaskedLMGenerator, FrozenMaskedLMGenerator)):
        hf = generator.hf_model()
        return ExportPart("generator", type(hf).__name__, save_hf_model(hf, objective))
    if isinstance(generator, TwoTowerGenerator):
        return ExportPart("generator", "two-tower", generator.save_pretrained)
    return None  # a unigram table is rebuilt from the corpus, not exported


def generator_scoring(generator: Generator | None) -> dict[str, list[str]]:
    """What an exported generator can score: masked-LM PLL (n passes) or the two-tower cloze PLL (one pass)."""
    if isinstance(generator, (MaskedLMGenerator, FrozenMaskedLMGenerator)):
        return {"mlm": ["generator"]}
    if isinstance(generator, TwoTowerGenerator):
        return {"cloze": ["generator"]}
    return {}


def build_generator_for(
    config: PretrainConfig, special: SpecialIds, discriminator_encoder: nn.Module, token_counts: Any = None
) -> Generator:
    """The configured generator: a frozen, loaded masked LM when `generator_from` names one, else a fresh one
    (`electra.generators.build`)."""
    if config.generator_from is None:
        return build_generator(config, special, discriminator_encoder, token_counts)
    directory = masked_lm_dir(config.generator_from)
    hf_model = load_pretrained(AutoModelForMaskedLM, directory, complete=True)
    if hf_model.config.vocab_size != config.vocab_size:
        raise UserError(
            f"{directory}: the generator's vocabulary has {hf_model.config.vocab_size} entries, the run's "
            f"{config.vocab_size}; pretrain with its tokenizer ({spelled(RunInputs, 'vocab')} {directory})."
        )
    total = config.max_steps * config.gradient_accumulation_steps
    return FrozenMaskedLMGenerator(hf_model, config.generator_temperature_start, total)


def generator_flop_plan(config: PretrainConfig) -> dict[str, Any]:
    """FlopPlan fields for the generator: a frozen one is charged its own shape, forward only."""
    if config.generator_from is None:
        return {}
    hf_config = AutoConfig.from_pretrained(str(masked_lm_dir(config.generator_from)), local_files_only=True)
    return {"generator_shape": shape_from_any(hf_config), "generator_passes": 1.0}


def generator_kinds(*kinds: str) -> dict[str, tuple[tuple[Any, ...], str]]:
    """The `requires` entry of an objective that trains with one of these generator kinds."""
    return {"generator": (kinds, f"needs generator={' or '.join(kinds)}, not {{value!r}}.")}


# The `requires` entry of an objective that trains its own generator: a frozen one (generator_from) is refused.
TRAINS_ITS_GENERATOR = {"generator_from": ((None,), "trains its generator; remove generator_from.")}
