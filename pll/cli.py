"""`electra score`, `electra rescore` and `electra nbest`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from electra.errors import UserError
from electra.overwrite import refuse_to_replace
from pll.methods import METHODS, WITHIN_WORD


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
        help="write JSON lines {text, pll, pieces, tokens, words} here as well; for an n-best input, the scored "
        "list (default: standard output)",
    )
    _scoring_options(score)
    score.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    score.set_defaults(func=run_score)

    rescore = subparsers.add_parser(
        "rescore",
        help="re-rank ASR n-best lists by acoustic score + λ·PLL",
        description="Tune λ on dev (0.05..1.00), report WER of the 1-best, rescored best and oracle, write the lists.",
    )
    rescore.add_argument(
        "--model", help="scores the hypotheses --scores does not cover (needed when there is no --scores)"
    )
    rescore.add_argument(
        "--scores",
        nargs="+",
        default=[],
        metavar="FILE",
        help="reuse PLLs `electra score` saved (a scored n-best JSON or its --output JSON lines) instead of "
        "scoring again: trying other λ or --ln then takes seconds",
    )
    rescore.add_argument(
        "--dev", required=True, help="n-best JSON (mlm-scoring dict or list of {id, ref, hyps})"
    )
    rescore.add_argument("--test", nargs="*", default=[], help="n-best JSON file(s) to rescore with dev's λ")
    rescore.add_argument(
        "--output",
        "--output-dir",
        "--out",
        dest="output_dir",
        default="rescored",
        help="where rescored lists and report.json go",
    )
    rescore.add_argument("--lambdas", help="comma-separated λ values (default 0.05,0.10,...,1.00)")
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
    _scoring_options(rescore)
    rescore.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    rescore.set_defaults(func=run_rescore)

    nbest = subparsers.add_parser(
        "nbest",
        help="make n-best lists from 16 kHz wav files with pocketsphinx",
        description="Needs the optional ASR extra: pip install 'electra[asr]'.",
    )
    nbest.add_argument("--audio", required=True, help="directory of 16 kHz mono wav files")
    nbest.add_argument("--output", required=True, help="n-best JSON to write (list format)")
    nbest.add_argument("--nbest", type=int, default=20, help="distinct hypotheses per utterance")
    nbest.add_argument(
        "--refs",
        help="references: sphinx 'transcription' file or 'utt_id words' lines "
        "(default: AUDIO/transcription when present)",
    )
    nbest.set_defaults(func=run_nbest)


def _scoring_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        default="auto",
        choices=METHODS,
        help="auto: the method the run's objective declares (export.json), else what the directory holds; "
        "cloze: an Electric or ELECTRA-TT run's two-tower generator alone",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences (or masked copies) per forward")
    parser.add_argument(
        "--within-word",
        default="none",
        choices=WITHIN_WORD,
        help="masked-LM PLL: also mask the later (l2r) or all (whole) pieces of the scored word",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")


def _scorer(args: argparse.Namespace):
    from pll.scoring import load_scorer

    scorer = load_scorer(args.model, args.method, args.device, args.batch_size, args.within_word)
    print(f"scoring with --method {scorer.method}", file=sys.stderr)
    return scorer


def run_score(args: argparse.Namespace) -> int:
    from pll.nbest import looks_like_nbest

    name, text = _read_input(args.input)
    if looks_like_nbest(text):
        return _score_nbest(args, name, text)
    sentences = [s for s in (line.strip() for line in text.splitlines()) if s]
    if args.output:
        refuse_to_replace([args.output], args.overwrite)
    if not sentences:
        raise UserError(f"{name}: no sentences (the input is empty).")
    scorer = _scorer(args)
    results = scorer.score(sentences)
    for res in results:
        line = f"{res.pll:.4f}\t{res.text}"
        if args.tokens:
            line += "\t" + " ".join(f"{tok}={val:.3f}" for tok, val in res.tokens)
        if args.words:
            line += "\t" + " ".join(f"{word}={val:.3f}" for word, val in res.words)
        if res.truncated:
            line += f"\t[truncated: only the first {scorer.max_length - 2} pieces scored]"
        print(line)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            for res in results:
                record = {"text": res.text, "pll": res.pll, "pieces": res.pieces, "tokens": res.tokens}
                record.update(words=res.words, truncated=res.truncated)
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    _print_corpus_summary([(r.pll, r.pieces, len(r.words)) for r in results])
    return 0


def _read_input(raw: str) -> tuple[str, str]:
    """(name for messages, text) of a file or, for '-', standard input."""
    if raw == "-":
        data = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        path = Path(raw)
        if not path.is_file():
            raise UserError(f"{path}: input file does not exist.")
        data, name = path.read_bytes(), str(path)
    try:
        return name, data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{name}: not UTF-8 text; give one sentence per line or an n-best JSON.") from None


def _score_nbest(args: argparse.Namespace, name: str, text: str) -> int:
    """Every hypothesis of an n-best list scored once per distinct text, written back in the list's format."""
    from pll.nbest import read_nbest, write_nbest
    from pll.rescore import attach_plls

    utts, fmt = read_nbest(name, text)
    if args.output:
        refuse_to_replace([args.output], args.overwrite)
    scorer = _scorer(args)
    by_text: dict[str, tuple[float, int, int]] = {}

    def score_texts(texts: list[str]) -> list[tuple[float, int]]:
        results = scorer.score(texts)
        by_text.update((r.text, (r.pll, r.pieces, len(r.words))) for r in results)
        return [(r.pll, r.pieces) for r in results]

    attach_plls([utts], score_texts)
    written = write_nbest(args.output, utts, fmt, lam=None)
    if args.output:
        count = sum(len(u.hyps) for u in utts)
        print(f"{len(utts)} utterances, {count} hypotheses scored -> {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(written)
    _print_corpus_summary([by_text[h.text] for u in utts for h in u.hyps])
    return 0


def _print_corpus_summary(rows: list[tuple[float, int, int]]) -> None:
    """Corpus pseudo-perplexity (Salazar et al. 2020): exp(-sum PLL / N), per piece and per word.

    Per word is the one to compare across models, since their tokenisers cut the same text differently."""
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


def _parse_lambdas(raw: str | None) -> tuple[float, ...]:
    from pll.rescore import DEFAULT_LAMBDAS

    if not raw:
        return DEFAULT_LAMBDAS
    try:
        return tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--lambdas {raw!r}: give comma-separated numbers, e.g. 0.1,0.2,0.5.") from None


def run_rescore(args: argparse.Namespace) -> int:
    from pll.nbest import read_nbest, write_nbest
    from pll.rescore import attach_plls, choose_lambda, require_refs, saved_scores, split_report

    out_dir = Path(args.output_dir)
    targets = [
        out_dir / (Path(p).name.removesuffix(".json") + ".rescored.json") for p in [args.dev, *args.test]
    ]
    refuse_to_replace([out_dir / "report.json", *targets], args.overwrite)
    lambdas = _parse_lambdas(args.lambdas)
    dev, dev_fmt = read_nbest(args.dev)
    require_refs(dev, args.dev)
    tests = [(path, *read_nbest(path)) for path in args.test]
    if args.ln < 0:
        raise UserError(f"--ln {args.ln}: the length-normalisation exponent must be 0 or more.")
    if not args.model and not args.scores:
        raise UserError("rescore needs --model (to score the hypotheses) or --scores (PLLs saved earlier).")
    known = saved_scores(args.scores)
    lists = [dev] + [utts for _, utts, _ in tests]
    texts = _texts(lists)
    unscored = texts - known.keys()
    score_texts, method = None, "saved scores"
    if unscored and args.model:
        scorer = _scorer(args)
        method = scorer.method if not known else f"{scorer.method} + saved scores"
        _warn_long(scorer, [(args.dev, dev), *((p, u) for p, u, _ in tests)])
        score_texts = _pll_and_pieces(scorer)

    scored = attach_plls(lists, score_texts, known)
    if args.scores:
        reused = len(texts & known.keys())
        print(
            f"{reused} distinct hypotheses' PLLs reused from --scores; {scored} scored now", file=sys.stderr
        )
    lam, table = choose_lambda(dev, lambdas, args.ln, args.ln_type)

    out_dir.mkdir(parents=True, exist_ok=True)
    reports = [("dev", args.dev, dev, dev_fmt)] + [("test", p, u, f) for p, u, f in tests]
    summary = {
        "model": str(args.model) if args.model else None,
        "scores": [str(p) for p in args.scores],
        "method": method,
        "lambda": lam,
        "ln": {"alpha": args.ln, "type": args.ln_type},
        "dev_wer_by_lambda": table,
        "splits": [],
    }
    ln_note = f", PLL / length penalty ({args.ln_type}, α={args.ln:g})" if args.ln else ""
    print(f"method {method}; λ = {lam:.2f} (lowest dev WER of {len(lambdas)} values){ln_note}")
    print(f"{'split':<6} {'file':<40} {'utts':>5} {'1-best':>8} {'rescored':>9} {'oracle':>8}")
    for name, path, utts, fmt in reports:
        target = out_dir / (Path(path).name.removesuffix(".json") + ".rescored.json")
        write_nbest(target, utts, fmt, lam, args.ln, args.ln_type)
        entry = {"split": name, "file": str(path), "output": str(target), "utterances": len(utts)}
        if all(u.ref is not None for u in utts):
            rep = split_report(name, utts, lam, args.ln, args.ln_type)
            entry.update(
                wer_first_best=rep.wer_first_best, wer_rescored=rep.wer_rescored, wer_oracle=rep.wer_oracle
            )
            print(
                f"{name:<6} {Path(path).name:<40} {len(utts):>5} {100 * rep.wer_first_best:>7.2f}% "
                f"{100 * rep.wer_rescored:>8.2f}% {100 * rep.wer_oracle:>7.2f}%"
            )
        else:
            print(f"{name:<6} {Path(path).name:<40} {len(utts):>5}  (no references: WER not computed)")
        summary["splits"].append(entry)
    (out_dir / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"rescored lists and report.json written to {out_dir}")
    return 0


def _pll_and_pieces(scorer):
    def score_texts(texts: list[str]) -> list[tuple[float, int]]:
        return [(r.pll, r.pieces) for r in scorer.score(texts)]

    return score_texts


def _texts(lists: list) -> set[str]:
    return {h.text for utts in lists for u in utts for h in u.hyps}


def _warn_long(scorer, named_lists: list) -> None:
    for path, utts in named_lists:
        texts = [h.text for u in utts for h in u.hyps]
        long = sum(scorer.too_long(texts))
        if long:
            print(
                f"warning: {path}: {long} of {len(texts)} hypotheses have more pieces than the model takes "
                f"({scorer.max_length}); their PLL covers the first {scorer.max_length - 2} only",
                file=sys.stderr,
            )


def run_nbest(args: argparse.Namespace) -> int:
    from pll.asr import decode_nbest, read_transcription
    from pll.nbest import write_nbest
    from pll.rescore import first_best, oracle_best
    from pll.wer import corpus_wer

    if args.nbest < 1:
        raise UserError("--nbest must be at least 1.")
    refs_path = Path(args.refs) if args.refs else Path(args.audio) / "transcription"
    if args.refs and not refs_path.is_file():
        raise UserError(f"{refs_path}: references file does not exist.")
    refs = read_transcription(refs_path) if refs_path.is_file() else None
    utts = decode_nbest(args.audio, args.nbest, refs)
    write_nbest(args.output, utts, "list", lam=0.0)
    print(f"{len(utts)} utterances, {sum(len(u.hyps) for u in utts)} hypotheses -> {args.output}")
    with_refs = [u for u in utts if u.ref is not None]
    if with_refs:
        r = [u.ref or "" for u in with_refs]
        print(
            f"WER over {len(with_refs)} referenced utterances: 1-best {100 * corpus_wer(r, [first_best(u) for u in with_refs]):.2f}%, "
            f"oracle {100 * corpus_wer(r, [oracle_best(u) for u in with_refs]):.2f}%"
        )
    return 0
