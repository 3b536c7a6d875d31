"""`electra score`, `electra rescore` and `electra nbest`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

from electra.errors import UserError
from electra.files import require_file, write_json_atomically, write_text_atomically
from electra.flags import add_output_option, require_counts
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
        help="a file to write JSON lines {text, pll, pieces, tokens, words, pll_scorer} to as well; for an n-best "
        "input, the scored list (default: standard output)",
    )
    _scoring_options(score)
    score.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    score.set_defaults(func=run_score)

    rescore = subparsers.add_parser(
        "rescore",
        help="re-rank n-best lists by a fusion of first-pass scores and PLLs tuned on dev",
        description="Fuse the list's scores (--features), PLLs (--model, --scores) and a length term (--length) "
        "with weights found on dev by a search that adapts to each feature's scale; report dev and test WER "
        "of the first pass, each feature alone, the fusion and the oracle; write the re-ranked lists.",
    )
    rescore.add_argument(
        "--model",
        nargs="+",
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
        default=[],
        metavar="FILE",
        help="reuse PLLs `electra score` saved (a scored n-best JSON or its --output JSON lines) instead of "
        "scoring again: trying other λ or --ln then takes seconds; with --model, they must come from that model "
        "and --method (each saved PLL records its scorer)",
    )
    rescore.add_argument(
        "--dev", required=True, help="n-best JSON (mlm-scoring dict or list of {id, ref, hyps})"
    )
    rescore.add_argument("--test", nargs="*", default=[], help="n-best JSON file(s) to rescore with dev's λ")
    add_output_option(
        rescore,
        "output_dir",
        "directory for the rescored lists (NAME.rescored.json; dev./test. in front when two inputs share a "
        "name) and report.json (default: rescored/ in the current directory)",
        default="rescored",
    )
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
    _scoring_options(rescore)
    rescore.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    rescore.set_defaults(func=run_rescore)

    ngram = subparsers.add_parser(
        "ngram",
        help="train a word n-gram LM on a corpus and add its log-probability to n-best lists",
        description="Interpolated Kneser-Ney (pure Python) on the corpus's normalised sentences; every hypothesis "
        "of each list gets a field (default 'ngram') with ln P(<s> text </s>), for `rescore --features`.",
    )
    ngram.add_argument("--corpus", required=True, help="text file, directory or archive (as pretrain reads)")
    ngram.add_argument(
        "--nbest", nargs="+", required=True, metavar="FILE", help="n-best JSON lists to annotate"
    )
    ngram.add_argument("--order", type=int, default=4, help="n-gram order (default 4)")
    ngram.add_argument("--field", default="ngram", help="name of the field written on every hypothesis")
    add_output_option(ngram, "output_dir", "directory for the lists", required=True)
    ngram.add_argument(
        "--overwrite", action="store_true", help="replace lists an earlier run left in the output"
    )
    ngram.set_defaults(func=run_ngram)

    nbest = subparsers.add_parser(
        "nbest",
        help="make n-best lists from 16 kHz wav files with pocketsphinx",
        description="Needs the optional ASR extra: pip install 'electra[asr]'.",
    )
    nbest.add_argument("--audio", required=True, help="directory of 16 kHz mono wav files")
    nbest.add_argument("--output", required=True, help="n-best JSON to write (list format)")
    nbest.add_argument("--nbest", type=int, default=20, help="distinct hypotheses per utterance")
    nbest.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
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
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="sentences (or masked copies) per forward; cloze scoring ignores it (it packs distinct tower "
        "states, generators/shared_towers.py) and ELECTRA-TT uses it for its discriminator",
    )
    parser.add_argument(
        "--within-word",
        default="none",
        choices=WITHIN_WORD,
        help="masked-LM PLL: also mask the later (l2r) or all (whole) pieces of the scored word",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")


def _scorer(args: argparse.Namespace, model: str | None = None, identity: str | None = None):
    from pll.scoring import load_scorer

    model = model or args.model
    scorer = load_scorer(model, args.method, args.device, args.batch_size, args.within_word, identity)
    print(f"scoring with --method {scorer.method}", file=sys.stderr)
    return scorer


def run_score(args: argparse.Namespace) -> int:
    from pll.nbest import looks_like_nbest

    require_counts(args, ("batch_size",))
    if args.output:
        _check_output_file(args.output, args.overwrite)
    name, text = _read_input(args.input)
    # A .json file is an n-best list: if it does not parse, say so rather than score its JSON syntax as sentences.
    if looks_like_nbest(text) or name.lower().endswith(".json"):
        return _score_nbest(args, name, text)
    sentences = [s for s in (line.strip() for line in text.splitlines()) if s]
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
        records = []
        for res in results:
            record = {"text": res.text, "pll": res.pll, "pieces": res.pieces, "tokens": res.tokens}
            record.update(words=res.words, truncated=res.truncated, pll_scorer=scorer.identity)
            records.append(json.dumps(record, ensure_ascii=False) + "\n")
        write_text_atomically(args.output, "".join(records))
    _print_corpus_summary([(r.pll, r.pieces, r.word_count) for r in results])
    return 0


def _check_output_file(raw: str, overwrite: bool, example: str = "scores.jsonl") -> None:
    """Before any work: an --output that cannot take a file is refused in one line, --overwrite or not.

    A directory is not replaced by a file even when asked (that would delete what it holds), and writing into it
    would pick a name the user did not give; a path under a file cannot be created. Both used to surface as a
    traceback once all the scoring was done. `example` is the file name the message suggests."""
    path = Path(raw)
    if path.is_dir():
        raise UserError(f"--output {path} is a directory; name the file to write, e.g. {path / example}.")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"--output {path}: {parent} is a file, so nothing can be written under it.")
    refuse_to_replace([path], overwrite)


def _read_input(raw: str) -> tuple[str, str]:
    """(name for messages, text) of a file or, for '-', standard input."""
    if raw == "-":
        data = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        path = require_file(raw, "input file", "'-' reads standard input")
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
    scorer = _scorer(args)
    by_text: dict[str, tuple[float, int, int]] = {}

    def score_texts(texts: list[str]) -> list[tuple[float, int]]:
        results = scorer.score(texts)
        by_text.update((r.text, (r.pll, r.pieces, r.word_count)) for r in results)
        return [(r.pll, r.pieces) for r in results]

    attach_plls([utts], score_texts, scorer=scorer.identity)
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
    from pll.fusion import LengthNorm, fuse, fused_score, split_table
    from pll.nbest import read_nbest, write_nbest
    from pll.rescore import DEFAULT_LAMBDAS, choose_lambda, require_refs

    require_counts(args, ("batch_size",))
    out_dir = Path(args.output_dir)
    targets = [out_dir / name for name in _rescored_names(args.dev, args.test)]
    refuse_to_replace([out_dir / "report.json", *targets], args.overwrite)
    dev, dev_fmt = read_nbest(args.dev)
    require_refs(dev, args.dev)
    tests = [(path, *read_nbest(path)) for path in args.test]
    if args.ln < 0:
        raise UserError(f"--ln {args.ln}: the length-normalisation exponent must be 0 or more.")
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    if not features:
        raise UserError("--features: name at least one numeric field of the hypotheses (e.g. score).")
    lists = [dev] + [utts for _, utts, _ in tests]
    method = scorer = None
    if args.model or args.scores:
        method, scorer = _attach_first_pll(args, dev, tests, lists)
        features.append("pll")
    for extra in args.model[1:]:
        features.append(_attach_extra_pll(args, extra, lists, features))
    if args.length != "none":
        features.append(args.length)
    ln = LengthNorm(args.ln, args.ln_type)

    if args.lambdas:
        if features != ["score", "pll"]:
            raise UserError(
                "--lambdas is the classic score + λ·PLL recipe: use it with one --model and no "
                "--features/--length, or drop it to search weights for every feature."
            )
        lambdas = _parse_lambdas(args.lambdas)
        lam, table = choose_lambda(dev, lambdas, args.ln, args.ln_type)
        weights = {"score": 1.0, "pll": lam}
        search = {"recipe": "score + λ·PLL", "dev_wer_by_lambda": table}
    else:
        if len(features) < 2:
            raise UserError("nothing to fuse: give --model/--scores, more --features, or --length.")
        extra = (
            {"pll": DEFAULT_LAMBDAS} if features[0] == "score" else None
        )  # the classic grid is searched too
        result = fuse(dev, features, extra_candidates=extra, ln=ln)
        weights = result.weights
        search = {
            "spreads": result.spreads,
            "dev_wer": result.dev_wer,
            "ties": result.ties,
            "settings_evaluated": result.evaluated,
            "rounds": result.rounds,
            "search_space": result.search_space,
        }

    out_dir.mkdir(parents=True, exist_ok=True)
    reports = [("dev", args.dev, dev, dev_fmt, targets[0])]
    reports += [("test", p, u, f, t) for (p, u, f), t in zip(tests, targets[1:])]
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
    rows = []
    for name, path, utts, fmt, target in reports:
        write_nbest(target, utts, fmt, None, combine=lambda h: fused_score(h, weights, ln))
        entry = {"split": name, "file": str(path), "output": str(target), "utterances": len(utts)}
        if all(u.ref is not None for u in utts):
            table = split_table(utts, weights, ln)
            entry["wer"] = table
            entry.update(  # the first report's names, kept for scripts that read them
                wer_first_best=table["first_pass"], wer_rescored=table["fused"], wer_oracle=table["oracle"]
            )
            rows.append((name, Path(path).name, len(utts), table))
        else:
            print(f"{name}: {Path(path).name}: no references, WER not computed")
        summary["splits"].append(entry)
    _print_wer_table(rows)
    write_json_atomically(out_dir / "report.json", summary)
    for name, path, _, _, target in reports:
        print(f"{name}: {path} -> {target}")
    print(f"rescored lists and report.json written to {out_dir}")
    return 0


def _rescored_names(dev: str, tests: list[str]) -> list[str]:
    """The file name each list's re-ranked copy gets in --output: NAME.rescored.json, as the README documents.

    Two inputs with the same file name (da/nbest.json, db/nbest.json; or one file given twice) would write one
    path twice, the second list replacing the first; those get their split in front (dev.nbest.rescored.json,
    test.nbest.rescored.json; test1., test2., ... when there are several --test files). Names that still clash,
    which takes inputs named like those prefixed ones, are refused before any work."""
    labels = ["dev"] + (["test"] if len(tests) == 1 else [f"test{i}" for i in range(1, len(tests) + 1)])
    bases = [Path(p).name.removesuffix(".json") + ".rescored.json" for p in [dev, *tests]]
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


def _attach_first_pll(args, dev, tests, lists) -> tuple[str, str | None]:
    """PLLs of the first model (or --scores) on every hypothesis: feature `pll`.

    Returns the method's name and the scorer's identity (None when the saved scores do not record one)."""
    from pll.rescore import attach_plls, saved_scores

    known = saved_scores(args.scores)
    texts = _texts(lists)
    unscored = texts - known.keys()
    identity = None
    if args.model:
        from pll.scoring import scorer_identity

        identity = scorer_identity(args.model[0], args.method, args.within_word)
        if args.scores:
            _refuse_other_scorer(args, known, identity, len(unscored))
    score_texts, method = None, "saved scores"
    if unscored and args.model:
        scorer = _scorer(args, args.model[0], identity)
        method = scorer.method if not known else f"{scorer.method} + saved scores"
        _warn_long(scorer, [(args.dev, dev), *((p, u) for p, u, _ in tests)])
        score_texts = _pll_and_pieces(scorer)
    scored = attach_plls(lists, score_texts, known, scorer=identity)
    if args.scores:
        reused = len(texts & known.keys())
        print(
            f"{reused} distinct hypotheses' PLLs reused from --scores; {scored} scored now", file=sys.stderr
        )
    return method, identity if scored else known.scorer


def _refuse_other_scorer(args, known, identity: str, unscored: int) -> None:
    """--model beside --scores: every PLL of feature `pll` must come from one model and method, else the weight
    tuned on dev (scored by one) is applied to test (scored by the other), and the report names the wrong model.

    Saved scores that record another scorer are refused. Saved scores without a record (from before `score` wrote
    one) cannot be checked: they are refused where --model would score the hypotheses they lack, and used alone,
    with a warning, where they cover every hypothesis (then --model scores nothing)."""
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


def _attach_extra_pll(args, model: str, lists, taken: list[str]) -> str:
    """A further model's PLLs, stored on each hypothesis as `pll:NAME` (and written back with the lists)."""
    base = f"pll:{Path(model).resolve().name}"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    scorer = _scorer(args, model)
    texts = sorted(_texts(lists))
    plls = dict(zip(texts, scorer.sentence_plls(texts)))
    for utts in lists:
        for utt in utts:
            for hyp in utt.hyps:
                hyp.extra[name] = plls[hyp.text]
    return name


def _print_wer_table(rows: list) -> None:
    if not rows:
        return
    columns = list(rows[0][3])
    print(f"{'split':<6} {'file':<28} {'utts':>5} " + " ".join(f"{c:>14}" for c in columns))
    for name, file, count, table in rows:
        cells = " ".join(f"{100 * table[c]:>13.2f}%" for c in columns)
        print(f"{name:<6} {file[:28]:<28} {count:>5} {cells}")


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


def run_ngram(args: argparse.Namespace) -> int:
    import time

    from electra.corpus import read_documents
    from pll.nbest import read_nbest, write_nbest
    from pll.ngram import KneserNeyLM, corpus_sentences, normalize_words

    if args.order < 1:
        raise UserError(f"--order {args.order}: give 1 or more.")
    if not Path(args.corpus).exists():
        raise UserError(f"{args.corpus}: corpus does not exist.")
    out_dir = Path(args.output_dir)
    targets = [out_dir / Path(p).name for p in args.nbest]
    if any(t.resolve() == Path(p).resolve() for t, p in zip(targets, args.nbest)):
        raise UserError(f"--output {out_dir}: would overwrite the input lists; choose another directory.")
    refuse_to_replace(targets, args.overwrite)
    lists = [(path, *read_nbest(path)) for path in args.nbest]
    started = time.perf_counter()
    lm = KneserNeyLM(args.order).fit(corpus_sentences(read_documents(args.corpus)))
    print(
        f"{args.order}-gram LM: {lm.sentences:,} sentences, {len(lm.vocab):,} words, "
        f"{len(lm.counts[args.order]):,} {args.order}-grams in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
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


def run_nbest(args: argparse.Namespace) -> int:
    from pll.asr import decode_nbest, read_transcription
    from pll.nbest import write_nbest
    from pll.rescore import first_best, oracle_best
    from pll.wer import corpus_wer

    if args.nbest < 1:
        raise UserError("--nbest must be at least 1.")
    _check_output_file(args.output, args.overwrite, example="nbest.json")
    refs_path = Path(args.refs) if args.refs else Path(args.audio) / "transcription"
    if args.refs:
        require_file(refs_path, "references file")
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
