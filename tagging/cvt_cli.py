"""`electra tag-cvt`: train the CNN-BiLSTM tagger of Cross-View Training (Clark's dissertation, chapter 4) on
CoNLL-style column files, supervised or with `--cvt --unlabeled CORPUS`, and report span F1 (or token accuracy)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from electra.core.errors import UserError
from electra.core.flags import DefaultsHelpFormatter, add_output_option, add_setting_flags, flag_values
from electra.core.overwrite import refuse_to_replace
from electra.tagging.cvt_settings import CvtSettings

DESCRIPTION = """Train Cross-View Training's CNN-BiLSTM tagger from scratch on CoNLL-style column files (chunking,
NER, part of speech). Without --cvt it learns from the labeled sentences only; with --cvt --unlabeled CORPUS,
labeled and unlabeled minibatches alternate and, on unlabeled ones, auxiliary modules that see restricted views of
the sentence (fwd, bwd, future, past, full) learn to match the primary module's predictions. Without --dev, the
first --dev-sentences of a seed-0 shuffle of --train are the dev set. Reports test scores at the best dev
evaluation of a weight average, as the median over seeds. Defaults are the paper's model and recipe; see
docs/tagging.md for the small CPU settings."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tag-cvt",
        help="train a CNN-BiLSTM tagger, supervised or with Cross-View Training on unlabeled text",
        description=DESCRIPTION,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--train", required=True, help="training column file (its labels are the label set)")
    parser.add_argument(
        "--dev", default=None, help="dev column file (None: hold out --dev-sentences of --train)"
    )
    parser.add_argument("--test", default=None, help="test column file, scored at the best dev evaluation")
    parser.add_argument("--columns", default=None, help="comma names of the columns, e.g. word,pos,chunk")
    parser.add_argument("--label", default=None, help="the column to predict (None: the last)")
    parser.add_argument(
        "--unlabeled",
        default=None,
        help="unlabeled text for --cvt: a text file, folder, JSONL or archive (POS tags such as Brown's stripped)",
    )
    add_setting_flags(parser, CvtSettings, declared_defaults=True)
    add_output_option(
        parser, "output", "write each seed's tagger, predictions and summary.json here", default=None
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the results an earlier run left here"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from electra.tagging.cvt_train import load_data, log_to_stderr, train_seeds

    settings = CvtSettings(**flag_values(CvtSettings, args))
    if settings.cvt and args.unlabeled is None:
        raise UserError("--cvt learns from unlabeled text: pass --unlabeled CORPUS (a text file or folder).")
    if args.unlabeled is not None and not settings.cvt:
        raise UserError(
            "--unlabeled is read only with --cvt; add --cvt, or drop --unlabeled for a supervised run."
        )
    output = Path(args.output) if args.output else None
    if output is not None:
        seeds = range(settings.seed, settings.seed + settings.seeds)
        refuse_to_replace([output / "summary.json", *(output / f"seed-{s}" for s in seeds)], args.overwrite)
    data = load_data(settings, args.train, args.test, args.dev, args.unlabeled, args.columns, args.label)
    summary = train_seeds(settings, data, output, log_to_stderr)
    key = "f1" if data.spans else "accuracy"
    lines = [f"{'CVT' if settings.cvt else 'supervised'}: {summary['labeled_sentences']} labeled sentences"]
    for split in ("dev", "test"):
        if f"{split}_{key}" in summary:
            s = summary[f"{split}_{key}"]
            lines.append(
                f"{split} {key}: median {100 * s['median']:.2f} (min {100 * s['min']:.2f}, max {100 * s['max']:.2f})"
            )
    print("\n".join(lines))
    if output is None:
        print(json.dumps({k: v for k, v in summary.items() if k != "runs"}), file=sys.stderr)
    return 0
