"""`electra tag-bilstm` and `electra parse-bilstm`: train Cross-View Training's CNN-BiLSTM models (Clark's dissertation,
chapter 4) on CoNLL-style column files, supervised or with `--cvt --unlabeled CORPUS`: the tagger, scored by span
F1 (or token accuracy), and the dependency parser, scored by UAS/LAS. One loop trains both
(`electra.tagging.cvt_train`); the commands differ in their data and their task."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from electra.core.errors import UserError
from electra.core.flags import DefaultsHelpFormatter, add_output_option, add_setting_flags, flag_values
from electra.core.overwrite import refuse_to_replace
from electra.tagging.cvt_settings import CvtSettings, CvtTrainingSettings, ParseCvtSettings

TAG_DESCRIPTION = """Train Cross-View Training's CNN-BiLSTM tagger from scratch on CoNLL-style column files
(chunking, NER, part of speech). Without --cvt it learns from the labeled sentences only; with --cvt --unlabeled
CORPUS, labeled and unlabeled minibatches alternate and, on unlabeled ones, auxiliary modules that see restricted
views of the sentence (fwd, bwd, future, past, full) learn to match the primary module's predictions. Without --dev,
the first --dev-sentences of a seed-0 shuffle of --train are the dev set. Reports test scores at the best dev
evaluation of a weight average, as the median over seeds. Defaults are the paper's model and recipe; see
docs/tagging.md for the small CPU settings."""

PARSE_DESCRIPTION = """Train Cross-View Training's graph-based dependency parser (a bilinear classifier over every
candidate head and relation of each word, on the CNN-BiLSTM encoder) from scratch on a treebank: a CoNLL-U file
(*.conllu), or a column file whose --columns name a `head` column (1-based, 0 = root) and optionally `rel`. With
--cvt --unlabeled CORPUS, four auxiliary modules that see the head and the dependent through one direction of the
first layer each (fwd-fwd, fwd-bwd, bwd-fwd, bwd-bwd), and a full-view one, learn the primary module's
distribution on unlabeled sentences. Reports UAS and LAS without punctuation at the best dev evaluation, as the
median over seeds; see docs/parsing.md."""


# The commands' names before they were named for their model (Cross-View Training is their --cvt flag, as it is
# `electra tag`'s); kept as aliases for one release.
OLD_NAMES = {"tag-bilstm": "tag-cvt", "parse-bilstm": "parse-cvt"}


def register(subparsers) -> None:
    tag = _command(
        subparsers,
        "tag-bilstm",
        "train a CNN-BiLSTM tagger, supervised or with Cross-View Training on unlabeled text",
        TAG_DESCRIPTION,
        CvtSettings,
    )
    tag.add_argument("--label", default=None, help="the column to predict (None: the last)")
    tag.set_defaults(func=run_tagger)
    parse = _command(
        subparsers,
        "parse-bilstm",
        "train a dependency parser, supervised or with Cross-View Training on unlabeled text",
        PARSE_DESCRIPTION,
        ParseCvtSettings,
    )
    parse.set_defaults(func=run_parser)
    vectors = subparsers.add_parser(
        "word-vectors",
        help="train word vectors on unlabeled text for `tag-bilstm --word-vectors` (needs gensim)",
        description=VECTORS_DESCRIPTION,
        formatter_class=DefaultsHelpFormatter,
    )
    vectors.add_argument(
        "--corpus", required=True, help="unlabeled text: a text file, folder, JSONL or archive"
    )
    vectors.add_argument("--output", required=True, help="the vectors file to write (word2vec text format)")
    vectors.add_argument("--dim", type=_positive, default=100, help="vector size (pass the same --word-dim)")
    vectors.add_argument("--window", type=_positive, default=5, help="words either side that predict a word")
    vectors.add_argument("--min-count", type=_positive, default=2, help="words rarer than this get no vector")
    vectors.add_argument("--epochs", type=_positive, default=5, help="passes over the corpus")
    vectors.add_argument("--seed", type=int, default=1, help="seed of the initial vectors and sampling")
    vectors.add_argument("--workers", type=_positive, default=1, help="gensim's threads (1: reproducible)")
    vectors.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    vectors.set_defaults(func=run_word_vectors)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number of at least 1")
    return value


VECTORS_DESCRIPTION = """Train skip-gram word2vec vectors (gensim; `pip install gensim`) on an unlabeled corpus,
its sentences split into words as `tag-bilstm --unlabeled` splits them and the words lowercased with digits as 0,
as the tagger looks them up; writes them in word2vec text format for `tag-bilstm --word-vectors FILE`."""


def run_word_vectors(args: argparse.Namespace) -> int:
    from electra.tagging.unlabeled import unlabeled_sentences
    from electra.tagging.word_vectors import train_word_vectors

    refuse_to_replace([args.output], args.overwrite)
    count = train_word_vectors(
        lambda: unlabeled_sentences(args.corpus),
        args.output,
        dim=args.dim,
        window=args.window,
        min_count=args.min_count,
        epochs=args.epochs,
        seed=args.seed,
        workers=args.workers,
    )
    print(f"{count} word vectors of size {args.dim} written to {args.output}")
    return 0


def _command(
    subparsers, name: str, summary: str, description: str, settings: type
) -> argparse.ArgumentParser:
    """The flags both commands share: files, the unlabeled corpus, `settings`' declared flags, output, resume."""
    parser = subparsers.add_parser(
        name,
        aliases=[OLD_NAMES[name]],
        help=f"{summary} (old name: {OLD_NAMES[name]})",
        description=description,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--train", required=True, help="training file (its labels are the label set)")
    parser.add_argument("--dev", default=None, help="dev file (None: hold out --dev-sentences of --train)")
    parser.add_argument("--test", default=None, help="test file, scored at the best dev evaluation")
    parser.add_argument(
        "--columns", default=None, help="comma names of the columns, e.g. word,pos,chunk or word,pos,head"
    )
    parser.add_argument(
        "--unlabeled",
        default=None,
        help="unlabeled text for --cvt: a text file, folder, JSONL or archive (POS tags such as Brown's stripped)",
    )
    add_setting_flags(parser, settings, declared_defaults=True)
    add_output_option(
        parser, "output", "write each seed's model, predictions and summary.json here", default=None
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the results an earlier run left here"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the seeds finished in --output and continue a cut-short one from its --save-every checkpoint "
        "(a larger --max-steps trains on)",
    )
    return parser


def run_tagger(args: argparse.Namespace) -> int:
    from electra.tagging.cvt_data import load_data

    settings = CvtSettings(**flag_values(CvtSettings, args))
    return _train(
        settings,
        args,
        lambda: load_data(
            settings, args.train, args.test, args.dev, args.unlabeled, args.columns, args.label
        ),
    )


def run_parser(args: argparse.Namespace) -> int:
    from electra.tagging.parse_task import load_treebank_data

    settings = ParseCvtSettings(**flag_values(ParseCvtSettings, args))
    return _train(
        settings,
        args,
        lambda: load_treebank_data(settings, args.train, args.test, args.dev, args.unlabeled, args.columns),
    )


def _train(settings: CvtTrainingSettings, args: argparse.Namespace, load) -> int:
    """Check the flags that go together, refuse to replace earlier results, read the data, train every seed and
    print each score's median (min, max)."""
    from electra.tagging.cvt_seeds import log_to_stderr, train_seeds

    if settings.cvt and args.unlabeled is None:
        raise UserError("--cvt learns from unlabeled text: pass --unlabeled CORPUS (a text file or folder).")
    if args.unlabeled is not None and not settings.cvt:
        raise UserError(
            "--unlabeled is read only with --cvt; add --cvt, or drop --unlabeled for a supervised run."
        )
    output = Path(args.output) if args.output else None
    if args.resume and (output is None or args.overwrite):
        raise UserError("--resume continues the runs in --output: give --output DIR, without --overwrite.")
    if output is not None and not args.resume:
        seeds = range(settings.seed, settings.seed + settings.seeds)
        refuse_to_replace(
            [output / "summary.json", *(output / f"seed-{s}" for s in seeds)],
            args.overwrite,
            resume_hint=True,
        )
    data = load()
    summary = train_seeds(settings, data, output, log_to_stderr, args.resume)
    lines = [f"{'CVT' if settings.cvt else 'supervised'}: {summary['labeled_sentences']} labeled sentences"]
    shown = {"las": ("uas", "las")}.get(data.task.metric, (data.task.metric,))
    for split in ("dev", "test"):
        for score in shown:
            s = summary.get(f"{split}_{score}")
            if s is not None:
                lines.append(
                    f"{split} {score}: median {100 * s['median']:.2f} (min {100 * s['min']:.2f}, "
                    f"max {100 * s['max']:.2f})"
                )
    print("\n".join(lines))
    if output is None:
        print(json.dumps({k: v for k, v in summary.items() if k != "runs"}), file=sys.stderr)
    return 0
