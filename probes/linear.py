"""Features from a frozen encoder, and the linear probe fitted on them.

A linear probe asks how much of a property is *linearly* readable from the encoder's last layer, with nothing
fine-tuned: the score then depends on the pretraining alone, not on a fine-tuning run's learning rate or luck, which
is what makes it low-noise at small budgets. The probe is multinomial logistic regression on standardised features,
fitted full-batch by L-BFGS: the objective is convex (strictly, with the L2 term), so the fit is deterministic up
to the optimiser's tolerance and needs no learning rate.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer

from electra.core.errors import UserError
from electra.data.tokenization import require_tokenizer, require_tokenizer_fits
from electra.finetune.models import load_encoder, resolve_model_dir


def load_frozen(model_dir: str | Path) -> tuple[nn.Module, object]:
    """(encoder in eval mode, fp32, no gradients; its fast tokenizer) from a checkpoint or a run's export, found
    the way `electra glue` finds them."""
    directory = require_tokenizer(resolve_model_dir(model_dir))  # else AutoTokenizer makes an empty one
    encoder = load_encoder(directory).float().eval().requires_grad_(False)
    refuse_causal(encoder, directory)
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(
            f"{directory}: the probes need a fast tokenizer (tokenizer.json) to map words to pieces."
        )
    require_tokenizer_fits(tokenizer, encoder.get_input_embeddings().num_embeddings, directory)
    return encoder, tokenizer


def refuse_causal(encoder: nn.Module, directory: str | Path) -> None:
    """One line for a causal model (a decoder-only one, GPT-2 and the like, or an encoder saved with `is_decoder`):
    each token's state there sees only the tokens before it, so a word's first piece knows nothing of the rest of
    the sentence and the probes (made for a bidirectional encoder) would measure the mask, not the pretraining.
    Attention layers of transformers say so by `is_causal`, whatever the model's config calls it."""
    if getattr(encoder.config, "is_decoder", False) is True or any(
        getattr(module, "is_causal", False) is True for module in encoder.modules()
    ):
        raise UserError(
            f"{directory}: is a causal (decoder) model, each token attending only to the ones before it; the "
            "probes read a bidirectional encoder: give an encoder checkpoint (e.g. RUN/discriminator)."
        )


def _batches(
    input_ids: Sequence[Sequence[int]], pad_id: int, batch_size: int
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """(original indices, padded ids, attention mask), longest first: sorting by length cuts the padding."""
    order = sorted(range(len(input_ids)), key=lambda i: -len(input_ids[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        width = len(input_ids[chunk[0]])
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, i in enumerate(chunk):
            ids[row, : len(input_ids[i])] = torch.tensor(input_ids[i], dtype=torch.long)
            mask[row, : len(input_ids[i])] = 1
        yield chunk, ids, mask


def _hidden(encoder: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    device = next(encoder.parameters()).device
    out = encoder(input_ids=ids.to(device), attention_mask=mask.to(device))
    return out.last_hidden_state.float().cpu()


def sentence_features(
    encoder: nn.Module, tokenizer, texts: Sequence[str], max_length: int = 128, batch_size: int = 64
) -> torch.Tensor:
    """[len(texts), hidden]: the mean of the last layer over each text's real tokens ([CLS] and [SEP] included).

    The mean, not [CLS]: a pretrained discriminator's [CLS] is trained by no objective here, while every token's
    state is, so the mean reads what pretraining put in the sequence."""
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
    features = torch.zeros(len(texts), encoder.config.hidden_size)
    with torch.inference_mode():
        for chunk, ids, mask in _batches(encoded, tokenizer.pad_token_id, batch_size):
            hidden = _hidden(encoder, ids, mask)
            weights = mask.unsqueeze(-1).float()
            features[chunk] = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
    return features.clone()  # a normal tensor: inference tensors cannot be saved for the probe's backward


def token_features(
    encoder: nn.Module,
    tokenizer,
    sentences: Sequence[Sequence[str]],
    max_length: int = 128,
    batch_size: int = 64,
) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """(features, kept): one row per word, the last layer at the word's first word-piece; `kept[r]` is the
    (sentence, word) index of row r. Words cut off by `max_length`, and words the tokenizer turns into no piece,
    have no row."""
    encoded = tokenizer(
        [list(s) for s in sentences], is_split_into_words=True, truncation=True, max_length=max_length
    )
    firsts: list[
        list[tuple[int, int]]
    ] = []  # per sentence: (position, word index) of each word's first piece
    for i in range(len(sentences)):
        seen: set[int] = set()
        positions = []
        for position, word in enumerate(encoded.word_ids(i)):
            if word is not None and word not in seen:
                seen.add(word)
                positions.append((position, word))
        firsts.append(positions)
    offsets = [0]
    for positions in firsts:
        offsets.append(offsets[-1] + len(positions))
    features = torch.zeros(offsets[-1], encoder.config.hidden_size)
    with torch.inference_mode():
        for chunk, ids, mask in _batches(encoded["input_ids"], tokenizer.pad_token_id, batch_size):
            hidden = _hidden(encoder, ids, mask)
            for row, i in enumerate(chunk):
                if firsts[i]:
                    positions = torch.tensor([p for p, _ in firsts[i]])
                    features[offsets[i] : offsets[i + 1]] = hidden[row, positions]
    kept = [(i, word) for i, positions in enumerate(firsts) for _, word in positions]
    return features.clone(), kept


@dataclass
class LinearProbe:
    """A fitted probe: logits = standardise(x) @ weight.T + bias over `classes` (the training labels, sorted)."""

    weight: torch.Tensor  # [classes, features]
    bias: torch.Tensor  # [classes]
    mean: torch.Tensor  # [features], the training features' mean
    std: torch.Tensor  # [features], their standard deviation (1 where a feature is constant)
    classes: list

    def predict(self, features: torch.Tensor) -> list:
        """The predicted label of every row."""
        x = (features.float() - self.mean) / self.std
        index = (x @ self.weight.T + self.bias).argmax(-1)
        return [self.classes[i] for i in index.tolist()]


def fit_probe(
    features: torch.Tensor,
    labels: Sequence[Hashable],
    seed: int = 0,
    weight_decay: float = 1e-3,
    max_iter: int = 200,
) -> LinearProbe:
    """Multinomial logistic regression: minimise mean cross-entropy + weight_decay / 2 * |W|^2 (the bias is not
    decayed) on features standardised by the training mean and deviation, by full-batch L-BFGS with a strong-Wolfe
    line search for at most `max_iter` iterations. `seed` draws the (small) starting weights."""
    if len(features) != len(labels) or not len(labels):
        raise ValueError(
            f"fit_probe needs as many labels as feature rows ({len(labels)} vs {len(features)}), >0"
        )
    x = features.float()
    mean = x.mean(0)
    std = x.std(0, unbiased=False)
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    x = (x - mean) / std
    classes = sorted(set(labels), key=lambda c: (str(type(c)), c))
    index = {c: i for i, c in enumerate(classes)}
    y = torch.tensor([index[c] for c in labels])
    generator = torch.Generator().manual_seed(seed)
    weight = (0.01 * torch.randn(len(classes), x.shape[1], generator=generator)).requires_grad_(True)
    bias = torch.zeros(len(classes), requires_grad=True)
    if len(classes) > 1:
        optimizer = torch.optim.LBFGS(
            [weight, bias],
            lr=1.0,
            max_iter=max_iter,
            history_size=10,
            tolerance_grad=1e-6,
            tolerance_change=1e-9,
            line_search_fn="strong_wolfe",
        )

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = (
                nn.functional.cross_entropy(x @ weight.T + bias, y) + 0.5 * weight_decay * weight.pow(2).sum()
            )
            loss.backward()
            return loss

        optimizer.step(closure)
    return LinearProbe(weight.detach(), bias.detach(), mean, std, classes)


def accuracy(probe: LinearProbe, features: torch.Tensor, labels: Sequence[Hashable]) -> float:
    """The fraction of rows whose predicted label is the true one (a label unseen in training is always wrong)."""
    if not len(labels):
        raise ValueError("accuracy of an empty set")
    predicted = probe.predict(features)
    return sum(p == t for p, t in zip(predicted, labels)) / len(labels)
