"""One flat pretraining configuration, the paper's model sizes, and strict overrides (the settings machinery is
`electra.core.settings`, config files `electra.core.config_files`, run records `electra.core.run_records`).

A single flat dataclass (as the reference `configure_pretraining.py` does) keeps every knob greppable and makes a
run reproducible from its saved `config.json`. Unknown keys are errors: a typo must not silently train the default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from electra.core.config_files import load_config_file
from electra.core.errors import UserError
from electra.core.files import write_json_atomically
from electra.core.settings import (
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    NOT_NEGATIVE_COUNT,
    OPEN_FRACTION,
    POSITIVE,
    RATE,
    SEED_RANGE,
    check_declared,
    coerce_value,
    setting,
    spelled,
)
from electra.core.text_form import TEXT_FORMS

CPU_DROPOUT = ("lanes", "torch")  # electra.nn.dropout
GENERATORS = ("mlm", "unigram", "two-tower")
EMBEDDING_SHARING = ("none", "embeddings", "all", "gdes")
MIXED_PRECISION = ("no", "bf16", "fp16")
LR_SCHEDULES = ("linear", "reference")  # electra.training.optim.lr_schedule
SCHEDULE_CLOCKS = ("steps", "time")  # electra.training.optim.schedule_on_clock
CLOZE_SPANS = ("piece", "word")  # electra.generators.two_tower
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class PretrainConfig:
    # ---- model: discriminator (the model that is kept) ----
    vocab_size: int = setting(
        30522, "vocabulary size; replaced by the tokenizer's when one is trained or loaded", within=COUNT
    )
    hidden_size: int = setting(256, "hidden size of the discriminator", within=COUNT)
    num_hidden_layers: int = setting(12, "transformer layers of the discriminator", within=COUNT)
    intermediate_size: int = setting(1024, "feed-forward size of the discriminator", within=COUNT)
    num_attention_heads: int = setting(
        4, "attention heads (hidden_size / heads is the head size)", within=COUNT
    )
    embedding_size: int = setting(
        128, "embedding size: ELECTRA factorises embeddings (Small: 128 below hidden 256)", within=COUNT
    )
    max_position_embeddings: int = setting(512, "positions the model can read", within=COUNT)
    type_vocab_size: int = setting(2, "segment types", within=COUNT)
    hidden_dropout_prob: float = setting(0.1, "dropout on hidden states", within=RATE)
    attention_probs_dropout_prob: float = setting(0.1, "dropout on attention probabilities", within=RATE)
    layer_norm_eps: float = setting(1e-12, "LayerNorm epsilon", within=NON_NEGATIVE)
    initializer_range: float = setting(0.02, "standard deviation of the initial weights", within=NON_NEGATIVE)
    # ---- model: generator ----
    generator: str = setting(
        "mlm", "generator (noise distribution)", choices=GENERATORS, flags=("--generator",)
    )
    generator_hidden_multiplier: float = setting(
        0.25,
        "generator width as a fraction of hidden size, FFN size and heads (paper: 1/4 Small, 1/3 Base)",
        within=POSITIVE,
    )
    generator_num_layers: int | None = setting(
        None, "generator depth; None: the discriminator's (the paper's choice)"
    )
    embedding_sharing: str = setting(
        "embeddings",
        "what generator and discriminator share: none | embeddings | all (a same-size generator) | gdes "
        "(DeBERTa-v3's gradient-disentangled sharing: stop_gradient(generator table) + a zero-initialised residual)",
        choices=EMBEDDING_SHARING,
    )
    generator_from: str | None = setting(
        None,
        "a frozen, already trained masked LM as the generator (Fast-ELECTRA): a run of this library or a "
        "transformers ...ForMaskedLM directory; its vocabulary is used; no generator loss or backward",
        flags=("--generator-from",),
        metavar="DIR",
    )
    init_from: str | None = setting(
        None,
        "continued pretraining: start from this checkpoint (a run of this library, or a transformers ELECTRA or "
        "BERT directory; its size and tokenizer are used; fresh optimizer and schedule)",
        flags=("--init-from",),  # read before the config exists: `electra pretrain` adds it itself
        metavar="DIR",
    )
    generator_temperature_start: float = setting(
        2.0, "a frozen generator's sampling temperature at step 0, falling linearly to 1 over max_steps"
    )
    two_stage_generator_steps: int = setting(
        0, "objective=electra-two-stage: steps that train the generator alone first (0: half the run)"
    )
    # ---- objective ----
    objective: str = setting(
        "electra",
        "pretraining objective: a registered name (electra, mlm, electric, electra-tt, ...; an unknown name is "
        "answered with the full list)",
        flags=("--objective",),
        metavar="NAME",
    )
    mask_prob: float = setting(
        0.15, "fraction of positions picked for masking (0.25 for Large)", within=OPEN_FRACTION
    )
    mask_token_prob: float = setting(
        0.85,
        "of the picked positions, the share replaced by [MASK] (the rest keep their token)",
        within=FRACTION,
    )
    random_token_prob: float = setting(
        0.0,
        "of the picked positions, the share replaced by a random token (BERT's 10%; the MLM baseline)",
        within=FRACTION,
    )
    generator_loss_weight: float = setting(1.0, "weight of the generator's loss", within=NON_NEGATIVE)
    discriminator_loss_weight: float = setting(
        50.0, "weight of the discriminator's loss", within=NON_NEGATIVE
    )
    sampling_temperature: float = setting(1.0, "temperature of the generator's samples", within=POSITIVE)
    cloze_span: str = setting(
        "piece",
        "objective=cloze: what the prediction of piece t may not read on its right: piece (x_t only) or word (x_t "
        "and the rest of its word, so a word's pieces chain into log q(word | the other words))",
        choices=CLOZE_SPANS,
    )
    # ---- data ----
    max_seq_length: int = setting(128, "tokens per example", within=COUNT, flags=("--max-seq-length",))
    tokenizer_vocab_size: int = setting(
        30522, "size of a WordPiece vocabulary trained on the corpus", within=COUNT
    )
    lowercase: bool = setting(True, "lowercase text before tokenizing")
    text_form: str = setting(
        "raw",
        "what the tokenizer does to text first: raw, or words (lowercase letters and apostrophes only, the form "
        "ASR output and WER references take)",
        choices=TEXT_FORMS,
    )
    single_segment_prob: float = setting(0.1, "share of single-segment examples", within=FRACTION)
    short_seq_prob: float = setting(0.05, "share of examples given a random shorter length", within=FRACTION)
    # ---- optimisation ----
    learning_rate: float = setting(5e-4, "peak learning rate", within=POSITIVE, flags=("--learning-rate",))
    warmup_steps: int = setting(
        10000, "steps of linear warmup", within=NOT_NEGATIVE_COUNT, flags=("--warmup-steps",)
    )
    max_steps: int = setting(1_000_000, "optimizer steps", within=COUNT, flags=("--max-steps",))
    train_batch_size: int = setting(
        128,
        "global batch size: sequences per optimizer step over all processes and accumulation steps",
        within=COUNT,
        flags=("--batch-size", "--global-batch-size"),
    )
    gradient_accumulation_steps: int = setting(
        1, "micro-batches per optimizer step", within=COUNT, flags=("--gradient-accumulation-steps",)
    )
    weight_decay: float = setting(0.01, "AdamW weight decay", within=NON_NEGATIVE, flags=("--weight-decay",))
    adam_beta1: float = setting(0.9, "AdamW beta1", within=RATE)
    adam_beta2: float = setting(0.999, "AdamW beta2", within=RATE)
    adam_epsilon: float = setting(1e-6, "AdamW epsilon", within=NON_NEGATIVE)
    max_grad_norm: float = setting(1.0, "gradient clipping norm (0: no clipping)", within=NON_NEGATIVE)
    lr_schedule: str = setting(
        "linear",
        "linear warmup then linear decay to 0 at max_steps, or the reference code's",
        choices=LR_SCHEDULES,
    )
    # ---- run ----
    seed: int = setting(42, "random seed", within=SEED_RANGE, flags=("--seed",))
    mixed_precision: str = setting(
        "no", "mixed precision", choices=MIXED_PRECISION, flags=("--mixed-precision",)
    )
    attn_implementation: str = setting("sdpa", "attention kernel", choices=("sdpa", "eager"))
    cpu_dropout: str = setting(
        "lanes",
        "dropout masks on a CPU: lanes (four 16-bit lanes from one 64-bit random word; same rates, about 2x "
        "cheaper than torch's Bernoulli draw) or torch's own",
        choices=CPU_DROPOUT,
    )
    compile: bool | None = setting(
        None,
        "torch.compile the model (slow first steps); default: on when one GPU trains, off on a CPU or several "
        "processes",
        flags=("--compile",),
    )
    compile_mode: str | None = setting(
        None,
        "torch.compile's mode; default: reduce-overhead (CUDA graphs) on a GPU, default on a CPU",
        choices=COMPILE_MODES,
    )
    log_every: int = setting(
        50, "steps between log rows", within=COUNT, flags=("--log-every", "--logging-steps")
    )
    save_every: int = setting(
        1000, "steps between checkpoints", within=COUNT, flags=("--save-every", "--save-steps")
    )
    keep_checkpoints: int = setting(2, "checkpoints kept (the newest)", within=NOT_NEGATIVE_COUNT)
    flops_budget: float | None = setting(
        None,
        "stop once this many training FLOPs are spent (e.g. 1e15)",
        within=POSITIVE,
        flags=("--flops-budget",),
    )
    time_budget_minutes: float | None = setting(
        None,
        "stop after this many minutes of training, saving a checkpoint and the curves (the schedule still runs to "
        "max_steps; --resume continues it; with schedule_clock time the decay ends there instead)",
        within=POSITIVE,
        flags=("--time-budget",),
        metavar="MINUTES",
    )
    schedule_clock: str = setting(
        "steps",
        "what the learning-rate decay runs on: steps (to max_steps) or time (to max_steps or the time budget, "
        "whichever comes first, measured as it trains; the budget then counts every resumption too)",
        choices=SCHEDULE_CLOCKS,
        flags=("--schedule-clock",),
    )
    eval_fraction: float = setting(
        0.01, "share of the examples held out for evaluation, never trained on (0: none)", within=RATE
    )
    eval_examples: int = setting(512, "at most this many held-out examples", within=NOT_NEGATIVE_COUNT)
    eval_every: int = setting(
        0,
        "steps between evaluations on the held-out examples (0: at the end only)",
        within=NOT_NEGATIVE_COUNT,
        flags=("--eval-every", "--eval-steps"),
    )
    dataloader_workers: int | None = setting(
        None,
        "processes that collate (and under --streaming pack) batches beside training; default: 0 on a CPU, 2 "
        "when a GPU trains (4 when streaming)",
        within=NOT_NEGATIVE_COUNT,
    )
    streaming: bool = setting(
        False,
        "pack examples as training reads them, in the data-loader workers, instead of ahead into the cache: "
        "training starts at once on a corpus of any size; the order is shuffled within 4 MB windows of text",
        flags=("--streaming",),
    )
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # free-form notes (never read by code)

    # ------------------------------------------------------------------
    def validate(self) -> PretrainConfig:
        """Every field against its declaration, then the rules between fields; one line naming the field.

        The objective's name and its own constraints are checked by `electra.objectives.check_config`, which
        reads the registry (this module sits below it and knows no objective)."""
        check_declared(self, "config")
        if self.cloze_span != "piece" and self.objective != "cloze":
            raise UserError(
                f"config: cloze_span={self.cloze_span} changes what the two-tower model conditions on, which "
                f"objective={self.objective}'s noise and estimates assume; use it with objective=cloze only."
            )
        if self.text_form == "words" and not self.lowercase:
            raise UserError("config: text_form=words keeps lowercase letters only; drop lowercase=false.")
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"config: hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; pick sizes whose ratio is the head size (64 in the paper)."
            )
        if self.mask_token_prob + self.random_token_prob > 1.0 + 1e-9:
            raise UserError("config: mask_token_prob + random_token_prob must not exceed 1.")
        if self.max_seq_length > self.max_position_embeddings:
            raise UserError(
                f"config: max_seq_length {self.max_seq_length} exceeds max_position_embeddings "
                f"{self.max_position_embeddings}."
            )
        if self.embedding_sharing == "gdes" and self.generator == "unigram":
            raise UserError(
                "config: embedding_sharing=gdes shares a generator's embeddings; generator=unigram has none "
                "(use mlm or two-tower)."
            )
        if self.embedding_sharing == "gdes" and self.init_from is not None:  # said before the corpus work
            raise UserError(
                f"config: {spelled(PretrainConfig, 'init_from')} with embedding_sharing=gdes is not supported yet; "
                "use embeddings or none."
            )
        if self.generator_from is not None:
            if self.generator != "mlm":
                raise UserError(
                    f"config: generator_from loads a masked LM, so it needs generator=mlm, not {self.generator!r}."
                )
            if self.embedding_sharing != "none":
                raise UserError(
                    "config: generator_from is frozen and brings its own embeddings, so nothing is shared: set "
                    f"embedding_sharing=none ({spelled(PretrainConfig, 'generator_from')} does)."
                )
            if not self.generator_temperature_start >= 1.0:
                raise UserError(
                    f"config: generator_temperature_start must be at least 1, got {self.generator_temperature_start}."
                )
        if self.embedding_sharing == "all" and self.generator_hidden_multiplier != 1.0:
            raise UserError(
                "config: embedding_sharing=all ties every weight, so it needs generator_hidden_multiplier=1.0."
            )
        if self.schedule_clock == "time" and self.time_budget_minutes is None:
            raise UserError(
                "config: schedule_clock=time decays the learning rate over the time budget; give one "
                f"({spelled(PretrainConfig, 'time_budget_minutes')} MINUTES)."
            )
        return self

    # ---- derived generator shape ----
    @property
    def generator_hidden_size(self) -> int:
        return self._generator_heads() * self.head_size

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def _generator_heads(self) -> int:
        return max(1, round(self.num_attention_heads * self.generator_hidden_multiplier))

    @property
    def generator_num_attention_heads(self) -> int:
        return self._generator_heads()

    @property
    def generator_intermediate_size(self) -> int:
        return max(1, round(self.intermediate_size * self.generator_hidden_size / self.hidden_size))

    @property
    def generator_layers(self) -> int:
        return self.generator_num_layers or self.num_hidden_layers

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        write_json_atomically(path, self.to_dict(), sort_keys=True)


# The paper's Table 5.1 (ELECTRA dissertation; Table 6 of the ELECTRA paper), plus two CPU sizes.
# tiny/mini are ours: chosen so tiny learns visibly in a few CPU minutes and mini in under an hour. They drop
# attention dropout: on a CPU, SDPA with dropout falls back to the unfused kernel (~15% of a step), and runs this
# short do not need the regularisation.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        hidden_size=128,
        num_hidden_layers=4,
        intermediate_size=512,
        num_attention_heads=2,
        embedding_size=128,
        generator_hidden_multiplier=0.5,
        max_position_embeddings=128,
        max_seq_length=128,
        tokenizer_vocab_size=8192,
        learning_rate=1e-3,
        warmup_steps=50,
        max_steps=600,
        train_batch_size=32,
        save_every=200,
        log_every=20,
        eval_every=100,
        attention_probs_dropout_prob=0.0,
    ),
    "mini": dict(
        hidden_size=256,
        num_hidden_layers=4,
        intermediate_size=1024,
        num_attention_heads=4,
        embedding_size=128,
        generator_hidden_multiplier=0.25,
        max_position_embeddings=128,
        max_seq_length=128,
        tokenizer_vocab_size=16384,
        learning_rate=1e-3,
        warmup_steps=500,
        max_steps=10000,
        train_batch_size=64,
        save_every=1000,
        log_every=50,
        eval_every=500,
        attention_probs_dropout_prob=0.0,
    ),
    "small": dict(
        eval_every=10000,
        hidden_size=256,
        num_hidden_layers=12,
        intermediate_size=1024,
        num_attention_heads=4,
        embedding_size=128,
        generator_hidden_multiplier=0.25,
        max_seq_length=128,
        mask_prob=0.15,
        learning_rate=5e-4,
        warmup_steps=10000,
        train_batch_size=128,
        max_steps=1_000_000,
    ),
    "base": dict(
        eval_every=10000,
        hidden_size=768,
        num_hidden_layers=12,
        intermediate_size=3072,
        num_attention_heads=12,
        embedding_size=768,
        generator_hidden_multiplier=1 / 3,
        max_seq_length=512,
        mask_prob=0.15,
        learning_rate=2e-4,
        warmup_steps=10000,
        train_batch_size=256,
        max_steps=766_000,
    ),
    "large": dict(
        eval_every=10000,
        hidden_size=1024,
        num_hidden_layers=24,
        intermediate_size=4096,
        num_attention_heads=16,
        embedding_size=1024,
        generator_hidden_multiplier=0.25,
        max_seq_length=512,
        mask_prob=0.25,
        learning_rate=2e-4,
        warmup_steps=10000,
        train_batch_size=2048,
        max_steps=400_000,
    ),
}


def field_names() -> set[str]:
    return {f.name for f in fields(PretrainConfig)}


def coerce_field(name: str, raw: Any, source: str = "config") -> Any:
    """Turn a CLI string or a JSON value into the config field's type, strictly (`coerce_value`)."""
    return coerce_value(name, raw, str({f.name: f for f in fields(PretrainConfig)}[name].type), source)


def load_saved_config(path: str | Path) -> PretrainConfig:
    """Read a run's config.json back; unknown keys mean the file came from another version or tool."""
    data = load_config_file(path)
    unknown = sorted(set(data) - field_names())
    if unknown:
        raise UserError(
            f"{path}: unknown config key(s) {', '.join(unknown)}; was it written by this library?"
        )
    return PretrainConfig(**{k: coerce_field(k, v, str(path)) for k, v in data.items()}).validate()


def with_frozen_generator(overrides: dict[str, Any]) -> dict[str, Any]:
    """Overrides naming `generator_from` get `embedding_sharing=none` unless they set it: a frozen generator owns
    its embeddings, and the default (share them) would otherwise be refused."""
    if overrides.get("generator_from") and "embedding_sharing" not in overrides:
        return {**overrides, "embedding_sharing": "none"}
    return overrides
