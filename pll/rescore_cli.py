"""`electra rescore`: re-rank n-best lists by a weighted fusion of features, with the weights found on dev.

The features are the lists' own scores (--features), PLLs (--model, --scores) and a length term (--length). The
weights come from a search that adapts to each feature's scale, or, with --lambdas, from the classic score + λ·PLL
grid. The re-ranked lists and report.json go to --output-dir, and a table of the first pass's, each feature's, the
fusion's and the oracle's WER to standard output. Every input is checked before any scoring, which can take hours.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from electra.core.errors import UserError
from electra.core.flags import add_output_option, require_counts
from electra.core.overwrite import refuse_to_replace
from electra.pll.common_cli import add_overwrite_and_resume, add_scoring_options, check_device
from electra.pll.rescore_inputs import (
    CLASSIC_ONLY,
    check_features,
    parse_features,
    parse_lambdas,
    pll_files,
    rescored_names,
)
from electra.pll.rescore_plls_cli import attach_extra_pll, attach_first_pll
from electra.pll.resumable import check_unfinished

if TYPE_CHECKING:
    from electra.pll.report import Split


def register(subparsers: argparse._SubParsersAction) -> None:
    rescore = subparsers.add_parser(
        "rescore",
        help="re-rank n-best lists by a fusion of first-pass scores and PLLs tuned on dev",
        description="Fuse the list's scores (--features), PLLs (--model, --scores) and a length term (--length) "
        "with weights found on dev by a search that adapts to each feature's scale; report dev and test WER "
        "of the first pass, each feature alone, the fusion and the oracle; write the re-ranked lists.",
    )
    _add_feature_options(rescore)
    rescore.add_argument(
        "--dev",
        required=True,
        help="n-best list: JSON (mlm-scoring dict or list of {id, ref, hyps}) or a layout of --format",
    )
    rescore.add_argument(
        "--test", nargs="*", action="extend", default=[], help="n-best list(s) to rescore with dev's weights"
    )
    _add_layout_options(rescore)
    add_output_option(
        rescore,
        "output_dir",
        "directory for the rescored lists (NAME.rescored.json; dev./test. in front when two inputs share a "
        "name) and report.json (default: rescored/ in the current directory)",
        default="rescored",
    )
    _add_weighting_options(rescore)
    add_scoring_options(rescore)
    add_overwrite_and_resume(
        rescore, "continue the PLLs an interrupted run saved in --output-dir (pll.jsonl.unfinished)"
    )
    rescore.set_defaults(func=run_rescore)


def _add_feature_options(rescore: argparse.ArgumentParser) -> None:
    """--model, --features, --length and --scores: what is fused."""
    rescore.add_argument(
        "--model",
        nargs="+",
        action="extend",
        default=[],
        metavar="DIR",
        help="scoring model(s): the first gives feature 'pll' (and scores what --scores misses), "
        "each further one a feature 'pll:DIRNAME'",
    )
    rescore.add_argument(
        "--features",
        default="score",
        help="comma-separated numeric fields of the hypotheses to fuse, the first one the anchor (weight 1); "
        "default: the list's 'score'; e.g. am_score,lm_score",
    )
    rescore.add_argument(
        "--length",
        default="none",
        choices=("none", "words", "pieces"),
        help="add a length term (word or piece count) to the fusion: a searched insertion bonus or penalty",
    )
    rescore.add_argument(
        "--scores",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help="reuse PLLs `electra score` saved (a scored n-best JSON or its --output JSON lines) instead of "
        "scoring again: trying other λ or --ln then takes seconds; with --model, they must come from that model "
        "and --method (each saved PLL records its scorer)",
    )


def _add_layout_options(rescore: argparse.ArgumentParser) -> None:
    """--format, --dev-ref and --test-ref: the recognizer's layout of the lists and its reference files."""
    from electra.pll.nbest_formats import FORMATS

    rescore.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="layout of --dev and --test (default: recognised from the files): "
        + "; ".join(f"{name}: {spec.description}" for name, spec in FORMATS.items()),
    )
    rescore.add_argument(
        "--dev-ref",
        metavar="FILE",
        help="references of --dev: a Kaldi/ESPnet text file (UTT words) or, for NeMo, the decoded manifest",
    )
    rescore.add_argument(
        "--test-ref",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help="references of each --test list, in the same order",
    )


def _add_weighting_options(rescore: argparse.ArgumentParser) -> None:
    """--lambdas, --ln and --ln-type: how the PLL is weighted."""
    rescore.add_argument(
        "--lambdas",
        help="the classic recipe instead of the search: score + λ·PLL with λ from this comma-separated list",
    )
    rescore.add_argument(
        "--ln",
        type=float,
        default=0.0,
        metavar="ALPHA",
        help="length-normalise the PLL before weighting it: PLL / ((5 + pieces) / 6)^ALPHA (0 = off)",
    )
    rescore.add_argument(
        "--ln-type",
        default="gnmt",
        choices=("gnmt", "length"),
        help="gnmt: ((5 + n) / 6)^ALPHA; length: n^ALPHA (n = scored word pieces)",
    )


def run_rescore(args: argparse.Namespace) -> int:
    from electra.pll.fusion import LengthNorm, search_weights
    from electra.pll.nbest_formats import layout_files, read_lists
    from electra.pll.report import write_rescored
    from electra.pll.rescore import check_test_refs, require_refs

    lambdas, features = _check_flags(args)
    out_dir = Path(args.output_dir)
    targets = [out_dir / name for name in rescored_names(args.dev, args.test)]
    besides = layout_files([args.dev, *args.test], args.format, targets)
    saved_plls = pll_files(out_dir, args.model, features)
    refuse_to_replace([out_dir / "report.json", *targets, *besides, *saved_plls.values()], args.overwrite)
    for saved in saved_plls.values():  # before any list is read or model loaded, as `score --output` does
        check_unfinished(saved, args.resume, args.overwrite)
    dev, dev_fmt = read_lists(args.dev, args.format, args.dev_ref)
    require_refs(dev, args.dev)
    test_refs = args.test_ref or [None] * len(args.test)
    tests = [(path, *read_lists(path, args.format, ref)) for path, ref in zip(args.test, test_refs)]
    for path, utts, _ in tests:
        check_test_refs(utts, path)
    adds_pll = bool(args.model or args.scores)
    check_features(features, [(args.dev, dev), *((p, u) for p, u, _ in tests)], adds_pll, args.length)
    classic = features == ["score"] and adds_pll and len(args.model) <= 1
    if lambdas is not None and not (classic and args.length == "none"):
        raise UserError(CLASSIC_ONLY)  # said before the scoring, not after it
    lists = [dev] + [utts for _, utts, _ in tests]
    method = scorer = None
    if adds_pll:
        method, scorer = attach_first_pll(args, dev, tests, lists, saved_plls.get("pll"))
        features.append("pll")
    for extra, (name, saved) in zip(args.model[1:], list(saved_plls.items())[1:]):
        attach_extra_pll(args, extra, lists, name, saved)
        features.append(name)
    if args.length != "none":
        features.append(args.length)
    ln = LengthNorm(args.ln, args.ln_type)
    weights, search = search_weights(dev, features, lambdas, ln)
    out_dir.mkdir(parents=True, exist_ok=True)
    splits: list[Split] = [("dev", args.dev, dev, dev_fmt, targets[0])]
    splits += [("test", p, u, f, t) for (p, u, f), t in zip(tests, targets[1:])]
    summary = {
        "models": [str(m) for m in args.model],
        "scores": [str(p) for p in args.scores],
        "method": method,
        "scorer": scorer,
        "features": features,
        "weights": weights,
        "ln": {"alpha": args.ln, "type": args.ln_type},
        "search": search,
        "splits": [],
    }
    if "pll" in weights:
        summary["lambda"] = weights["pll"]  # the classic name of the PLL weight
    print(f"scoring method: {method}" if method else "no scoring model: fusing the lists' own fields")
    print("weights (in the features' units): " + ", ".join(f"{k} {v:.4g}" for k, v in weights.items()))
    write_rescored(out_dir, splits, summary, ln)
    return 0


def _check_flags(args: argparse.Namespace) -> tuple[tuple[float, ...] | None, list[str]]:
    """The flags that need no file read: --batch-size, --ln, --lambdas (parsed), --device when a model scores,
    --features (parsed). Returns the λ grid (None without --lambdas) and the feature names."""
    require_counts(args, ("batch_size",))
    if not math.isfinite(args.ln) or args.ln < 0:
        raise UserError(
            f"--ln {args.ln}: the length-normalisation exponent must be a finite number, 0 or more."
        )
    lambdas = parse_lambdas(args.lambdas) if args.lambdas is not None else None
    if args.test_ref and len(args.test_ref) != len(args.test):
        raise UserError(
            f"--test-ref: {len(args.test_ref)} reference files for {len(args.test)} --test lists; give one per "
            "list, in the same order."
        )
    if args.model:
        check_device(args.device)
    features = parse_features(args.features)
    if len(features) + bool(args.model or args.scores) + (args.length != "none") < 2:
        raise UserError("nothing to fuse: give --model/--scores, more --features, or --length.")
    return lambdas, features
