"""`electra ngram`: train a word n-gram LM (interpolated Kneser-Ney) on a corpus and write n-best lists whose every
hypothesis carries its log-probability in one field, a feature for `electra rescore --features`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from electra.core.errors import UserError
from electra.core.flags import add_output_option
from electra.core.overwrite import refuse_to_replace
from electra.pll.rescore_inputs import COMPUTED_FEATURES

if TYPE_CHECKING:
    from electra.pll.ngram import KneserNeyLM


def register(subparsers: argparse._SubParsersAction) -> None:
    ngram = subparsers.add_parser(
        "ngram",
        help="train a word n-gram LM on a corpus and add its log-probability to n-best lists",
        description="Interpolated Kneser-Ney (pure Python) on the corpus's normalised sentences; every hypothesis "
        "of each list gets a field (default 'ngram') with ln P(<s> text </s>), for `rescore --features`.",
    )
    ngram.add_argument("--corpus", required=True, help="text file, directory or archive (as pretrain reads)")
    ngram.add_argument(
        "--nbest",
        nargs="+",
        action="extend",
        required=True,
        metavar="FILE",
        help="n-best JSON lists to annotate",
    )
    ngram.add_argument("--order", type=int, default=4, help="n-gram order (default 4)")
    ngram.add_argument("--field", default="ngram", help="name of the field written on every hypothesis")
    add_output_option(ngram, "output_dir", "directory for the lists", required=True)
    ngram.add_argument(
        "--overwrite", action="store_true", help="replace lists an earlier run left in the output"
    )
    ngram.set_defaults(func=run_ngram)


def run_ngram(args: argparse.Namespace) -> int:
    from electra.pll.nbest import read_nbest, write_nbest
    from electra.pll.ngram import normalize_words

    if args.order < 1:
        raise UserError(f"--order {args.order}: give 1 or more.")
    _check_field(args.field)
    if not Path(args.corpus).exists():
        raise UserError(f"{args.corpus}: corpus does not exist.")
    out_dir = Path(args.output_dir)
    targets = _targets(args.nbest, out_dir)
    refuse_to_replace(targets, args.overwrite)
    lists = [(path, *read_nbest(path)) for path in args.nbest]
    lm = _fit(args.corpus, args.order)
    out_dir.mkdir(parents=True, exist_ok=True)
    for (path, utts, fmt), target in zip(lists, targets):
        for utt in utts:
            for hyp in utt.hyps:
                hyp.extra[args.field] = lm.logprob(normalize_words(hyp.text))
        write_nbest(target, utts, fmt, None)
        refs = [normalize_words(u.ref) for u in utts if u.ref]
        note = f"; perplexity of its references {lm.perplexity(refs):.1f}" if refs else ""
        print(f"{path} -> {target}{note}")
    return 0


def _check_field(field: str) -> None:
    """--field must name no field the lists or `rescore` already give a meaning: `--field score` would replace
    every recognizer score with the n-gram's, and `--field text` every hypothesis's words with a number."""
    from electra.pll.nbest import OWN_HYP_FIELDS

    reserved = dict.fromkeys([*OWN_HYP_FIELDS, *COMPUTED_FEATURES])
    if not field.strip() or field in reserved or field.startswith("pll:"):
        raise UserError(
            f"--field {field!r}: that name is taken ({', '.join(reserved)} and pll:NAME are the hypotheses' "
            "own or computed features); choose another, e.g. --field ngram."
        )


def _targets(inputs: Sequence[str], out_dir: Path) -> list[Path]:
    """Where each list is written: under its own file name in `out_dir`. Two lists of one name (a/dev.json,
    b/dev.json) would share one path, and a target that is its own input would be overwritten; both are refused."""
    targets = [out_dir / Path(p).name for p in inputs]
    clash = next((t for t in targets if targets.count(t) > 1), None)
    if clash is not None:
        clashing = [p for p, t in zip(inputs, targets) if t == clash]
        raise UserError(
            f"--nbest {' and '.join(clashing)} would both be written as {clash}; give each list once, and rename "
            "one of two lists that share a file name (or annotate them in separate runs)."
        )
    if any(t.resolve() == Path(p).resolve() for t, p in zip(targets, inputs)):
        raise UserError(f"--output {out_dir}: would overwrite the input lists; choose another directory.")
    return targets


def _fit(corpus: str, order: int) -> KneserNeyLM:
    """The n-gram LM of the corpus's sentences, its size and training time said on standard error. A corpus with
    no words to count (empty, or digits and punctuation only) is refused in one line."""
    import time

    from electra.data.corpus import read_documents
    from electra.pll.ngram import KneserNeyLM, corpus_sentences

    started = time.perf_counter()
    lm = KneserNeyLM(order)
    try:
        lm.fit(corpus_sentences(read_documents(corpus)))
    except ValueError:
        if lm.sentences:
            raise
        raise UserError(
            f"{corpus}: holds no words to count (the n-gram reads words of letters, lowercased, as the "
            "lists' references are); give a corpus of running text."
        ) from None
    print(
        f"{order}-gram LM: {lm.sentences:,} sentences, {len(lm.vocab):,} words, "
        f"{len(lm.counts[order]):,} {order}-grams in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return lm
