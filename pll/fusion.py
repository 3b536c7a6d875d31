"""Score fusion for n-best rescoring: a weighted sum of hypothesis features, with weights found on dev.

Recognizers put their scores on very different scales (ESPnet log-probabilities of tens of nats, pocketsphinx path
scores of thousands, separate acoustic and LM fields), so a fixed grid of LM weights fits one recognizer and
silently under-weights the LM on another. Here every feature is divided by its spread on the dev lists (the mean,
over utterances, of its standard deviation within a list: what decides a re-ranking), the first feature (the
first-pass score, by default) keeps weight 1, and each other weight is searched on a grid of log-spaced values
in those units, both signs, by coordinate ascent (each weight in turn, the others fixed, until a round changes
nothing), then refined by smaller multiplicative steps around the winner. Ties go to the setting closest to the
first pass (the smaller total weight). The corpus WER of a choice is a sum over a table of per-hypothesis word edits
(`electra.pll.rescore.EditTable`), so thousands of settings cost well under a second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from electra.core.errors import UserError
from electra.pll.nbest import Hypothesis, Utterance, length_penalty
from electra.pll.rescore import DEFAULT_LAMBDAS, EditTable, choose_lambda

# Log-spaced magnitudes, in spread units, from 1/100 to 30 of the anchor's spread (13 per side, and zero).
MAGNITUDES = tuple(float(10**e) for e in np.linspace(-2.0, math.log10(30.0), 15))
REFINE_STEPS = (0.5, 0.7, 0.85, 0.95, 1.05, 1.2, 1.4, 2.0)
MAX_ROUNDS = 6


@dataclass(frozen=True)
class LengthNorm:
    """--ln: the `pll` feature is divided by a length penalty of its pieces (see electra.pll.nbest.length_penalty)."""

    alpha: float = 0.0
    kind: str = "gnmt"


def feature_value(hyp: Hypothesis, name: str, ln: LengthNorm = LengthNorm()) -> float:
    """A hypothesis's value of a named feature: `score`, `pll`, `pll:NAME`, `words`, `pieces`, or one of its
    own numeric fields (a recognizer's `am_score`, `lm_score`, ...)."""
    if name == "score":
        return hyp.score
    if name == "words":
        return float(len(hyp.text.split()))
    if name == "pieces":
        if hyp.pieces is None:
            raise UserError(f"feature 'pieces': hypothesis {hyp.text!r} was scored without a piece count.")
        return float(hyp.pieces)
    if name == "pll":
        if hyp.pll is None:
            raise UserError(f"feature 'pll': hypothesis {hyp.text!r} has no PLL (pass --model or --scores).")
        if not ln.alpha:
            return hyp.pll
        if hyp.pieces is None:
            raise UserError(f"--ln: hypothesis {hyp.text!r} has a PLL but no piece count; score it again.")
        return hyp.pll / length_penalty(hyp.pieces, ln.alpha, ln.kind)
    # the recognizer's fields, checked finite in every hypothesis of every list by
    # `electra.pll.rescore_inputs.check_features` before any scoring, and `pll:NAME` of each extra scoring model
    value = hyp.extra[name]
    return float(value)


@dataclass
class FeatureMatrix:
    """Every hypothesis's features, padded to [utterances, longest list, features] (padding never wins)."""

    names: list[str]
    values: np.ndarray  # (U, H, F)
    valid: np.ndarray  # (U, H) bool

    @classmethod
    def of(
        cls, utts: Sequence[Utterance], names: Sequence[str], ln: LengthNorm = LengthNorm()
    ) -> FeatureMatrix:
        longest = max(len(u.hyps) for u in utts)
        values = np.zeros((len(utts), longest, len(names)))
        valid = np.zeros((len(utts), longest), dtype=bool)
        for i, utt in enumerate(utts):
            for j, hyp in enumerate(utt.hyps):
                values[i, j] = [feature_value(hyp, name, ln) for name in names]
                valid[i, j] = True
        return cls(list(names), values, valid)

    def spreads(self) -> np.ndarray:
        """Per feature: the mean over utterances of its standard deviation within a list (1 where constant)."""
        out = []
        for f in range(len(self.names)):
            stds = [self.values[i, self.valid[i], f].std() for i in range(len(self.values))]
            spread = float(np.mean(stds)) if stds else 0.0
            out.append(spread if spread > 0 else 1.0)
        return np.array(out)

    def choices(self, weights: np.ndarray) -> np.ndarray:
        """Index of the best hypothesis per utterance under `weights` (ties: the earlier hypothesis)."""
        combined = np.where(self.valid, self.values @ weights, -np.inf)
        return combined.argmax(axis=1)


@dataclass
class FusionResult:
    names: list[str]
    weights: dict[str, float]  # in the features' own units: combined = sum(weights[f] * value_f)
    spreads: dict[str, float]
    dev_wer: float
    ties: int  # settings reaching dev_wer among those evaluated
    evaluated: int
    rounds: int
    search_space: dict[str, object] = field(default_factory=dict)


def fuse(
    dev: Sequence[Utterance],
    names: Sequence[str],
    fixed: Mapping[str, float] | None = None,
    extra_candidates: Mapping[str, Sequence[float]] | None = None,
    ln: LengthNorm = LengthNorm(),
) -> FusionResult:
    """Weights for `names` (the first is the anchor, weight 1) with the lowest dev WER.

    `fixed` pins weights (in the features' units) that are not searched; `extra_candidates` adds raw-unit values to
    a feature's grid (the classic λ grid, so that the default search contains the old one). `names` holds the
    anchor and at least one feature to weigh (`electra rescore` refuses fewer with its flags)."""
    matrix = FeatureMatrix.of(dev, names, ln)
    edits = EditTable.of(dev)
    spreads = matrix.spreads()
    fixed = dict(fixed or {})
    free = [f for f in range(1, len(names)) if names[f] not in fixed]
    weights = np.zeros(len(names))  # in spread units (raw weight = unit weight / spread x anchor spread)
    weights[0] = 1.0
    for name, raw in fixed.items():
        weights[names.index(name)] = raw * spreads[names.index(name)] / spreads[0]
    grid = {
        f: sorted(
            {0.0, *MAGNITUDES, *(-m for m in MAGNITUDES)}
            | _raw_extras(extra_candidates, names[f], spreads, f)
        )
        for f in free
    }
    dev_wer = _DevWer(matrix, edits, spreads)
    weights, rounds = _coordinate_ascent(weights, free, grid, dev_wer)
    weights = _refine(weights, free, dev_wer)
    best = dev_wer(weights)
    raw = weights / spreads * spreads[0]  # the anchor's raw weight is 1; the others rescale to its units
    raw = raw / raw[0]
    return FusionResult(
        names=list(names),
        weights={name: float(w) for name, w in zip(names, raw)},
        spreads={name: float(s) for name, s in zip(names, spreads)},
        dev_wer=best,
        ties=sum(1 for value in dev_wer.seen.values() if abs(value - best) <= 1e-12),
        evaluated=len(dev_wer.seen),
        rounds=rounds,
        search_space={
            "unit": "each feature's mean within-list standard deviation on dev",
            "magnitudes": [round(m, 4) for m in MAGNITUDES],
            "signs": "both, and 0",
            "refine_steps": list(REFINE_STEPS),
            "max_rounds": MAX_ROUNDS,
        },
    )


class _DevWer:
    """The dev WER of a weight setting (in spread units), each setting evaluated once and remembered in `seen`
    (from which the ties and the number of settings evaluated are counted)."""

    def __init__(self, matrix: FeatureMatrix, edits: EditTable, spreads: np.ndarray):
        self.matrix, self.edits, self.spreads = matrix, edits, spreads
        self.seen: dict[tuple[float, ...], float] = {}

    def __call__(self, w: np.ndarray) -> float:
        key = tuple(np.round(w, 12))
        if key not in self.seen:
            self.seen[key] = self.edits.wer(self.matrix.choices(w / self.spreads))
        return self.seen[key]

    def better(self, candidate: np.ndarray, current: np.ndarray) -> bool:
        """A lower WER, or the same WER nearer the first pass (a smaller total weight beside the anchor's)."""
        a, b = self(candidate), self(current)
        return a < b - 1e-12 or (
            abs(a - b) <= 1e-12 and np.abs(candidate[1:]).sum() < np.abs(current[1:]).sum()
        )


def _coordinate_ascent(
    weights: np.ndarray, free: Sequence[int], grid: Mapping[int, Sequence[float]], dev_wer: _DevWer
) -> tuple[np.ndarray, int]:
    """Each free weight in turn over its grid, the others fixed, until a round changes nothing (at most
    `MAX_ROUNDS`); returns the weights and the rounds run."""
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        changed = False
        for f in free:
            for value in grid[f]:
                trial = weights.copy()
                trial[f] = value
                if dev_wer.better(trial, weights):
                    weights, changed = trial, True
        if not changed:
            break
    return weights, rounds


def _refine(weights: np.ndarray, free: Sequence[int], dev_wer: _DevWer) -> np.ndarray:
    """Multiplicative steps (`REFINE_STEPS`) around each chosen weight, until none helps (at most `MAX_ROUNDS`)."""
    for _ in range(MAX_ROUNDS):
        changed = False
        for f in free:
            for step in REFINE_STEPS:
                trial = weights.copy()
                trial[f] = weights[f] * step
                if dev_wer.better(trial, weights):
                    weights, changed = trial, True
        if not changed:
            break
    return weights


def _raw_extras(
    extras: Mapping[str, Sequence[float]] | None, name: str, spreads: np.ndarray, index: int
) -> set[float]:
    if not extras or name not in extras:
        return set()
    return {float(v) * spreads[index] / spreads[0] for v in extras[name]}


def fused_choices(
    utts: Sequence[Utterance], weights: Mapping[str, float], ln: LengthNorm = LengthNorm()
) -> list[int]:
    """Index of the best hypothesis of each utterance under raw-unit `weights` (ties: the earlier one)."""
    names = list(weights)
    matrix = FeatureMatrix.of(utts, names, ln)
    return [int(i) for i in matrix.choices(np.array([weights[n] for n in names]))]


def fused_score(hyp: Hypothesis, weights: Mapping[str, float], ln: LengthNorm = LengthNorm()) -> float:
    return sum(w * feature_value(hyp, name, ln) for name, w in weights.items())


def split_table(
    utts: Sequence[Utterance], weights: Mapping[str, float], ln: LengthNorm = LengthNorm()
) -> dict[str, float]:
    """WERs of one split: the first pass (the list's `score`), each searched feature alone, the fusion, the oracle."""
    edits = EditTable.of(utts)
    names = list(dict.fromkeys(["score", *weights]))
    matrix = FeatureMatrix.of(utts, names, ln)  # every feature read once; each row below is a weight vector

    def wer(chosen: Mapping[str, float]) -> float:
        return edits.wer(matrix.choices(np.array([chosen.get(n, 0.0) for n in names])))

    table = {"first_pass": wer({"score": 1.0})}
    for name in weights:
        if name not in LENGTH_FEATURES:  # "the longest hypothesis" is no ranking: length only helps fused
            table[f"{name}_alone"] = wer({name: 1.0})
    table["fused"] = wer(weights)
    table["oracle"] = edits.oracle()
    return table


LENGTH_FEATURES = ("words", "pieces")


def search_weights(
    dev: list[Utterance], features: list[str], lambdas: tuple[float, ...] | None, ln: LengthNorm
) -> tuple[dict[str, float], dict[str, Any]]:
    """The feature weights chosen on dev, and how they were found (for report.json): the λ of --lambdas with the
    lowest dev WER, else the fusion search (which tries the classic λ grid too when the anchor is 'score').

    `electra rescore` checked the combination before any scoring: --lambdas comes with features
    ["score", "pll"] only, and otherwise there are at least two features to fuse."""
    if lambdas is not None:
        lam, table = choose_lambda(dev, lambdas, ln.alpha, ln.kind)
        return {"score": 1.0, "pll": lam}, {"recipe": "score + λ·PLL", "dev_wer_by_lambda": table}
    extra = {"pll": DEFAULT_LAMBDAS} if features[0] == "score" else None
    result = fuse(dev, features, extra_candidates=extra, ln=ln)
    search = {
        "spreads": result.spreads,
        "dev_wer": result.dev_wer,
        "ties": result.ties,
        "settings_evaluated": result.evaluated,
        "rounds": result.rounds,
        "search_space": result.search_space,
    }
    return result.weights, search
