"""The PLL features of `electra rescore`: feature `pll` from the first --model or from --scores (PLLs `electra
score` saved), and `pll:DIRNAME` from each further --model.

Every PLL a model computes is saved in --output-dir as it comes (so `--resume` continues a stopped run) and then
kept whole there, ready for `--scores`. The scorer's module brings torch, so it is imported only where a model
scores.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from electra.core.errors import UserError
from electra.pll.common_cli import load_scorer_from_args
from electra.pll.rescore import attach_plls, unscored_texts
from electra.pll.resumable import keep_plls, score_texts_saving

if TYPE_CHECKING:
    from electra.pll.nbest import Utterance
    from electra.pll.score_files import SavedScores
    from electra.pll.scoring import Scorer


def attach_first_pll(
    args: argparse.Namespace,
    dev: list[Utterance],
    tests: Sequence[tuple[str, list[Utterance], str]],
    lists: Sequence[list[Utterance]],
    saved: Path | None,
) -> tuple[str, str | None]:
    """PLLs of the first model (or --scores) on every hypothesis of `lists`: feature `pll`. Those the model
    scores are saved in `saved` as they come, and then every PLL of the feature is kept there.

    Returns the method's name and the scorer's identity (None when the saved scores do not record one)."""
    from electra.pll.score_files import saved_scores

    known = saved_scores(args.scores)
    texts = set(unscored_texts(lists))
    unscored = unscored_texts(lists, known)
    identity = None
    if args.model:
        from electra.pll.scoring import scorer_identity

        identity = scorer_identity(args.model[0], args.method, args.within_word)
        if args.scores:
            _refuse_other_scorer(args, known, identity, len(unscored))
    method = "saved scores"
    fresh: dict[str, tuple[float, int, int]] = {}
    if unscored and args.model:
        scorer = load_scorer_from_args(args, args.model[0], identity)
        method = scorer.method if not known else f"{scorer.method} + saved scores"
        _warn_long(scorer, [(args.dev, dev), *((p, u) for p, u, _ in tests)])
        fresh = score_texts_saving(scorer, unscored, saved, args.resume)
    attach_plls(lists, known, {text: score[:2] for text, score in fresh.items()}, scorer=identity)
    scored = len(fresh)
    if fresh and saved is not None:
        used = {text: known[text] for text in texts & known.keys()}
        keep_plls(saved, used | {text: (pll, pieces) for text, (pll, pieces, _) in fresh.items()}, identity)
        print(f"PLLs kept in {saved}: pass it to --scores to fuse again without the model", file=sys.stderr)
    if args.scores:
        reused = len(texts & known.keys())
        print(
            f"{reused} distinct hypotheses' PLLs reused from --scores; {scored} scored now", file=sys.stderr
        )
    return method, identity if scored else known.scorer


def _refuse_other_scorer(args: argparse.Namespace, known: SavedScores, identity: str, unscored: int) -> None:
    """--model beside --scores: every PLL of feature `pll` must come from one model and method, since the weight
    tuned on dev (scored by one) is applied to test (scored by the other), and the report names one model.

    Saved scores that record another scorer are refused. Saved scores without a record (written before `score`
    recorded one) cannot be checked: they are refused where --model would score the hypotheses they lack, and used
    alone, with a warning, where they cover every hypothesis (then --model scores nothing)."""
    files = " ".join(str(p) for p in known.paths)
    model = f"--model {args.model[0]}" + (f" --method {args.method}" if args.method != "auto" else "")
    if known.scorer is not None and known.scorer != identity:
        raise UserError(
            f"--scores {files} were scored by {known.scorer}, but {model} scores as {identity}; PLLs of two "
            "models cannot share one weight: drop --model to use the saved scores alone, or score the lists "
            "again with this --model."
        )
    if known.scorer is None and unscored:
        raise UserError(
            f"--scores {files} do not say which model scored them (written before `electra score` recorded "
            f"'pll_scorer'), so they cannot be mixed with {model}, which would score the {unscored} hypotheses "
            f"they lack; score the lists again with `electra score {model}`."
        )
    if known.scorer is None:
        print(
            f"warning: every hypothesis has a PLL in --scores {files}, which do not say which model scored them "
            f"(written before `electra score` recorded 'pll_scorer'); {model} is not used for feature 'pll'",
            file=sys.stderr,
        )


def attach_extra_pll(
    args: argparse.Namespace, model: str, lists: Sequence[list[Utterance]], name: str, saved: Path
) -> None:
    """A further model's PLLs, stored on each hypothesis as feature `name` (and written back with the lists),
    saved in `saved` as they come and kept whole there."""
    scorer = load_scorer_from_args(args, model)
    scores = score_texts_saving(scorer, unscored_texts(lists), saved, args.resume)
    keep_plls(saved, {text: (pll, pieces) for text, (pll, pieces, _) in scores.items()}, scorer.identity)
    for utts in lists:
        for utt in utts:
            for hyp in utt.hyps:
                hyp.extra[name] = scores[hyp.text][0]


def _warn_long(scorer: Scorer, named_lists: Sequence[tuple[str, Sequence[Utterance]]]) -> None:
    """Say, per list, how many hypotheses exceed the model's length: their PLL covers only their start."""
    for path, utts in named_lists:
        texts = [h.text for u in utts for h in u.hyps]
        long = sum(scorer.too_long(texts))
        if long:
            print(
                f"warning: {path}: {long} of {len(texts)} hypotheses have more pieces than the model takes "
                f"({scorer.max_length}); their PLL covers the first {scorer.max_length - 2} only",
                file=sys.stderr,
            )
