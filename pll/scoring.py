"""Pseudo-log-likelihood scorers: Electric (one pass), ELECTRA-TT (one pass of each model), masked LM (one pass
per token, the Salazar et al. baseline), and the loader that builds one from a model directory (what a directory
offers, and the method and device, are checked first, in `electra.pll.model_dirs`).

Every scorer returns per-token scores for the non-special tokens of a sentence; the sentence PLL is their sum and a
word's score is the sum over its pieces. Electric's and ELECTRA-TT's scores are unnormalised log-likelihoods (the
partition function of each position is dropped), which is what ranking hypotheses needs.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForMaskedLM, ElectraForPreTraining

from electra.core.errors import UserError
from electra.core.files import feed_file
from electra.core.settings import spelled
from electra.data.tokenization import require_tokenizer_fits
from electra.discriminators.energy import electra_tt_token_log_likelihood
from electra.export.layout import load_pretrained
from electra.generators.shared_towers import cloze_log_q
from electra.generators.two_tower import TwoTowerGenerator
from electra.pll.methods import WITHIN_WORD, ScorerChoice
from electra.pll.model_dirs import ModelLayout, inspect_model_dir, load_tokenizer, pick_device, resolve_method
from electra.training.run_log import progress_off

log = logging.getLogger(__name__)


@dataclass
class Encoded:
    ids: list[int]
    scored: list[int]  # positions of the non-special tokens, in order
    word_of: list[int | None]  # word index of every position (None for specials)
    pieces: list[str]
    truncated: bool = False  # longer than the model: only its first max_length - 2 pieces are scored


@dataclass
class SentenceScore:
    text: str
    pll: float
    tokens: list[tuple[str, float]]
    token_words: list[int | None] = field(default_factory=list, repr=False)  # the word of each scored token
    truncated: bool = False  # the PLL covers only the pieces that fit the model
    join: Callable[[list[str]], str] = field(default=" ".join, repr=False, compare=False)  # pieces -> word

    @property
    def pieces(self) -> int:
        """How many word pieces the PLL sums over (the length that length normalisation and PPPL divide by)."""
        return len(self.tokens)

    @property
    def word_count(self) -> int:
        return len(dict.fromkeys(self.token_words))

    @cached_property
    def words(self) -> list[tuple[str, float]]:
        """(word, sum of its pieces' scores), built on first use: scoring n-best lists never needs them."""
        groups: dict[int | None, tuple[list[str], float]] = {}
        for (piece, value), word in zip(self.tokens, self.token_words):
            pieces, total = groups.get(word, ([], 0.0))
            groups[word] = (pieces + [piece], total + value)
        return [(self.join(pieces), total) for pieces, total in groups.values()]


# Beyond this many characters a sentence is cut to its first words before tokenizing (`Scorer._heads`).
LONG_SENTENCE_CHARS = 50_000


def _first_words(text: str, count: int) -> str:
    """`text` up to the end of its `count`-th whitespace-separated word (all of it when it has fewer)."""
    end = len(text)
    for index, match in enumerate(re.finditer(r"\S+", text)):
        if index + 1 == count:
            end = match.end()
            break
    return text[:end]


def _opening(text: str, words: int = 8, chars: int = 60) -> str:
    """How a message names a sentence: its first `words` words, at most `chars` characters of them (a line with
    no spaces, such as Chinese text, is one "word" of any length), and "..." where it goes on."""
    head = _first_words(text, words)[:chars]
    return head if head == text else head + " ..."


class Scorer:
    """Shared tokenisation, batching and aggregation; subclasses supply `token_scores`."""

    method = "base"
    # Which model and method produced the scores (`scorer_identity`), written beside every saved PLL; None for a
    # scorer built by hand rather than by `load_scorer`.
    identity: str | None = None

    def __init__(self, tokenizer: Any, device: torch.device, batch_size: int, max_length: int):
        if not getattr(tokenizer, "is_fast", False):
            raise UserError("scoring needs a fast tokenizer (tokenizer.json) to map pieces to words.")
        self.tokenizer = tokenizer
        self.device = device
        self.batch_size = max(1, batch_size)
        self.max_length = max_length

    # ---- tokenisation ----
    def encode(self, sentences: Sequence[str]) -> list[Encoded]:
        """Pieces of every sentence; one longer than the model keeps its first max_length - 2 pieces (and [SEP]),
        as `truncation=True` would, and is marked `truncated` so the caller can say so."""
        batch = self.tokenizer(self._heads(sentences), return_special_tokens_mask=True)
        out = []
        for i, ids in enumerate(batch["input_ids"]):
            special = batch["special_tokens_mask"][i]
            words = batch.word_ids(i)
            truncated = len(ids) > self.max_length
            if truncated:
                keep = [*range(self.max_length - 1), len(ids) - 1]
                ids, special, words = (
                    [ids[p] for p in keep],
                    [special[p] for p in keep],
                    [words[p] for p in keep],
                )
                # Named by its first words: `i` counts within this call's batch, which is not the user's line
                # (blank lines, chunks of 1,024) nor a position in an n-best list (its distinct texts, sorted).
                log.warning(
                    "a sentence has more pieces than the model takes; scored on its first %d: %r",
                    self.max_length - 2,
                    _opening(sentences[i]),
                )
            scored = [p for p in range(len(ids)) if not special[p]]
            word_of = [None if special[p] else words[p] for p in range(len(ids))]
            pieces = self.tokenizer.convert_ids_to_tokens(ids)
            out.append(Encoded(ids=ids, scored=scored, word_of=word_of, pieces=pieces, truncated=truncated))
        return out

    def too_long(self, sentences: Sequence[str]) -> list[bool]:
        """Which sentences have more pieces than the model takes (their scores would cover a prefix only)."""
        lengths = self.tokenizer(self._heads(sentences), return_length=True)["length"]
        return [length > self.max_length for length in lengths]

    def _heads(self, sentences: Sequence[str]) -> list[str]:
        """Each sentence, or of a very long one its first words: enough for more pieces than the model takes
        (a word gives at least one piece), so it is still truncated, and scored, exactly as the whole line would
        be. Tokenizing a whole 3.6 MB line to keep its first 510 pieces took 27 s and 1.1 GB."""
        words = 2 * self.max_length
        return [_first_words(s, words) if len(s) > LONG_SENTENCE_CHARS else s for s in sentences]

    def pad(self, rows: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        return ids.to(self.device), mask.to(self.device)

    def sentence_batches(self, encoded: Sequence[Encoded]) -> Iterator[list[int]]:
        """Indices of sentences in batches of similar length (less padding)."""
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        for start in range(0, len(order), self.batch_size):
            yield order[start : start + self.batch_size]

    def token_scores(self, encoded: Sequence[Encoded]) -> list[list[float]]:
        raise NotImplementedError

    # ---- public API ----
    @torch.inference_mode()
    def score(self, sentences: Sequence[str]) -> list[SentenceScore]:
        """The score of each of `sentences` (a list of strings; [] gives [])."""
        sentences = _sentence_list(sentences)
        if not sentences:  # the tokenizer fails on an empty batch (IndexError)
            return []
        encoded = self.encode(sentences)
        per_token = self.token_scores(encoded)
        results = []
        join = self.tokenizer.convert_tokens_to_string
        for text, enc, scores in zip(sentences, encoded, per_token):
            tokens = [(enc.pieces[p], s) for p, s in zip(enc.scored, scores)]
            token_words = [enc.word_of[p] for p in enc.scored]
            results.append(SentenceScore(text, float(sum(scores)), tokens, token_words, enc.truncated, join))
        return results

    def sentence_plls(self, sentences: Sequence[str]) -> list[float]:
        """The PLL of each of `sentences` (a list of strings): the sum of its pieces' scores, 0.0 for a sentence
        with none; one longer than the model is scored on the pieces that fit (`score` marks it `truncated`)."""
        return [s.pll for s in self.score(sentences)]


def _sentence_list(sentences: Any) -> list[str]:
    """`sentences` as a list, each one a string. A single string had been scored character by character, a
    generator as no sentences at all (it was read once to tokenize, then found empty), and None inside the list
    failed in the tokenizer."""
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, not one str: pass [text].")
    try:
        listed = list(sentences)
    except TypeError:
        raise TypeError(f"sentences must be a list of strings, not {type(sentences).__name__}.") from None
    for index, sentence in enumerate(listed):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{index}] is {type(sentence).__name__}, not str.")
    return listed


class ElectricScorer(Scorer):
    """One forward per batch: the exported head outputs -E(x)_t, so each token's score is that output."""

    method = "electric"

    def __init__(self, model: Any, tokenizer: Any, device: torch.device, batch_size: int = 64):
        super().__init__(tokenizer, device, batch_size, model.config.max_position_embeddings)
        self.model = model.to(device).eval()

    def token_scores(self, encoded: Sequence[Encoded]) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in encoded]
        for batch in tqdm(
            list(self.sentence_batches(encoded)),
            desc="electric",
            disable=True if progress_off() else None,
            leave=False,
        ):
            ids, mask = self.pad([encoded[i].ids for i in batch])
            neg_energy = self.model(input_ids=ids, attention_mask=mask).logits.float().cpu()
            for row, i in enumerate(batch):
                out[i] = neg_energy[row, encoded[i].scored].tolist()
        return out


class ElectraTTScorer(Scorer):
    """ELECTRA-TT: log p ≈ log(k q D / (n (1 - D))) from one discriminator pass and one generator pass."""

    method = "electra-tt"

    def __init__(
        self,
        discriminator: Any,
        generator: Any,
        tokenizer: Any,
        device: torch.device,
        batch_size: int = 64,
        mask_prob: float = 0.15,
    ):
        super().__init__(tokenizer, device, batch_size, discriminator.config.max_position_embeddings)
        self.discriminator = discriminator.to(device).eval()
        self.generator = generator.to(device).eval()
        self.mask_prob = mask_prob

    def token_scores(self, encoded: Sequence[Encoded]) -> list[list[float]]:
        log_q = cloze_log_q(
            self.generator,
            [e.ids for e in encoded],
            [e.scored for e in encoded],
            disable_progress=True if progress_off() else None,
        )
        out: list[list[float]] = [[] for _ in encoded]
        for batch in tqdm(
            list(self.sentence_batches(encoded)),
            desc="electra-tt",
            disable=True if progress_off() else None,
            leave=False,
        ):
            ids, mask = self.pad([encoded[i].ids for i in batch])
            disc_logits = self.discriminator(input_ids=ids, attention_mask=mask).logits.float().cpu()
            for row, i in enumerate(batch):
                pos = encoded[i].scored
                if not pos:
                    continue
                est = electra_tt_token_log_likelihood(
                    disc_logits[row, pos][None], log_q[i][None], len(pos), self.mask_prob
                )
                out[i] = est[0].tolist()
        return out


class ClozeScorer(Scorer):
    """The two-tower generator alone: Σ log q(x_t | x_\\t), a normalised cloze PLL in one pass.

    Electric and ELECTRA-TT runs carry this generator; early in training it ranks sentences far better than the
    energy head, which learns word order much later (README, "Scoring sentences").
    """

    method = "cloze"

    def __init__(self, generator: Any, tokenizer: Any, device: torch.device, batch_size: int = 64):
        super().__init__(tokenizer, device, batch_size, generator.config.max_position_embeddings)
        self.generator = generator.to(device).eval()

    def token_scores(self, encoded: Sequence[Encoded]) -> list[list[float]]:
        """Each tower runs once per distinct prefix or suffix (`electra.generators.shared_towers`): n-best hypotheses share
        most of theirs."""
        log_q = cloze_log_q(
            self.generator,
            [e.ids for e in encoded],
            [e.scored for e in encoded],
            disable_progress=True if progress_off() else None,
        )
        return [values.tolist() for values in log_q]


class MaskedLMScorer(Scorer):
    """Salazar et al.'s PLL: for every token, a copy of the sentence with that token masked; copies of all
    sentences are batched together (so long sentences are sub-batched) and the LM head runs at the masked
    position only.

    within_word: "none" masks the token alone; "l2r" also masks the later pieces of the same word and "whole"
    every piece of it — the fix for PLL overrating words split into several pieces (Kauf & Ivanova, 2023).
    """

    method = "mlm"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: torch.device,
        batch_size: int = 64,
        within_word: str = "none",
    ):
        super().__init__(tokenizer, device, batch_size, model.config.max_position_embeddings)
        if within_word not in WITHIN_WORD:
            raise UserError(
                f"{spelled(ScorerChoice, 'within_word')} must be one of {', '.join(WITHIN_WORD)}, not "
                f"{within_word!r}."
            )
        if tokenizer.mask_token_id is None:
            raise UserError("the tokenizer has no mask token, so it cannot drive masked-LM PLL.")
        self.model = model.to(device).eval()
        self.within_word = within_word
        self._head = _masked_lm_head(self.model)

    def masked_positions(self, enc: Encoded, p: int) -> list[int]:
        word = enc.word_of[p]
        if self.within_word == "none" or word is None:
            return [p]
        same = [q for q in enc.scored if enc.word_of[q] == word]
        return [q for q in same if q >= p] if self.within_word == "l2r" else same

    def token_scores(self, encoded: Sequence[Encoded]) -> list[list[float]]:
        items = sorted(
            ((i, j) for i, enc in enumerate(encoded) for j in range(len(enc.scored))),
            key=lambda item: len(encoded[item[0]].ids),
        )
        out = [[0.0] * len(enc.scored) for enc in encoded]
        mask_id = self.tokenizer.mask_token_id
        starts = range(0, len(items), self.batch_size)
        for start in tqdm(
            starts, desc="masked-LM PLL", disable=True if progress_off() else None, leave=False
        ):
            chunk = items[start : start + self.batch_size]
            rows, targets, positions = [], [], []
            for i, j in chunk:
                enc = encoded[i]
                p = enc.scored[j]
                row = list(enc.ids)
                for q in self.masked_positions(enc, p):
                    row[q] = mask_id
                rows.append(row)
                targets.append(enc.ids[p])
                positions.append(p)
            ids, mask = self.pad(rows)
            pos = torch.tensor(positions, device=self.device)
            logits = self._masked_logits(ids, mask, pos)
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            picked = (
                log_probs.gather(-1, torch.tensor(targets, device=self.device)[:, None]).squeeze(-1).cpu()
            )
            for (i, j), value in zip(chunk, picked.tolist()):
                out[i][j] = value
        return out

    def _masked_logits(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(ids.shape[0], device=ids.device)
        if self._head is None:
            return self.model(input_ids=ids, attention_mask=mask).logits[rows, pos]
        hidden = self.model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        return self._head(hidden[rows, pos])


def _masked_lm_head(model: Any) -> Any:
    """The LM head as a function of hidden states, so logits are computed at the masked position only.
    Unknown architectures fall back to the full forward (correct, just slower)."""
    if hasattr(model, "generator_predictions") and hasattr(model, "generator_lm_head"):  # ElectraForMaskedLM
        return lambda h: model.generator_lm_head(model.generator_predictions(h))
    for name in ("cls", "lm_head"):  # BertForMaskedLM, RobertaForMaskedLM
        if hasattr(model, name) and hasattr(model, "base_model"):
            return getattr(model, name)
    return None


# ---------------------------------------------------------------- loading


def load_scorer(
    model_dir: str | Path,
    method: str = "auto",
    device: str = "auto",
    batch_size: int = 64,
    within_word: str = "none",
    identity: str | None = None,
) -> Scorer:
    """The scorer a directory supports: a run's export, one of its parts, or any local `transformers` masked-LM
    checkpoint. `method="auto"` takes the export's default (what its objective declares). `identity` is
    `scorer_identity` of the same arguments where the caller has it already: hashing the weights again would read
    a large model's files twice."""
    # before any file is read, as `electra score` checks its flags: a device torch cannot use was its traceback
    # once the model had loaded, and a batch size of 0 was taken as 1
    dev = pick_device(device)
    if batch_size < 1:
        raise UserError(f"{spelled(ScorerChoice, 'batch_size')} must be at least 1, got {batch_size}.")
    layout = inspect_model_dir(model_dir)
    method = resolve_method(layout, method)
    scorer = _build_scorer(layout, method, dev, batch_size, within_word)
    scorer.identity = identity or _identity(layout.methods[method], method, within_word)
    return scorer


def _build_scorer(
    layout: ModelLayout, method: str, dev: torch.device, batch_size: int, within_word: str
) -> Scorer:
    dirs = layout.methods[method]
    tok = load_tokenizer([*dirs, layout.root, *layout.tokenizer_dirs])
    if method == "mlm":
        model = load_pretrained(AutoModelForMaskedLM, dirs[0], complete=True)  # a random head scores nothing
        require_tokenizer_fits(tok, model.config.vocab_size, dirs[0])
        return MaskedLMScorer(model, tok, dev, batch_size, within_word)
    if method == "cloze":
        cloze = TwoTowerGenerator.from_pretrained(dirs[0])
        require_tokenizer_fits(tok, cloze.config.vocab_size, dirs[0])
        return ClozeScorer(cloze, tok, dev, batch_size)
    disc = load_pretrained(ElectraForPreTraining, dirs[0], complete=True)
    require_tokenizer_fits(tok, disc.config.vocab_size, dirs[0])
    if method == "electric":
        return ElectricScorer(disc, tok, dev, batch_size)
    generator = TwoTowerGenerator.from_pretrained(dirs[1])
    mask_prob = float(getattr(generator.config, "mask_prob", 0.15))
    return ElectraTTScorer(disc, generator, tok, dev, batch_size, mask_prob)


def scorer_identity(model_dir: str | Path, method: str = "auto", within_word: str = "none") -> str:
    """What `load_scorer(model_dir, method, within_word=...)` would write beside its PLLs, without loading it.

    `rescore` compares it with the record in `--scores` files before any scoring, so PLLs of two models are never
    fused under one weight."""
    layout = inspect_model_dir(model_dir)
    method = resolve_method(layout, method)
    return _identity(layout.methods[method], method, within_word)


def _identity(dirs: Sequence[Path], method: str, within_word: str) -> str:
    """`METHOD:sha256=DIGEST`, DIGEST over the weight files of the directories the method reads.

    The weights, not the path, name the model: a run copied elsewhere (or named as its root in one command and as
    its discriminator/ in another) is the same scorer, and a run retrained in place under the same name is not.
    Masked-LM PLL with --within-word l2r|whole is another method on the same weights: `mlm+l2r`."""
    digest = hashlib.sha256()
    for directory in dirs:
        files = sorted(directory.glob("*.safetensors")) or sorted(directory.glob("*.bin"))
        for file in files:
            digest.update(file.name.encode() + b"\0")
            feed_file(digest, file)
    name = f"{method}+{within_word}" if method == "mlm" and within_word != "none" else method
    return f"{name}:sha256={digest.hexdigest()[:16]}"
