"""Electric's energy head and its noise-contrastive loss; ELECTRA-TT's likelihood estimate.

Electric (Clark et al., EMNLP 2020; dissertation ch. 5) models p(x_t | x_\\t) ∝ exp(-E(x)_t) with one scalar
energy per token, so a sentence is scored in one forward pass. It is trained with NCE against a noise
distribution q — the two-tower cloze generator — using the efficient approximation of the paper's Algorithm 2:

    1. pick k = ceil(0.15 n) distinct positions R of the n positions;
    2. replace every x_t, t in R, at once with a sample from q(x_t | x_\\t), giving x^noised;
    3. for every position t = 1..n add to the loss
         t not in R:  -log [ (n-k) exp(-E(x^noised)_t) / ((n-k) exp(-E(x^noised)_t) + k q(x^noised_t | x_\\t)) ]
         t in R:      -log [ k q(x^noised_t | x_\\t)    / ((n-k) exp(-E(x^noised)_t) + k q(x^noised_t | x_\\t)) ]

Both terms are one binary cross-entropy on the logit z_t = E(x^noised)_t + log q(x^noised_t | x_\\t) + log k
- log(n-k) with label "t in R": -log σ(-z) for kept tokens and -log σ(z) for replaced ones. A sample that happens
to equal the original token still counts as replaced (Algorithm 2 labels positions, not tokens). q is the noise
distribution and gets no gradient from this loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from transformers.models.electra.modeling_electra import ElectraDiscriminatorPredictions


class EnergyHead(ElectraDiscriminatorPredictions):
    """E(x)_t = wᵀ gelu(W h_t + b) + c: ELECTRA's discriminator head read as an energy.

    It keeps HF's parameter names (`dense`, `dense_prediction`), so an Electric discriminator exports as a plain
    `ElectraForPreTraining` whose head output is the NEGATIVE energy -E(x)_t (higher = more likely) — the export
    contract of `pll` (config.json carries `"electra_objective": "electric"`). The hidden dense layer before wᵀ
    follows the reference implementation, which reuses the ELECTRA head for Electric.
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return -super().forward(hidden_states)


def init_energy_offset(head: torch.nn.Module, vocab_size: int, mask_prob: float = 0.15) -> None:
    """Start the head's output at -E = -(log V + log((1-p)/p)), where NCE's logit z is about 0 under the near-uniform
    q of a fresh generator. From a zero bias the first steps push every energy up by ~9 at once, which the
    encoder fits fastest by collapsing all token states to one vector (seen on `tiny`); starting at the offset
    avoids most of that push. Call it once at model construction, not on resume.
    """
    offset = math.log(vocab_size) + math.log((1.0 - mask_prob) / mask_prob)
    with torch.no_grad():
        head.dense_prediction.bias.fill_(-offset)


def electric_nce_logits(
    energies: torch.Tensor, log_q: torch.Tensor, k_per_seq: torch.Tensor, n_per_seq: torch.Tensor
) -> torch.Tensor:
    """z_t = E_t + log q_t + log k - log(n-k): the log-odds that position t was replaced by noise."""
    k = k_per_seq.to(torch.float32)[:, None]
    n = n_per_seq.to(torch.float32)[:, None]
    # A row with no positions (k = n = 0) would give log 0 - log 0 = NaN, and NaN survives masking in backward.
    return energies.float() + log_q.float().detach() + torch.log(k.clamp(min=1)) - torch.log(n - k)


def electric_nce_loss(
    energies: torch.Tensor,
    log_q: torch.Tensor,
    replaced_mask: torch.Tensor,
    attention_mask: torch.Tensor,
    k_per_seq: torch.Tensor,
) -> torch.Tensor:
    """Algorithm 2's loss, averaged over the counted positions of the batch.

    energies: [B, L] E(x^noised)_t (the negative of an exported head's output).
    log_q: [B, L] log q(x^noised_t | x_\\t) under the two-tower generator run on the ORIGINAL sequence — of the
        sample at replaced positions and of the original token elsewhere (detached here in any case).
    replaced_mask: [B, L] bool, the k positions R of each sequence.
    attention_mask: [B, L] the n positions that count (pass the candidate mask: real tokens other than
        [CLS]/[SEP]); n = its row sum.
    k_per_seq: [B] the k of each sequence (ceil(0.15 n)).
    """
    counted = attention_mask.bool()
    n = counted.sum(-1)
    z = electric_nce_logits(energies, log_q, k_per_seq, n)
    replaced = replaced_mask.bool() & counted
    # softplus forms stay finite when n == k (log(n-k) = -inf only reaches replaced positions, whose loss is 0).
    losses = torch.where(replaced, F.softplus(-z), F.softplus(z))
    losses = torch.where(counted, losses, torch.zeros_like(losses))
    return losses.sum() / counted.sum().clamp(min=1)


def electra_tt_token_log_likelihood(
    discriminator_logits: torch.Tensor, log_q: torch.Tensor, n: torch.Tensor | int, mask_prob: float = 0.15
) -> torch.Tensor:
    """ELECTRA-TT's estimate log p(x_t | x_\\t) ≈ log[k q(x_t | x_\\t) D(x)_t / (n (1 - D(x)_t))].

    D is the discriminator's probability that x_t is ORIGINAL. HF's ElectraForPreTraining logit is the log-odds of
    "replaced", so log D - log(1 - D) = -logit, and the estimate is log(k/n) + log q - logit. The estimate is
    unnormalised (like Electric's -E), which is fine for ranking hypotheses.
    """
    n_t = torch.as_tensor(n, dtype=torch.float32, device=log_q.device)
    k_t = torch.ceil(n_t * mask_prob).clamp(min=1)
    log_ratio = torch.log(k_t) - torch.log(n_t.clamp(min=1))
    if log_ratio.dim() == 1:
        log_ratio = log_ratio[:, None]
    return log_ratio + log_q.float() - discriminator_logits.float()
