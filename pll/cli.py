"""`electra score`, `electra rescore` and `electra nbest`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from electra.errors import UserError
from electra.overwrite import refuse_to_replace
from pll.methods import METHODS, WITHIN_WORD


def register(subparsers: argparse._SubParsersAction) -> None:
    score = subparsers.add_parser(
        "score",
        help="print the pseudo-log-likelihood of each sentence in a file",
        description="Score sentences (one per line) with Electric (one pass), ELECTRA-TT, or masked-LM PLL.",
    )
    score.add_argument(
        "--model", required=True, help="run output dir, its discriminator/, or a masked-LM checkpoint"
    )
    score.add_argument("--input", required=True, help="text file, one sentence per line")
    score.add_argument("--tokens", action="store_true", help="also print each token's score")
    score.add_argument(
        "--words", action="store_true", help="also print each word's score (sum over its pieces)"
    )
    score.add_argument("--output", help="write JSON lines {text, pll, tokens, words} here as well")
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
    rescore.add_argument("--model", required=True)
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
    path = Path(args.input)
    if not path.is_file():
        raise UserError(f"{path}: input file does not exist.")
    try:
        sentences = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; give one sentence per line.") from None
    sentences = [s for s in sentences if s]
    if args.output:
        refuse_to_replace([args.output], args.overwrite)
    if not sentences:
        raise UserError(f"{path}: no sentences (the file is empty).")
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
                record = {"text": res.text, "pll": res.pll, "tokens": res.tokens, "words": res.words}
                record["truncated"] = res.truncated
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return 0


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
    from pll.rescore import attach_plls, choose_lambda, require_refs, split_report

    out_dir = Path(args.output_dir)
    targets = [
        out_dir / (Path(p).name.removesuffix(".json") + ".rescored.json") for p in [args.dev, *args.test]
    ]
    refuse_to_replace([out_dir / "report.json", *targets], args.overwrite)
    lambdas = _parse_lambdas(args.lambdas)
    dev, dev_fmt = read_nbest(args.dev)
    require_refs(dev, args.dev)
    tests = [(path, *read_nbest(path)) for path in args.test]
    scorer = _scorer(args)
    for path, utts in [(args.dev, dev), *((p, u) for p, u, _ in tests)]:
        texts = [h.text for u in utts for h in u.hyps]
        long = sum(scorer.too_long(texts))
        if long:
            print(
                f"warning: {path}: {long} of {len(texts)} hypotheses have more pieces than the model takes "
                f"({scorer.max_length}); their PLL covers the first {scorer.max_length - 2} only",
                file=sys.stderr,
            )
    attach_plls([dev] + [utts for _, utts, _ in tests], scorer.sentence_plls)
    lam, table = choose_lambda(dev, lambdas)

    out_dir.mkdir(parents=True, exist_ok=True)
    reports = [("dev", args.dev, dev, dev_fmt)] + [("test", p, u, f) for p, u, f in tests]
    summary = {
        "model": str(args.model),
        "method": scorer.method,
        "lambda": lam,
        "dev_wer_by_lambda": table,
        "splits": [],
    }
    print(f"method {scorer.method}; λ = {lam:.2f} (lowest dev WER of {len(lambdas)} values)")
    print(f"{'split':<6} {'file':<40} {'utts':>5} {'1-best':>8} {'rescored':>9} {'oracle':>8}")
    for name, path, utts, fmt in reports:
        target = out_dir / (Path(path).name.removesuffix(".json") + ".rescored.json")
        write_nbest(target, utts, fmt, lam)
        entry = {"split": name, "file": str(path), "output": str(target), "utterances": len(utts)}
        if all(u.ref is not None for u in utts):
            rep = split_report(name, utts, lam)
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
