"""The stepping-stone objectives of the ELECTRA paper's efficiency analysis (paper section 3.2; dissertation ch. 5).

They sit between BERT's masked LM and ELECTRA's replaced-token detection, and separate the two reasons ELECTRA
learns more per FLOP: a loss over *all* tokens rather than the masked 15%, and no [MASK] token in the pretraining
input (which fine-tuning never sees). Each shares ELECTRA's generator (a small masked LM sharing the embeddings,
trained by maximum likelihood; `config.generator_loss_weight`) and its masking (`electra.masking`):

* ``electra-15`` (ELECTRA 15%): ELECTRA exactly, but the discriminator's binary loss is averaged over the positions
  picked for masking only (the ~15% the generator filled in), not over every real token. Weighted by
  `discriminator_loss_weight` as in ELECTRA; the discriminator still reads the whole sequence.
* ``replace-mlm`` (Replace MLM): BERT's masked LM, except that the picked positions hold generator samples instead
  of [MASK]. The kept model is a full-size masked LM (`transformers.ElectraForMaskedLM`) that predicts the original
  token, cross-entropy averaged over the picked positions only (weight 1).
* ``all-tokens-mlm`` (All-Tokens MLM): the Replace-MLM input, but the kept model predicts the identity of *every*
  token, with the paper's explicit copy mechanism. For each real (non-padding) position t of the corrupted input,
  [CLS] and [SEP] included (they are never corrupted, so the copy gate learns to pass them through), with h_t the
  encoder's state:

      D(t)        = sigmoid(w . h_t + b)                    (a learned copy probability; one linear layer)
      p(x_t | .)  = D(t) * 1[x_t == input_t] + (1 - D(t)) * softmax(MLM head(h_t))[x_t]

  and the loss is the mean of -log p(x_t | .) over those positions (weight 1), computed in log space
  (log-sum-exp of log D and log(1 - D) + log softmax where the input token is the original). The MLM head is
  ELECTRA's (dense, GELU, LayerNorm, output tied to the word embeddings).

For `replace-mlm` and `all-tokens-mlm` the kept model sits where ELECTRA's discriminator does
(`PretrainingModel.discriminator`), so `.encoder`, checkpoints and exports work unchanged: `OUTPUT/discriminator/`
then holds an `ElectraForMaskedLM` (its config.json says so), and fine-tuning loads its encoder. The copy layer is
a pretraining-only head and is not part of the export.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from discriminators.replaced_token import replaced_token_loss

STEPPING_STONES = ("electra-15", "replace-mlm", "all-tokens-mlm")
# the objectives whose kept model predicts tokens instead of classifying them
MASKED_LM_MAIN = ("replace-mlm", "all-tokens-mlm")


class MaskedLMMainModel(nn.Module):
    """The kept model of Replace MLM and All-Tokens MLM: a full-size masked LM (plus the copy layer if asked)."""

    def __init__(self, hf_config, copy_mechanism: bool = False):
        super().__init__()
        from transformers import ElectraForMaskedLM

        self.model = ElectraForMaskedLM(hf_config)
        self.model.generator_lm_head.weight = self.model.electra.embeddings.word_embeddings.weight
        self.copy_head = nn.Linear(hf_config.hidden_size, 1) if copy_mechanism else None

    @property
    def encoder(self) -> nn.Module:
        return self.model.electra

    def hidden_states(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        return self.model.electra(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state

    def token_logits(self, rows: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits for hidden-state rows [N, hidden] -> [N, vocab]."""
        return self.model.generator_lm_head(self.model.generator_predictions(rows))


def build_main_model(config, pad_token_id: int) -> MaskedLMMainModel:
    from electra.hf_configs import discriminator_hf_config

    return MaskedLMMainModel(
        discriminator_hf_config(config, pad_token_id), copy_mechanism=config.objective == "all-tokens-mlm"
    )


# ------------------------------------------------------------------------------------------------------ losses
def electra_15_loss(
    disc_logits: torch.Tensor, is_replaced: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """ELECTRA's binary cross-entropy, averaged over the picked (masked) positions only."""
    return replaced_token_loss(disc_logits, is_replaced, positions)


def copy_mechanism_nll(
    token_logits: torch.Tensor, copy_logits: torch.Tensor, input_tokens: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Per-row -log p(target), p = D * 1[target == input] + (1 - D) * softmax(token_logits), D = sigmoid(copy)."""
    log_q = torch.log_softmax(token_logits.float(), dim=-1).gather(1, targets.unsqueeze(1)).squeeze(1)
    copy_logits = copy_logits.float()
    log_copy, log_generate = F.logsigmoid(copy_logits), F.logsigmoid(-copy_logits)
    generated = log_generate + log_q
    mixed = torch.logaddexp(log_copy, generated)
    return -torch.where(input_tokens == targets, mixed, generated)


# ------------------------------------------------------------------------------------------------------- steps
def stepping_stone_step(model, input_ids, attention_mask, token_type_ids, positions):
    """One training forward of `model.config.objective` (one of STEPPING_STONES); returns a PretrainingOutput."""
    from electra.modeling import PretrainingOutput, _discriminator_metrics, _generator_metrics

    cfg = model.config
    targets = input_ids[positions]
    corrupted, gen_logits, gen_log_probs = model.corrupt(input_ids, attention_mask, token_type_ids, positions)
    metrics: dict[str, torch.Tensor] = {}
    if cfg.objective == "electra-15":
        is_replaced = corrupted != input_ids
        disc_logits = model.discriminator(corrupted, attention_mask, token_type_ids)
        main_loss = electra_15_loss(disc_logits, is_replaced, positions)
        loss = cfg.discriminator_loss_weight * main_loss
        metrics["discriminator_loss"] = main_loss.detach()
        metrics.update(_discriminator_metrics(disc_logits, is_replaced, attention_mask))
    elif cfg.objective == "replace-mlm":
        hidden = model.discriminator.hidden_states(corrupted, attention_mask, token_type_ids)
        logits = model.discriminator.token_logits(hidden[positions])
        loss = main_loss = F.cross_entropy(logits.float(), targets)
        metrics["mlm_loss"] = main_loss.detach()
        metrics["mlm_accuracy"] = (logits.detach().argmax(-1) == targets).float().mean()
    elif cfg.objective == "all-tokens-mlm":
        loss, all_metrics = _all_tokens_loss(
            model, input_ids, corrupted, attention_mask, token_type_ids, positions
        )
        metrics.update(all_metrics)
    else:
        raise ValueError(f"{cfg.objective!r} is not a stepping-stone objective")
    if model.generator.trainable:
        gen_loss = F.nll_loss(gen_log_probs, targets)
        loss = loss + cfg.generator_loss_weight * gen_loss
        metrics["generator_loss"] = gen_loss.detach()
    metrics.update(_generator_metrics(gen_logits, targets))
    metrics["loss"] = loss.detach()
    return PretrainingOutput(loss, metrics)


def predicted_everywhere(attention_mask) -> torch.Tensor:
    """All-Tokens MLM's targets: every real token (so the head runs at every position the FLOP count charges)."""
    return attention_mask.bool()


def _all_tokens_loss(model, input_ids, corrupted, attention_mask, token_type_ids, positions):
    main = model.discriminator
    where = predicted_everywhere(attention_mask)
    hidden = main.hidden_states(corrupted, attention_mask, token_type_ids)
    rows = hidden[where]
    token_logits = main.token_logits(rows)
    copy_logits = main.copy_head(rows).squeeze(-1)
    targets, inputs = input_ids[where], corrupted[where]
    nll = copy_mechanism_nll(token_logits, copy_logits, inputs, targets)
    loss = nll.mean()
    with torch.no_grad():
        copy = torch.sigmoid(copy_logits.float())
        mixture = (1 - copy).unsqueeze(1) * torch.softmax(token_logits.float(), dim=-1)
        mixture.scatter_add_(1, inputs.unsqueeze(1), copy.unsqueeze(1))
        correct = mixture.argmax(-1) == targets
        masked = positions[where]
        metrics = {
            "all_tokens_loss": loss.detach(),
            "copy_probability": copy.mean(),
            "all_tokens_accuracy": correct.float().mean(),
            "mlm_accuracy": (correct & masked).float().sum() / masked.sum().clamp_min(1),
        }
    return loss, metrics
