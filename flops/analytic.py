"""Analytic FLOP and parameter counts for every model this library pretrains, in the ELECTRA paper's conventions.

Why these conventions: the paper compares methods at equal *training FLOPs*, computed by a small script
(google-research/electra `flops_computation.py`). To put our runs on the same axis we count the same way, term by
term, and keep its quirks so that its published figures come out (see `electra.app.flops_paper` and `electra flops --paper`):

* A multiply-add is 2 FLOPs: a (m x k) @ (k x n) matmul costs 2mkn.
* The backward pass costs as much as the forward pass, so training = 2 x forward. (Autograd really does ~2 x the
  forward's matmuls in the backward; the paper's choice under-counts that, and we keep it for comparability.
  `electra.flops.measured` reports both conventions.)
* Embedding lookups are dense one-hot matmuls: 2*e*vocab per token for words, and 2*e*(seq_len + type_vocab) per
  token for positions and segments (the script charges a one-hot over the *sequence length*, not the table size).
* Per-element costs: dropout 4, LayerNorm 5, GELU 8, softmax 5 per element, a bias or a residual add 1, the
  attention scaling 1 per score, and 2 per vocabulary entry for picking the target word's log-probability.
* Quirk kept by default: the LayerNorm after attention is charged a flat 5 FLOPs per token instead of 5*hidden
  (`paper_quirks=False` charges 5*hidden, which changes Base by ~0.001%). Output biases of the discriminator logit
  and of the MLM softmax are not charged, as in the script; they are a few FLOPs per token.
* The generator's (or MLM model's) output head, including its hidden->embedding dense layer, is charged only for
  the predicted positions (`electra.flops.shapes.predicted_positions`): ceil(mask_prob * seq_len) by default, 20 of 128 for
  Small. The script itself charges a fixed 20/128 of every sequence, even for Large, which masks 25%; the reference
  *pretraining* code predicts int((mask_prob + 0.005) * seq_len) = 19 of 128. Choose with `output_positions`.
* Inference FLOPs are one sequence of length 128 through the kept encoder plus a per-token binary classifier (the
  discriminator head), which is how the paper's 3.7e9 / 2.9e10 were computed; no generator.

What is charged is what the objective declares it computes (`FlopPlan`, from `Objective.flop_plan`; forward, per
sequence; training doubles it):
* the kept full-size model: embeddings and layers, plus its head: ELECTRA's per-token binary classifier; Electric's
  energy head (the same dense-gelu-dense shape, plus one add per token for the noise log-probability); a masked-LM
  head at the predicted positions (the MLM baseline, Replace MLM); or at every position plus a one-unit copy
  probability, 2*hidden per token (All-Tokens MLM).
* the generator beside it: a masked LM of the configured width (runs the shared embeddings again, projects them to
  its width, layers, MLM head at predicted positions); a two-tower cloze generator (`electra.generators.two_tower`: one
  pass of the shared embeddings and projection, two generator-width towers, and one output head on the
  concatenated 2 x width states) whose vocabulary projection runs at every position (Electric needs the noise
  probability of every token; the cloze objective's loss is at every token) or at the predicted ones only (any
  objective that corrupts with ELECTRA's `corrupt`: ELECTRA, ELECTRA-TT, the stepping stones); a unigram table
  (free); or none (the MLM baseline). At the predicted positions the whole head runs there only: `head_at` picks
  the rows before its dense layer, GELU and LayerNorm.
  embedding_sharing only changes parameter counts.

The measured counterpart (`electra.flops.measured`) runs the real modules under `FlopCounterMode`; matmul terms of this
module are the ones it can see (`kind == "matmul"`), lookups and element-wise terms are convention only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from electra.core.errors import UserError
from electra.flops.shapes import (
    EncoderShape,
    discriminator_shape,
    generator_shape,
    predicted_positions,
    shape_from_any,
)

DROPOUT_FLOPS = 4  # random number, compare, mask multiply, 1/(1-p) rescale
LAYER_NORM_FLOPS = 5  # mean, variance, normalise, scale, shift
GELU_FLOPS = 8  # the tanh approximation's handful of ops
SOFTMAX_FLOPS = 5  # max-subtract, exp, sum, divide (and the log for log-softmax)
TARGET_PICK_FLOPS = 2  # per vocabulary entry: one-hot multiply and sum for the target log-probability

MATMUL, LOOKUP, ELEMENTWISE = "matmul", "lookup", "elementwise"
COMPONENTS = ("embeddings", "attention", "feed_forward", "head")


@dataclass(frozen=True)
class Term:
    """One counted operation: forward FLOPs for one sequence."""

    network: str  # discriminator | generator | generator_ltr | generator_rtl | encoder
    component: str  # embeddings | attention | feed_forward | head
    name: str
    kind: str  # matmul (a real GEMM) | lookup (one-hot convention) | elementwise
    flops: float


def _terms(network: str, component: str, tokens: float, items: list[tuple[str, str, float]]) -> list[Term]:
    """Per-token (or per-position) costs times the number of tokens they apply to."""
    return [Term(network, component, name, kind, flops * tokens) for name, kind, flops in items if flops]


def embedding_terms(shape: EncoderShape, seq_len: int, network: str) -> list[Term]:
    """Input embeddings as the paper counts them: one-hot matmuls, sum, LayerNorm, dropout, optional projection."""
    e, h = shape.embedding, shape.hidden
    items = [
        ("word_one_hot", LOOKUP, 2 * e * shape.vocab),
        ("position_and_type_one_hot", LOOKUP, 2 * e * (seq_len + shape.type_vocab)),
        ("add_position_and_type", ELEMENTWISE, 2 * e),
        ("layer_norm", ELEMENTWISE, LAYER_NORM_FLOPS * e),
        ("dropout", ELEMENTWISE, DROPOUT_FLOPS * e),
    ]
    if e != h:
        items += [("projection", MATMUL, 2 * e * h), ("projection_bias", ELEMENTWISE, h)]
    return _terms(network, "embeddings", seq_len, items)


def attention_terms(shape: EncoderShape, seq_len: int, network: str, paper_quirks: bool = True) -> list[Term]:
    """Self-attention of one layer: Q/K/V, scores, softmax, weighted values, output projection, residual, LN."""
    h, a, n, s = shape.hidden, shape.attention_width, shape.heads, seq_len
    items = [
        ("qkv", MATMUL, 3 * 2 * h * a),
        ("qkv_bias", ELEMENTWISE, 3 * a),
        ("scores", MATMUL, 2 * a * s),
        ("scale", ELEMENTWISE, s * n),
        ("softmax", ELEMENTWISE, SOFTMAX_FLOPS * s * n),
        ("probs_dropout", ELEMENTWISE, DROPOUT_FLOPS * s * n),
        ("weighted_values", MATMUL, 2 * a * s),
        ("output", MATMUL, 2 * a * h),
        ("output_bias", ELEMENTWISE, h),
        ("output_dropout", ELEMENTWISE, DROPOUT_FLOPS * h),
        ("residual", ELEMENTWISE, h),
        ("layer_norm", ELEMENTWISE, LAYER_NORM_FLOPS * (1 if paper_quirks else h)),
    ]
    return _terms(network, "attention", s, items)


def feed_forward_terms(shape: EncoderShape, seq_len: int, network: str) -> list[Term]:
    h, i = shape.hidden, shape.intermediate
    items = [
        ("intermediate", MATMUL, 2 * h * i),
        ("intermediate_bias", ELEMENTWISE, i),
        ("gelu", ELEMENTWISE, GELU_FLOPS * i),
        ("output", MATMUL, 2 * i * h),
        ("output_bias", ELEMENTWISE, h),
        ("dropout", ELEMENTWISE, DROPOUT_FLOPS * h),
        ("residual", ELEMENTWISE, h),
        ("layer_norm", ELEMENTWISE, LAYER_NORM_FLOPS * h),
    ]
    return _terms(network, "feed_forward", seq_len, items)


def encoder_terms(shape: EncoderShape, seq_len: int, network: str, paper_quirks: bool = True) -> list[Term]:
    """Embeddings plus every layer (layer terms are multiplied by the depth)."""
    layer = attention_terms(shape, seq_len, network, paper_quirks) + feed_forward_terms(
        shape, seq_len, network
    )
    scaled = [Term(t.network, t.component, t.name, t.kind, t.flops * shape.layers) for t in layer]
    return embedding_terms(shape, seq_len, network) + scaled


def mlm_head_terms(
    input_width: int, embedding: int, vocab: int, positions: float, network: str = "generator"
) -> list[Term]:
    """Masked-LM output: dense to the embedding width, GELU, LayerNorm, tied output matmul, softmax, target pick."""
    e = embedding
    items = [
        ("dense", MATMUL, 2 * input_width * e),
        ("dense_bias", ELEMENTWISE, e),
        ("gelu", ELEMENTWISE, GELU_FLOPS * e),
        ("layer_norm", ELEMENTWISE, LAYER_NORM_FLOPS * e),
        ("output", MATMUL, 2 * e * vocab),
        ("softmax", ELEMENTWISE, SOFTMAX_FLOPS * vocab),
        ("target", ELEMENTWISE, TARGET_PICK_FLOPS * vocab),
    ]
    return _terms(network, "head", positions, items)


def token_classifier_terms(hidden: int, seq_len: int, network: str = "discriminator", energy: bool = False):
    """ELECTRA's per-token binary head (dense, GELU, dense to 1); Electric's energy head has the same shape."""
    items = [
        ("dense", MATMUL, 2 * hidden * hidden),
        ("dense_bias", ELEMENTWISE, hidden),
        ("gelu", ELEMENTWISE, GELU_FLOPS * hidden),
        ("logit", MATMUL, 2 * hidden),
    ]
    if energy:
        items.append(("add_noise_log_prob", ELEMENTWISE, 1))
    return _terms(network, "head", seq_len, items)


def masked_lm_main_head_terms(
    head: str, disc: EncoderShape, seq_len: int, n_pred: float, everywhere: float | None = None
) -> list[Term]:
    """A kept masked LM's head: at the predicted positions, or at every position plus a copy probability
    (`everywhere` positions per sequence when given: the real tokens a padded batch runs it on)."""
    if head == "masked_lm":
        return mlm_head_terms(disc.hidden, disc.embedding, disc.vocab, n_pred, "discriminator")
    at = seq_len if everywhere is None else everywhere
    terms = mlm_head_terms(disc.hidden, disc.embedding, disc.vocab, at, "discriminator")
    return terms + _terms("discriminator", "head", at, [("copy_logit", MATMUL, 2 * disc.hidden)])


def masked_lm_main_head_params(head: str, disc: EncoderShape) -> int:
    copy_layer = disc.hidden + 1 if head == "masked_lm_everywhere_with_copy" else 0
    return mlm_head_params(disc.hidden, disc.embedding, disc.vocab) + copy_layer


HEADS = ("binary", "energy", "masked_lm", "masked_lm_everywhere_with_copy", "none")
GENERATORS = ("mlm", "two-tower", "unigram")


@dataclass(frozen=True)
class FlopPlan:
    """What one training sequence computes, as an objective declares it (`Objective.flop_plan`).

    head: the kept full-size model's head: `binary` (ELECTRA's per-token classifier), `energy` (Electric's: the
        same shape plus one add per token for log q), `masked_lm` (a masked-LM head at the predicted positions),
        `masked_lm_everywhere_with_copy` (at every position, plus All-Tokens MLM's copy probability), or `none`:
        no discriminator at all, the generator is the kept model (the cloze objective's two-tower scorer).
    generator: None, or the generator that runs beside it (`mlm`, `two-tower`, `unigram`).
    two_tower_head_at: where a two-tower generator's vocabulary head runs: at every position
        (`candidates`, Electric's noise needs them all) or only at the predicted ones (`predicted`, ELECTRA-TT).
    generator_shape: the generator's shape when it is not the config's (a frozen, loaded generator).
    discriminator_passes, generator_passes: forward-pass equivalents charged per training sequence: 2 is a
        forward plus the convention's backward; a frozen generator runs forward only (1); an objective whose
        phases differ (two-stage training) declares its average over the run.
    """

    head: str
    generator: str | None = None
    two_tower_head_at: str = "candidates"
    generator_shape: EncoderShape | None = None
    discriminator_passes: float = 2.0
    generator_passes: float = 2.0

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"FlopPlan head {self.head!r} is not one of {HEADS}")
        if self.generator is not None and self.generator not in GENERATORS:
            raise ValueError(f"FlopPlan generator {self.generator!r} is not one of {GENERATORS}")
        if self.two_tower_head_at not in ("candidates", "predicted"):
            raise ValueError("FlopPlan two_tower_head_at must be 'candidates' or 'predicted'")


# ---------------------------------------------------------------------------------------------------- parameters
def embedding_params(shape: EncoderShape) -> int:
    e = shape.embedding
    return (shape.vocab + shape.max_positions + shape.type_vocab) * e + 2 * e


def layers_params(shape: EncoderShape, with_projection: bool = True) -> int:
    """Transformer blocks plus the embedding->hidden projection when the widths differ."""
    h, a, i = shape.hidden, shape.attention_width, shape.intermediate
    attention = 3 * (h * a + a) + (a * h + h) + 2 * h
    ffn = (h * i + i) + (i * h + h) + 2 * h
    projection = shape.embedding * h + h if with_projection and shape.embedding != h else 0
    return shape.layers * (attention + ffn) + projection


def mlm_head_params(input_width: int, embedding: int, vocab: int) -> int:
    """Dense + LayerNorm + output bias; the output matrix is tied to the word embeddings."""
    return input_width * embedding + embedding + 2 * embedding + vocab


def token_classifier_params(hidden: int) -> int:
    return hidden * hidden + hidden + hidden + 1


# ------------------------------------------------------------------------------------------------------- report
@dataclass
class FlopReport:
    """FLOPs and parameters of one configuration. FLOPs per sequence unless the name says otherwise."""

    objective: str
    seq_len: int
    predicted_positions: float
    params: dict[str, int]
    inference_flops: float  # one sequence through the kept model (encoder + per-token binary head)
    train_flops_per_sequence: float  # forward + backward (backward = forward)
    train_flops_per_step: float  # x train_batch_size
    train_flops_total: float  # x max_steps
    breakdown: dict[
        str, float
    ]  # training FLOPs per sequence by "network.component"; sums to the per-sequence total
    inference_breakdown: dict[str, float]
    train_batch_size: int
    max_steps: int
    backward_factor: float = 1.0
    train_terms: list[Term] = field(
        default_factory=list, repr=False
    )  # forward terms of one training sequence
    plan: FlopPlan | None = None  # what was counted
    inference_terms: list[Term] = field(default_factory=list, repr=False)

    def matmul_flops(self, part: str = "train", network: str | None = None) -> float:
        """Forward FLOPs of real matmuls only (what a measured counter sees) for `train` or `inference`."""
        terms = self.train_terms if part == "train" else self.inference_terms
        return sum(
            t.flops for t in terms if t.kind == MATMUL and (network is None or t.network.startswith(network))
        )

    def forward_flops(self, part: str = "train", kind: str | None = None) -> float:
        terms = self.train_terms if part == "train" else self.inference_terms
        return sum(t.flops for t in terms if kind is None or t.kind == kind)

    def flops_for_steps(self, steps: int, batch_size: int | None = None) -> float:
        """Training FLOPs after `steps` optimiser steps (for logging cumulative FLOPs and budgets)."""
        return self.train_flops_per_sequence * (batch_size or self.train_batch_size) * steps

    def steps_within_budget(self, budget: float, batch_size: int | None = None) -> int:
        """The largest number of whole steps whose FLOPs do not exceed `budget`."""
        per_step = self.train_flops_per_sequence * (batch_size or self.train_batch_size)
        return int(math.floor(budget / per_step + 1e-9))

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "seq_len": self.seq_len,
            "predicted_positions": self.predicted_positions,
            "params": dict(self.params),
            "inference_flops": self.inference_flops,
            "train_flops_per_sequence": self.train_flops_per_sequence,
            "train_flops_per_step": self.train_flops_per_step,
            "train_flops_total": self.train_flops_total,
            "train_batch_size": self.train_batch_size,
            "max_steps": self.max_steps,
            "breakdown": dict(self.breakdown),
            "inference_breakdown": dict(self.inference_breakdown),
            "matmul_forward_flops": {
                "train": self.matmul_flops("train"),
                "inference": self.matmul_flops("inference"),
            },
        }


def _by_component(terms: list[Term], scale: float | Callable[[Term], float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for t in terms:
        key = f"{t.network}.{t.component}"
        out[key] = out.get(key, 0.0) + t.flops * (scale(t) if callable(scale) else scale)
    return out


def _inference_terms(
    shape: EncoderShape, seq_len: int, paper_quirks: bool, energy: bool = False
) -> list[Term]:
    network = "discriminator"
    return encoder_terms(shape, seq_len, network, paper_quirks) + token_classifier_terms(
        shape.hidden, seq_len, network, energy=energy
    )


def _two_tower_terms(
    gen: EncoderShape, disc: EncoderShape, seq_len: int, paper_quirks: bool, cloze_positions: float
) -> list[Term]:
    """Electric's cloze generator: one embedding pass (and projection) feeding two towers, head at the cloze
    positions."""
    terms = embedding_terms(gen, seq_len, "generator")
    for tower in ("generator_ltr", "generator_rtl"):
        terms += [t for t in encoder_terms(gen, seq_len, tower, paper_quirks) if t.component != "embeddings"]
    return terms + mlm_head_terms(2 * gen.hidden, disc.embedding, disc.vocab, cloze_positions, "generator")


def count_flops(
    config: Any,
    plan: FlopPlan,
    seq_len: int | None = None,
    output_positions: str | int | float = "ceil",
    paper_quirks: bool = True,
    inference_seq_len: int = 128,
    cloze_positions: float | None = None,
    main_head_positions: float | None = None,
) -> FlopReport:
    """Parameters, inference and training FLOPs of a `PretrainConfig` training what `plan` says.

    Callers with only a config use `electra.objectives.flop_report(config)`, which asks the config's objective
    for its plan. `seq_len` defaults to `config.max_seq_length` (training length); inference is always counted
    for one sequence of `inference_seq_len` (128, the paper's convention), capped at the training length.

    Heads that run "at every position" are charged for the full sequence by default: the paper's accounting, and
    what a step on packed, full-length text runs. Two arguments count what a particular padded batch executes
    instead (the start-up check, `electra.flops.measured.executed_report`, uses them):
    `cloze_positions`: where a two-tower generator's vocabulary head runs per sequence when the plan says
    `candidates` (the model runs it at every position, padding included, so this stays the sequence length);
    `main_head_positions`: where All-Tokens MLM's head runs per sequence (its step runs it at the real tokens only,
    padding skipped).
    """
    seq_len = config.max_seq_length if seq_len is None else int(seq_len)
    if seq_len < 1:
        raise UserError(f"sequence length must be at least 1, got {seq_len}.")
    disc = discriminator_shape(config)
    gen = plan.generator_shape or generator_shape(config)
    n_pred = predicted_positions(config.mask_prob, seq_len, output_positions)
    sharing = config.embedding_sharing

    params = {"discriminator": 0, "generator": 0}
    train: list[Term] = []  # head "none": no discriminator, the generator below is the whole model
    if plan.head in ("masked_lm", "masked_lm_everywhere_with_copy"):
        train += encoder_terms(disc, seq_len, "discriminator", paper_quirks)
        train += masked_lm_main_head_terms(plan.head, disc, seq_len, n_pred, main_head_positions)
        params["discriminator"] = (
            embedding_params(disc) + layers_params(disc) + masked_lm_main_head_params(plan.head, disc)
        )
    elif plan.head != "none":
        train += encoder_terms(disc, seq_len, "discriminator", paper_quirks)
        train += token_classifier_terms(disc.hidden, seq_len, "discriminator", energy=plan.head == "energy")
        params["discriminator"] = (
            embedding_params(disc) + layers_params(disc) + token_classifier_params(disc.hidden)
        )
    own_embeddings = embedding_params(gen) if sharing in ("none", "gdes") else 0
    if plan.generator == "mlm":
        train += encoder_terms(gen, seq_len, "generator", paper_quirks)
        train += mlm_head_terms(gen.hidden, gen.embedding, gen.vocab, n_pred, "generator")
        body = 0 if sharing == "all" else layers_params(gen)
        params["generator"] = own_embeddings + body + mlm_head_params(gen.hidden, gen.embedding, gen.vocab)
    elif plan.generator == "two-tower":
        if plan.two_tower_head_at == "predicted":
            cloze = n_pred
        else:
            cloze = seq_len if cloze_positions is None else cloze_positions
        train += _two_tower_terms(gen, disc, seq_len, paper_quirks, cloze)
        projection = layers_params(gen) - layers_params(gen, with_projection=False)
        params["generator"] = (
            own_embeddings
            + projection
            + 2 * layers_params(gen, with_projection=False)
            + mlm_head_params(2 * gen.hidden, gen.embedding, gen.vocab)
        )
    # generator == "unigram" (or None): sampling from a frequency table costs nothing worth counting.
    params["total"] = params["discriminator"] + params["generator"]

    inf_len = min(inference_seq_len, seq_len) if inference_seq_len else seq_len
    if plan.head == "none":  # the kept model is the two-tower scorer: its head runs at every position
        inference = _two_tower_terms(gen, disc, inf_len, paper_quirks, inf_len)
    else:
        inference = _inference_terms(disc, inf_len, paper_quirks, energy=plan.head == "energy")

    def passes(term: Term) -> float:  # forward + backward (backward = forward) unless the plan says otherwise
        return plan.generator_passes if term.network.startswith("generator") else plan.discriminator_passes

    per_sequence = sum(passes(t) * t.flops for t in train)
    return FlopReport(
        objective=config.objective,
        seq_len=seq_len,
        predicted_positions=n_pred,
        params=params,
        inference_flops=sum(t.flops for t in inference),
        train_flops_per_sequence=per_sequence,
        train_flops_per_step=per_sequence * config.train_batch_size,
        train_flops_total=per_sequence * config.train_batch_size * config.max_steps,
        breakdown=_by_component(train, passes),
        inference_breakdown=_by_component(inference, 1.0),
        train_batch_size=config.train_batch_size,
        max_steps=config.max_steps,
        train_terms=train,
        inference_terms=inference,
        plan=plan,
    )


# ------------------------------------------------------------------------------------------------- fine-tuning
@dataclass
class FinetuneReport:
    seq_len: int
    num_sequences: int
    forward_flops_per_sequence: float
    train_flops: float  # 2 x forward x num_sequences (paper convention)
    breakdown: dict[str, float]
    matmul_forward_flops_per_sequence: float = 0.0  # the part a measured counter sees

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq_len": self.seq_len,
            "num_sequences": self.num_sequences,
            "forward_flops_per_sequence": self.forward_flops_per_sequence,
            "train_flops": self.train_flops,
            "breakdown": dict(self.breakdown),
            "matmul_forward_flops_per_sequence": self.matmul_forward_flops_per_sequence,
        }


def finetune_flops(
    config: Any,
    seq_len: int,
    num_sequences: int,
    num_labels: int = 2,
    head: str = "sequence",
    paper_quirks: bool = True,
) -> FinetuneReport:
    """FLOPs of fine-tuning an encoder on `num_sequences` padded sequences (epochs x examples, say).

    `config` may be a PretrainConfig or a transformers ElectraConfig/BertConfig. `head="sequence"` is HF's
    ElectraClassificationHead on [CLS] (dense, GELU, dense to num_labels); `head="token"` a per-token linear layer
    to num_labels (SQuAD's start/end logits use num_labels=2). Training is charged 2 x forward, as in pretraining.
    """
    shape = shape_from_any(config)
    if head not in ("sequence", "token"):
        raise UserError(f"fine-tuning head {head!r} must be 'sequence' or 'token'.")
    terms = encoder_terms(shape, seq_len, "encoder", paper_quirks)
    h = shape.hidden
    if head == "sequence":
        items = [
            ("dense", MATMUL, 2 * h * h),
            ("dense_bias", ELEMENTWISE, h),
            ("gelu", ELEMENTWISE, GELU_FLOPS * h),
            ("dropout", ELEMENTWISE, 2 * DROPOUT_FLOPS * h),
            ("logits", MATMUL, 2 * h * num_labels),
            ("logits_bias", ELEMENTWISE, num_labels),
        ]
        terms += _terms("encoder", "head", 1, items)
    else:
        items = [("logits", MATMUL, 2 * h * num_labels), ("logits_bias", ELEMENTWISE, num_labels)]
        terms += _terms("encoder", "head", seq_len, items)
    forward = sum(t.flops for t in terms)
    return FinetuneReport(
        seq_len=seq_len,
        num_sequences=num_sequences,
        forward_flops_per_sequence=forward,
        train_flops=2.0 * forward * num_sequences,
        breakdown=_by_component(terms, 2.0 * num_sequences),
        matmul_forward_flops_per_sequence=sum(t.flops for t in terms if t.kind == MATMUL),
    )
