"""`electra rescore`'s inputs, checked before any scoring: scoring every hypothesis can take hours, so a typo in a
flag, a feature the lists lack or two outputs at one path must be refused first, in one line.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from electra.core.errors import UserError

if TYPE_CHECKING:
    from electra.pll.nbest import Utterance

# Feature names `rescore` computes itself rather than reading from a hypothesis's fields.
COMPUTED_FEATURES = ("score", "pll", "words", "pieces")

CLASSIC_ONLY = (
    "--lambdas is the classic score + λ·PLL recipe: use it with one --model (or --scores) and no "
    "--features/--length, or drop it to search weights for every feature."
)


def parse_lambdas(raw: str) -> tuple[float, ...]:
    """--lambdas as finite numbers: a λ of `nan` or `inf` would write NaN (not JSON) into report.json and every
    list."""
    try:
        lambdas = tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--lambdas {raw!r}: give comma-separated numbers, e.g. 0.1,0.2,0.5.") from None
    if not lambdas:
        raise UserError("no λ values to try; pass at least one to --lambdas.")
    if not all(math.isfinite(lam) for lam in lambdas):
        raise UserError(f"--lambdas {raw!r}: every λ must be a finite number, e.g. 0.1,0.2,0.5.")
    return lambdas


def parse_features(raw: str) -> list[str]:
    """--features as a list of names, the first the anchor; at least one."""
    features = [f.strip() for f in raw.split(",") if f.strip()]
    if not features:
        raise UserError("--features: name at least one numeric field of the hypotheses (e.g. score).")
    return features


def check_features(
    features: Sequence[str],
    named_lists: Sequence[tuple[str, Sequence[Utterance]]],
    adds_pll: bool,
    length: str,
) -> None:
    """--features, checked on every (path, utterances) list. Each feature gets one weight, so a name given twice
    (or one that --model/--scores (`adds_pll`) or --length adds anyway) is refused: the anchor's weight would be
    lost. Every hypothesis of every list must hold a finite number in each field fused, and one that does not is
    named with its file and utterance."""
    added = (["pll"] if adds_pll else []) + ([length] if length != "none" else [])
    every = [*features, *added]
    twice = next((name for name in every if every.count(name) > 1), None)
    if twice is not None:
        by = {
            "pll": "--model/--scores add it",
            "words": "--length words adds it",
            "pieces": "--length pieces adds it",
        }
        why = f" ({by[twice]})" if twice in by and twice in added else ""
        raise UserError(f"--features: {twice!r} is named twice{why}; name each feature once.")
    fields = [name for name in features if name not in COMPUTED_FEATURES and not name.startswith("pll:")]
    for name in fields:
        for path, utts in named_lists:
            for utt in utts:
                for hyp in utt.hyps:
                    if not is_finite_number(hyp.extra.get(name)):
                        raise UserError(
                            f"{path}:{utt.id}: hypothesis {hyp.text!r} has no finite number in field {name!r}, "
                            "which --features fuses; every hypothesis of every list needs it: name fields all "
                            "of them have (e.g. --features am_score,lm_score)."
                        )


def is_finite_number(value: object) -> bool:
    """A JSON number that is neither a boolean nor NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def rescored_names(dev: str, tests: Sequence[str]) -> list[str]:
    """The file name each list's re-ranked copy gets in --output-dir: NAME.rescored.json, as the README documents
    (NAME without .json, .jsonl or .tsv; a folder's name as it is).

    Two inputs with the same file name (da/nbest.json, db/nbest.json; or one file given twice) would write one
    path twice, the second list replacing the first; those get their split in front (dev.nbest.rescored.json,
    test.nbest.rescored.json; test1., test2., ... when there are several --test files). Names that still clash,
    which takes inputs named like those prefixed ones, are refused before any work."""
    labels = ["dev"] + (["test"] if len(tests) == 1 else [f"test{i}" for i in range(1, len(tests) + 1)])
    bases = [re.sub(r"\.(json|jsonl|tsv)$", "", Path(p).name) + ".rescored.json" for p in [dev, *tests]]
    count = Counter(bases)
    names = [f"{label}.{base}" if count[base] > 1 else base for label, base in zip(labels, bases)]
    clashing = [n for n, k in Counter(names).items() if k > 1]
    if clashing:
        inputs = [p for p, n in zip([dev, *tests], names) if n == clashing[0]]
        raise UserError(
            f"{' and '.join(inputs)} would both be written as {clashing[0]}; rename one of them, or rescore them "
            "in separate runs."
        )
    return names


def pll_files(out_dir: Path, models: Sequence[str], features: Sequence[str]) -> dict[str, Path]:
    """Feature name -> the JSON-lines file in --output-dir that keeps its model's PLLs: `pll.jsonl` for the first
    model, `pll-DIRNAME.jsonl` for each further one (feature `pll:DIRNAME`, numbered when two directories share a
    name). Scoring every hypothesis of a few thousand utterances is hours of masked-LM PLL: the file fills as the
    scoring goes, so that `--resume` continues a stopped run, and, whole, it is what `--scores` reads to fuse again
    without the model."""
    files: dict[str, Path] = {}
    taken = [*features, "pll"]
    for index, model in enumerate(models):
        if index == 0:
            files["pll"] = out_dir / "pll.jsonl"
            continue
        base = f"pll:{Path(model).resolve().name}"
        name, k = base, 2
        while name in taken:
            name, k = f"{base}-{k}", k + 1
        taken.append(name)
        files[name] = out_dir / f"{name.replace(':', '-', 1)}.jsonl"
    return files
