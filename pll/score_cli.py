"""`electra score`: the pseudo-log-likelihood of each sentence of a file, or of each hypothesis of an n-best list.

Sentences go to standard output, one line each (with their tokens' or words' scores when asked); --output keeps
them as JSON lines, saved as they are scored so that `--resume` continues a stopped run. An n-best JSON input is
written back whole with every hypothesis's 'pll' and 'pieces'. The corpus pseudo-perplexity goes to standard
error.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from electra.core.errors import UserError
from electra.core.files import decode_user_text, require_file, write_text_atomically
from electra.core.flags import require_counts
from electra.core.overwrite import check_output_file
from electra.pll.common_cli import (
    add_overwrite_and_resume,
    add_scoring_options,
    check_device,
    load_scorer_from_args,
)
from electra.pll.resumable import (
    check_unfinished,
    score_sentences_saving,
    score_texts_saving,
    sentence_record,
    unfinished_path,
)

if TYPE_CHECKING:
    from electra.pll.nbest import Utterance


def register(subparsers: argparse._SubParsersAction) -> None:
    score = subparsers.add_parser(
        "score",
        help="print the pseudo-log-likelihood of each sentence in a file",
        description="Score sentences (one per line) with Electric (one pass), ELECTRA-TT, or masked-LM PLL. "
        "An n-best JSON input has every hypothesis scored and is written back with 'pll' and 'pieces' added "
        "(as mlm-scoring's `mlm score --mode hyp`); the corpus pseudo-perplexity goes to standard error.",
    )
    score.add_argument(
        "--model", required=True, help="run output dir, its discriminator/, or a masked-LM checkpoint"
    )
    score.add_argument(
        "--input",
        required=True,
        help="text file (one sentence per line) or n-best JSON; '-' reads standard input",
    )
    score.add_argument("--tokens", action="store_true", help="also print each token's score")
    score.add_argument(
        "--words", action="store_true", help="also print each word's score (sum over its pieces)"
    )
    score.add_argument(
        "--output",
        help="a file to write JSON lines {text, pll, pieces, tokens, words, pll_scorer} to as well; for an n-best "
        "input, the scored list (default: standard output)",
    )
    from electra.pll.nbest_formats import FORMATS

    score.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="layout of an n-best --input, as `electra rescore --format` takes (default: recognised from the "
        "files); a list in a recognizer's layout is written back as n-best JSON that keeps its fields",
    )
    add_scoring_options(score)
    add_overwrite_and_resume(
        score,
        "continue an interrupted run from the scores it saved in OUTPUT.unfinished (same input and model)",
    )
    score.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> int:
    from electra.pll.nbest import looks_like_nbest, read_nbest
    from electra.pll.nbest_formats import layout_of_input, read_lists

    require_counts(args, ("batch_size",))
    check_device(args.device)
    if args.resume and not args.output:
        raise UserError(
            "--resume continues the scores an interrupted run saved in --output; pass --output FILE."
        )
    if args.output:
        check_output_file(args.output, args.overwrite, reads={"--input": args.input})
    layout = layout_of_input(args.input, args.format)
    if layout not in (None, "json"):  # a recognizer's layout, read whole by its reader
        return _score_nbest(args, *read_lists(args.input, layout))
    name, text = _read_input(args.input)
    # A .json file is an n-best list: if it does not parse, say so rather than score its JSON syntax as sentences.
    if looks_like_nbest(text) or name.lower().endswith(".json") or layout == "json":
        return _score_nbest(args, *read_nbest(name, text))
    lines, numbered = _numbered_sentences(name, text)
    if args.output:
        check_unfinished(args.output, args.resume, args.overwrite)
    scorer = load_scorer_from_args(args)
    failed = None
    if args.output:  # first: a reader of standard output that stops early (`| head`) must not cost it
        records, failed = score_sentences_saving(scorer, numbered, args.output, args.resume)
    else:
        results = scorer.score([s for _, s in numbered])
        records = [
            sentence_record(number, res, scorer.identity) for (number, _), res in zip(numbered, results)
        ]
    skipped = len(lines) - len(numbered)  # blank lines after the last sentence count too
    if skipped:
        where = "; --output records give each one's input 'line'" if args.output else ""
        print(
            f"{name}: {skipped} blank line(s) skipped: the scores follow the other lines in order{where}",
            file=sys.stderr,
        )
    _print_records(args, records, scorer.max_length)
    _print_corpus_summary([(r["pll"], r["pieces"], len(r["words"])) for r in records])
    if failed is not None:
        raise UserError(failed)
    return 0


def _read_input(raw: str) -> tuple[str, str]:
    """(name for messages, text) of a file or, for '-', standard input."""
    if raw == "-":
        data = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        path = require_file(raw, "input file", "'-' reads standard input")
        data, name = path.read_bytes(), str(path)
    return name, decode_user_text(data, name, "one sentence per line or an n-best JSON")


def _numbered_sentences(name: str, text: str) -> tuple[list[str], list[tuple[int, str]]]:
    """The input's lines, and its sentences with their line numbers (blank lines skipped).

    Lines are numbered as `sed -n Np` and editors number them: split at "\\n" alone, since str.splitlines also
    breaks at U+2028, form feeds and other separators, which would shift every later number. A carriage return
    inside a line (old Mac line breaks) would make the whole file one sentence, so it is refused; those at a
    line's ends are Windows line breaks (CRLF, and CRCRLF from converting one twice), stripped with the spaces."""
    lines = text.split("\n")
    if lines[-1] == "":  # the last line's own newline starts no line
        lines.pop()
    inner = next((n for n, line in enumerate(lines, start=1) if "\r" in line.strip()), None)
    if inner is not None:
        raise UserError(
            f"{name}:{inner}: a carriage return inside the line (old Mac line breaks?); each sentence must end "
            "with a line feed: convert the file, e.g. tr '\\r' '\\n' < IN > OUT."
        )
    numbered = [(n, s) for n, s in enumerate((line.strip() for line in lines), start=1) if s]
    if not numbered:
        raise UserError(f"{name}: no sentences (the input is empty).")
    return lines, numbered


def _print_records(args: argparse.Namespace, records: Sequence[dict[str, Any]], max_length: int) -> None:
    """One line per sentence on standard output: its PLL and text, then its tokens' and words' scores when
    --tokens and --words ask for them, and a note where the model's length cut it short."""
    for record in records:
        line = f"{record['pll']:.4f}\t{record['text']}"
        if args.tokens:
            line += "\t" + " ".join(f"{tok}={val:.3f}" for tok, val in record["tokens"])
        if args.words:
            line += "\t" + " ".join(f"{word}={val:.3f}" for word, val in record["words"])
        if record["truncated"]:
            line += f"\t[truncated: only the first {max_length - 2} pieces scored]"
        print(line)


def _score_nbest(args: argparse.Namespace, utts: list[Utterance], fmt: str) -> int:
    """Every hypothesis of an n-best list scored once per distinct text, written back in the list's format (a
    recognizer's layout as n-best JSON, its fields kept): to --output, else to standard output. A list the disk
    cannot take still reaches standard output."""
    from electra.pll.nbest import write_nbest
    from electra.pll.nbest_formats import json_format
    from electra.pll.rescore import attach_plls, unscored_texts

    fmt = json_format(fmt)
    if args.output:
        check_unfinished(args.output, args.resume, args.overwrite)
    scorer = load_scorer_from_args(args)
    by_text = score_texts_saving(scorer, unscored_texts([utts]), args.output, args.resume)
    attach_plls([utts], scored={text: score[:2] for text, score in by_text.items()}, scorer=scorer.identity)
    written = write_nbest(None, utts, fmt, lam=None)
    summary = [by_text[h.text] for u in utts for h in u.hyps]
    if not args.output:
        sys.stdout.write(written)
        _print_corpus_summary(summary)
        return 0
    try:
        write_text_atomically(args.output, written)
    except OSError as exc:  # a disk filled up while scoring: the scored list still reaches standard output
        sys.stdout.write(written)
        raise UserError(
            f"--output {args.output}: could not be written ({exc.strerror or exc}); the scored list is on "
            "standard output above; free some space or choose another --output."
        ) from None
    unfinished_path(args.output).unlink(missing_ok=True)  # its scores are in the list now
    count = sum(len(u.hyps) for u in utts)
    print(f"{len(utts)} utterances, {count} hypotheses scored -> {args.output}", file=sys.stderr)
    _print_corpus_summary(summary)
    return 0


def _print_corpus_summary(rows: Sequence[tuple[float, int, int]]) -> None:
    """Corpus pseudo-perplexity (Salazar et al. 2020), exp(-sum PLL / N), per piece and per word, on standard
    error. Per word is the one to compare across models, since their tokenisers cut the same text differently."""
    total = sum(r[0] for r in rows)
    pieces, words = sum(r[1] for r in rows), sum(r[2] for r in rows)
    if not pieces:
        return
    print(
        f"{len(rows)} sentences, {pieces} pieces, {words} words: total PLL {total:.2f}; pseudo-perplexity "
        f"{math.exp(min(-total / pieces, 700.0)):.2f} per piece, {math.exp(min(-total / max(words, 1), 700.0)):.2f} "
        "per word",
        file=sys.stderr,
    )
