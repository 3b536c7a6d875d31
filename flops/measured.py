"""Measured FLOPs: run real PyTorch modules under `torch.utils.flop_counter.FlopCounterMode` and reconcile.

The analytic counter is a convention; this module checks its arithmetic against what the modules actually run.
What a measured counter sees, and how we make it comparable:

* FlopCounterMode counts 2*m*n*k per matmul (the paper's convention) and nothing else: embedding lookups, biases,
  GELU, softmax and LayerNorm are invisible. So we compare it with the analytic *matmul* terms only.
* It sees the backward pass, where autograd does two matmuls per forward matmul (input and weight gradients), so a
  measured step is ~3 x forward, while the paper charges 2 x forward. We report the forward alone, the backward,
  and `paper_convention_train = 2 x forward`.
* On CPU, `scaled_dot_product_attention` runs `aten._scaled_dot_product_flash_attention_for_cpu`, which
  FlopCounterMode (torch 2.13) has no formula for: attention scores and weighted values would silently count as
  zero. We register torch's own SDPA formulas for the CPU kernel and its backward (`sdpa_cpu_flop_mapping`), so
  SDPA and eager attention measure the same forward. (Torch's SDPA backward formula also charges recomputing the
  scores, so with SDPA backward/forward reads ~2.03 instead of eager's 2.00.)
* Models can be measured on the `meta` device: FlopCounterMode needs only shapes, so even Large costs seconds and
  no memory (`matmul_flops_of_config(..., device="meta")`, the default).
* fvcore counts one multiply-add as 1 FLOP and has no handler for SDPA; `fvcore_forward_flops` doubles its count
  and should be given eager-attention modules.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from electra.flops.analytic import FlopPlan, FlopReport, count_flops
from electra.flops.shapes import EncoderShape, discriminator_shape, generator_shape, predicted_positions
from electra.nn.masking import slots_per_row


def _cpu_flash_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def sdpa_cpu_flop_mapping() -> dict[Any, Any]:
    """FLOP formulas for the CPU flash-attention kernels FlopCounterMode does not know (empty if torch lacks them)."""
    aten = torch.ops.aten
    mapping: dict[Any, Any] = {}
    forward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if forward is not None:
        mapping[forward] = _cpu_flash_forward
    if backward is not None:
        mapping[backward] = _cpu_flash_backward
    return mapping


def flop_counter() -> FlopCounterMode:
    """A quiet FlopCounterMode that also counts CPU SDPA."""
    return FlopCounterMode(display=False, depth=None, custom_mapping=sdpa_cpu_flop_mapping())


def _loss_of(output: Any) -> torch.Tensor:
    """A scalar to backprop from whatever a module returns (its `.loss` when it has one)."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is not None:
        return loss
    if isinstance(output, torch.Tensor):
        return output.float().sum()
    first = output[0] if isinstance(output, (tuple, list)) else next(iter(output.values()))
    return first.float().sum()


def _by_module(counter: FlopCounterMode) -> dict[str, int]:
    return {name: int(sum(ops.values())) for name, ops in counter.get_flop_counts().items()}


def measure_training_step(model: nn.Module, batch: dict[str, Any], backward: bool = True) -> dict[str, Any]:
    """FLOPs of `model(**batch)` and (optionally) of backpropagating its loss, as FlopCounterMode measures them.

    Returns forward, backward and total counts, `paper_convention_train` (2 x forward, the paper's training
    charge), the backward/forward ratio, and per-module forward counts (keys are module paths, "Global" = all).
    The model's gradients are left populated when `backward` is set; zero them before a real optimiser step.
    """
    with flop_counter() as fwd:
        output = model(**batch)
    result: dict[str, Any] = {
        "forward": int(fwd.get_total_flops()),
        "forward_by_module": _by_module(fwd),
        "backward": 0,
    }
    if backward:
        loss = _loss_of(output)
        with flop_counter() as bwd:
            loss.backward()
        result["backward"] = int(bwd.get_total_flops())
    result["total"] = result["forward"] + result["backward"]
    result["paper_convention_train"] = 2 * result["forward"]
    result["backward_to_forward"] = result["backward"] / result["forward"] if result["forward"] else 0.0
    return result


# ----------------------------------------------------------------------------------------- reference modules
def _hf_config(shape: EncoderShape, attn_implementation: str):
    from transformers import ElectraConfig

    config = ElectraConfig(
        vocab_size=shape.vocab,
        embedding_size=shape.embedding,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=shape.max_positions,
        type_vocab_size=shape.type_vocab,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config._attn_implementation = attn_implementation
    return config


class _MaskedLMHead(nn.Module):
    """Dense to the embedding width, GELU, LayerNorm, then logits against the (tied) word-embedding matrix."""

    def __init__(self, input_width: int, embedding: int, vocab: int, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(input_width, embedding)
        self.layer_norm = nn.LayerNorm(embedding)
        self.word_embeddings = word_embeddings
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.layer_norm(nn.functional.gelu(self.dense(hidden)))
        return nn.functional.linear(hidden, self.word_embeddings.weight, self.bias)


class ReferencePretrainingModel(nn.Module):
    """The modules a `PretrainConfig` trains, built from `transformers` parts, for measuring FLOPs only.

    It mirrors the library's model for every `FlopPlan`: the kept model (ElectraModel) with its head (ELECTRA's
    and Electric's per-token classifier, a masked-LM head at the predicted positions, or one at every position
    plus All-Tokens MLM's copy logit), and the generator beside it (ElectraModel of generator width sharing the
    embeddings module, its masked-LM head at the predicted positions; or the two-tower generator's shared
    embedding pass, two encoders and a head at every position or at the predicted ones), or the two-tower model
    alone (head `none`, the cloze objective). It skips masking and sampling: the generator sees the input, the
    first `n_pred` positions count as masked, and the kept model sees the same input. Those shortcuts change no
    matmul shape. It checks the analytic arithmetic against independent modules; `measure_objective_step`
    measures the library's own training step.
    """

    def __init__(self, config: Any, plan: FlopPlan, n_pred: int, attn_implementation: str = "eager"):
        super().__init__()
        from transformers.models.electra.modeling_electra import (
            ElectraDiscriminatorPredictions,
            ElectraEmbeddings,
            ElectraEncoder,
            ElectraModel,
        )

        self.head, self.kind, self.n_pred = plan.head, plan.generator, n_pred
        self.cloze_everywhere = plan.two_tower_head_at == "candidates"
        disc_shape = discriminator_shape(config)
        gen_shape = plan.generator_shape or generator_shape(config)
        disc_config = _hf_config(disc_shape, attn_implementation)
        gen_config = _hf_config(gen_shape, attn_implementation)
        self.discriminator: nn.Module | None = None
        self.generator: nn.Module | None = None
        self.towers: nn.ModuleList | None = None
        self.mlm_head: nn.Module | None = None
        self.copy_head: nn.Module | None = None
        self.discriminator_head: nn.Module | None = None
        shared_embeddings = None
        if self.head != "none":
            self.discriminator = ElectraModel(disc_config)
            shared_embeddings = self.discriminator.embeddings
            word_embeddings = shared_embeddings.word_embeddings
            if self.head in ("masked_lm", "masked_lm_everywhere_with_copy"):
                self.mlm_head = _MaskedLMHead(
                    disc_shape.hidden, disc_shape.embedding, disc_shape.vocab, word_embeddings
                )
                if self.head == "masked_lm_everywhere_with_copy":
                    self.copy_head = nn.Linear(disc_shape.hidden, 1)
            else:
                self.discriminator_head = ElectraDiscriminatorPredictions(disc_config)
        if self.kind in ("unigram", None):
            return
        if self.kind == "two-tower":
            # electra.generators.two_tower: one embedding pass (+ projection) feeding two encoders; head on both states
            embeddings = shared_embeddings
            if embeddings is None or config.embedding_sharing in ("none", "gdes"):  # gdes: its own table
                embeddings = ElectraEmbeddings(gen_config)
            self.tower_embeddings = embeddings
            self.tower_project = (
                nn.Linear(gen_shape.embedding, gen_shape.hidden)
                if gen_shape.embedding != gen_shape.hidden
                else nn.Identity()
            )
            self.towers = nn.ModuleList([ElectraEncoder(gen_config), ElectraEncoder(gen_config)])
            head_width, head_embeddings = 2 * gen_shape.hidden, embeddings.word_embeddings
        else:
            if config.embedding_sharing == "all":
                self.generator = self.discriminator  # every weight tied: the generator IS the discriminator
            else:
                self.generator = ElectraModel(gen_config)
                if config.embedding_sharing == "embeddings":
                    self.generator.embeddings = self.discriminator.embeddings
            head_width, head_embeddings = gen_shape.hidden, self.generator.embeddings.word_embeddings
        self.generator_head = _MaskedLMHead(head_width, gen_shape.embedding, gen_shape.vocab, head_embeddings)

    def _masked_lm_loss(self, head: nn.Module, hidden: torch.Tensor, input_ids: torch.Tensor, n: int):
        logits = head(hidden[:, :n])
        return nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), input_ids[:, :n].reshape(-1)
        )

    def _main_loss(self, input_ids, kwargs) -> torch.Tensor:
        hidden = self.discriminator(input_ids, **kwargs).last_hidden_state
        if self.head == "masked_lm":
            return self._masked_lm_loss(self.mlm_head, hidden, input_ids, self.n_pred)
        if self.head == "masked_lm_everywhere_with_copy":
            loss = self._masked_lm_loss(self.mlm_head, hidden, input_ids, input_ids.shape[1])
            return loss + self.copy_head(hidden).float().mean()
        logits = self.discriminator_head(hidden)
        return nn.functional.binary_cross_entropy_with_logits(
            logits.float(), torch.zeros_like(logits.float())
        )

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> dict[str, torch.Tensor]:
        kwargs = dict(attention_mask=attention_mask, token_type_ids=token_type_ids)
        loss = torch.zeros((), device=input_ids.device)
        if self.discriminator is not None:
            loss = loss + self._main_loss(input_ids, kwargs)
        if self.towers is not None:
            embedded = self.tower_project(self.tower_embeddings(input_ids, token_type_ids=token_type_ids))
            states = torch.cat([tower(embedded).last_hidden_state for tower in self.towers], dim=-1)
            cloze = input_ids.shape[1] if self.cloze_everywhere else self.n_pred
            loss = loss + self._masked_lm_loss(self.generator_head, states, input_ids, cloze)
        elif self.generator is not None:
            states = self.generator(input_ids, **kwargs).last_hidden_state
            loss = loss + self._masked_lm_loss(self.generator_head, states, input_ids, self.n_pred)
        return {"loss": loss}


def _integer_positions(config: Any, seq_len: int, output_positions: Any) -> int:
    return int(round(predicted_positions(config.mask_prob, seq_len, output_positions)))


def build_reference_model(
    config: Any,
    plan: FlopPlan,
    seq_len: int | None = None,
    output_positions: Any = "ceil",
    attn_implementation: str = "eager",
) -> ReferencePretrainingModel:
    seq_len = int(seq_len or config.max_seq_length)
    return ReferencePretrainingModel(
        config, plan, _integer_positions(config, seq_len, output_positions), attn_implementation
    )


def random_batch(config: Any, seq_len: int, batch_size: int = 1, seed: int = 0, device: str = "cpu"):
    """Full-length sequences of random tokens and two segments. On `meta` there are no values and no attention
    mask (a mask would need data-dependent checks); full-length sequences need none."""
    if device == "meta":
        ids = torch.zeros(batch_size, seq_len, dtype=torch.long, device="meta")
        return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids)}
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, config.vocab_size, (batch_size, seq_len), generator=generator).to(device)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, seq_len // 2 :] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "token_type_ids": token_type_ids,
    }


def matmul_flops_of_config(
    config: Any,
    plan: FlopPlan,
    seq_len: int | None = None,
    batch_size: int = 1,
    backward: bool = False,
    output_positions: Any = "ceil",
    attn_implementation: str = "eager",
    device: str = "meta",
) -> dict[str, Any]:
    """Measured matmul FLOPs per sequence of the modules `config` trains, beside the analytic matmul terms.

    On the default `meta` device nothing is allocated or computed (FlopCounterMode only needs shapes), so even
    Large is counted in seconds; `device="cpu"` runs the real kernels (the CPU flash-attention path included).
    Both sides use the same integer number of masked positions, so they should agree exactly.
    """
    seq_len = int(seq_len or config.max_seq_length)
    n_pred = _integer_positions(config, seq_len, output_positions)
    with torch.device(device):
        model = ReferencePretrainingModel(config, plan, n_pred, attn_implementation)
    model.train(backward)
    batch = random_batch(config, seq_len, batch_size, device=device)
    if backward:
        measured = measure_training_step(model, batch, backward=True)
    else:
        with torch.no_grad():
            measured = measure_training_step(model, batch, backward=False)
    report = count_flops(config, plan, seq_len=seq_len, output_positions=n_pred)
    analytic = report.matmul_flops("train")
    forward = measured["forward"] / batch_size
    return {
        "seq_len": seq_len,
        "device": device,
        "attn_implementation": attn_implementation,
        "predicted_positions": n_pred,
        "measured_forward": forward,
        "measured_backward": measured["backward"] / batch_size,
        "analytic_forward": analytic,
        "ratio": forward / analytic if analytic else float("nan"),
        "backward_to_forward": measured["backward_to_forward"],
        "params_measured": sum(p.numel() for p in model.parameters()),
        "params_analytic": report.params["total"],
    }


FVCORE_MATMUL_OPS = frozenset({"linear", "matmul", "bmm", "addmm", "mm", "einsum", "baddbmm"})


def fvcore_forward_flops(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], matmul_only: bool = True
) -> float:
    """fvcore's forward count in the paper's convention (x2: fvcore counts a multiply-add as one FLOP).

    fvcore also charges LayerNorm a few FLOPs per element; `matmul_only` keeps its matmul operators so the count
    is comparable with FlopCounterMode. Give it eager-attention modules: fvcore has no handler for
    scaled_dot_product_attention and skips it.
    """
    from fvcore.nn import FlopCountAnalysis

    analysis = FlopCountAnalysis(model, inputs)
    analysis.unsupported_ops_warnings(False)
    analysis.uncalled_modules_warnings(False)
    by_op = analysis.by_operator()
    if not matmul_only:
        return 2.0 * float(sum(by_op.values()))
    return 2.0 * float(sum(count for op, count in by_op.items() if op in FVCORE_MATMUL_OPS))


def executed_report(config: Any, plan: FlopPlan, batch: dict[str, Any]) -> FlopReport:
    """The analytic count, per sequence, of what one training step on `batch` executes.

    The batch's padded length is the sequence length, and a step computes what its shape says, whatever the
    padding: heads at the predicted positions run on K slots per row (`electra.nn.masking.slots_per_row`, fillers
    included), a two-tower head that serves Electric's noise or the cloze loss at every position. The one
    data-dependent head is All-Tokens MLM's, which runs at the real tokens only: it is counted at the batch's mean
    real tokens per row. (The logged and budgeted count, `flop_report`, charges every position, the paper's
    accounting for full-length sequences; the two agree on packed text.)
    """
    input_ids = batch["input_ids"]
    seq_len = int(input_ids.shape[1])
    main_head_positions = None
    if plan.head == "masked_lm_everywhere_with_copy":
        mask = batch.get("attention_mask")
        if mask is not None:
            main_head_positions = float(mask.sum()) / int(input_ids.shape[0])
    return count_flops(
        config,
        plan,
        seq_len=seq_len,
        output_positions=float(slots_per_row(seq_len, config.mask_prob)),
        main_head_positions=main_head_positions,
    )


def startup_check(
    model: nn.Module,
    batch: dict[str, Any],
    config: Any,
    plan: FlopPlan,
    tolerance: float = 0.02,
    backward: bool = False,
) -> dict[str, Any]:
    """Measure one forward of the training model and compare its matmuls with the analytic count.

    Meant to run once when training starts: it guards the analytic counter (which the loop then uses for every
    step) against a model that computes something else; what it compares with is `executed_report`. Run it
    under `electra.generators.fused_nll.plain_head()`, as pretraining does: on a CPU Electric's fused head projects the
    rows it samples from a second time, which is not the model's arithmetic. `backward` also backpropagates the
    step's loss (its gradients are left populated) and reports the measured backward/forward ratio.
    """
    input_ids = batch["input_ids"]
    batch_size, seq_len = int(input_ids.shape[0]), int(input_ids.shape[1])
    if backward:
        measured = measure_training_step(model, batch, backward=True)
    else:
        with torch.no_grad():
            measured = measure_training_step(model, batch, backward=False)
    report = executed_report(config, plan, batch)
    analytic = report.matmul_flops("train") * batch_size
    ratio = measured["forward"] / analytic if analytic else float("nan")
    return {
        "measured_forward": measured["forward"],
        "measured_backward": measured["backward"],
        "backward_to_forward": measured["backward_to_forward"],
        "analytic_forward": analytic,
        "ratio": ratio,
        "ok": abs(ratio - 1.0) <= tolerance,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "predicted_positions": report.predicted_positions,
    }


MIN_MEASURED_LENGTH = 4  # [CLS] a [SEP] [SEP]: the shortest row with a token to mask


def synthetic_batch(
    config: Any,
    special: Any,
    seq_len: int,
    batch_size: int = 2,
    lengths: list[int] | None = None,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Rows shaped like pretraining's: [CLS] A [SEP] B [SEP] of random ordinary tokens, two segments, padded to
    `seq_len` after `lengths[i]` real tokens (full length by default)."""
    lengths = lengths or [seq_len] * batch_size
    if len(lengths) != batch_size or not all(MIN_MEASURED_LENGTH <= n <= seq_len for n in lengths):
        raise ValueError(
            f"lengths {lengths} must give {batch_size} rows of {MIN_MEASURED_LENGTH}..{seq_len} tokens"
        )
    first = max(special.as_list()) + 1  # ordinary tokens only: none of them is masked out of the candidates
    if first >= config.vocab_size:
        raise ValueError("the vocabulary has no ordinary tokens")
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(first, config.vocab_size, (batch_size, seq_len), generator=generator)
    mask = torch.zeros_like(ids)
    types = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        middle = n // 2
        ids[row, 0], ids[row, middle], ids[row, n - 1] = special.cls, special.sep, special.sep
        ids[row, n:] = special.pad
        mask[row, :n] = 1
        types[row, middle + 1 : n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
