"""`electra score`, `electra rescore` and `electra nbest`."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from pathlib import Path

from electra.pll.methods import METHODS, WITHIN_WORD

from electra.core.errors import UserError
from electra.core.files import require_file, write_json_atomically, write_text_atomically
from electra.core.flags import add_output_option, require_counts
from electra.core.overwrite import check_output_file, refuse_to_replace


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
    score.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from the scores it saved in OUTPUT.unfinished (same input and model)",
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
    rescore.add_argument(
        "--dev", required=True, help="n-best JSON (mlm-scoring dict or list of {id, ref, hyps})"
    )
    rescore.add_argument(
        "--test", nargs="*", action="extend", default=[], help="n-best JSON file(s) to rescore with dev's λ"
    )
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
    rescore.add_argument(
        "--resume",
        action="store_true",
        help="continue the PLLs an interrupted run saved in --output-dir (pll.jsonl.unfinished)",
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
    from electra.pll.scoring import load_scorer

    model = model or args.model
    scorer = load_scorer(model, args.method, args.device, args.batch_size, args.within_word, identity)
    print(f"scoring with --method {scorer.method}", file=sys.stderr)
    return scorer


def run_score(args: argparse.Namespace) -> int:
    from electra.pll.nbest import looks_like_nbest

    require_counts(args, ("batch_size",))
    _check_device(args.device)
    if args.resume and not args.output:
        raise UserError(
            "--resume continues the scores an interrupted run saved in --output; pass --output FILE."
        )
    if args.output:
        check_output_file(args.output, args.overwrite, reads={"--input": args.input})
    name, text = _read_input(args.input)
    # A .json file is an n-best list: if it does not parse, say so rather than score its JSON syntax as sentences.
    if looks_like_nbest(text) or name.lower().endswith(".json"):
        return _score_nbest(args, name, text)
    # Numbered as `sed -n Np` and editors number them: by "\n" alone (str.splitlines also breaks at U+2028, form
    # feeds and other separators, which would shift every later number).
    lines = text.split("\n")
    if lines[-1] == "":  # the last line's own newline starts no line
        lines.pop()
    # A carriage return inside a line (old Mac line breaks) joined every sentence of the file into one; those at
    # its ends are Windows line breaks (CRLF, and CRCRLF from converting one twice), stripped with the spaces.
    inner = next((n for n, line in enumerate(lines, start=1) if "\r" in line.strip()), None)
    if inner is not None:
        raise UserError(
            f"{name}:{inner}: a carriage return inside the line (old Mac line breaks?); each sentence must end "
            "with a line feed: convert the file, e.g. tr '\\r' '\\n' < IN > OUT."
        )
    numbered = [(n, s) for n, s in enumerate((line.strip() for line in lines), start=1) if s]
    if not numbered:
        raise UserError(f"{name}: no sentences (the input is empty).")
    if args.output:
        _check_unfinished(args.output, args.resume, args.overwrite)
    scorer = _scorer(args)
    failed = None
    if args.output:  # first: a reader of standard output that stops early (`| head`) must not cost it
        records, failed = _score_to_output(args, scorer, numbered)
    else:
        results = scorer.score([s for _, s in numbered])
        records = [_record(number, res, scorer.identity) for (number, _), res in zip(numbered, results)]
    skipped = len(lines) - len(numbered)  # blank lines after the last sentence count too
    if skipped:
        where = "; --output records give each one's input 'line'" if args.output else ""
        print(
            f"{name}: {skipped} blank line(s) skipped: the scores follow the other lines in order{where}",
            file=sys.stderr,
        )
    for record in records:
        line = f"{record['pll']:.4f}\t{record['text']}"
        if args.tokens:
            line += "\t" + " ".join(f"{tok}={val:.3f}" for tok, val in record["tokens"])
        if args.words:
            line += "\t" + " ".join(f"{word}={val:.3f}" for word, val in record["words"])
        if record["truncated"]:
            line += f"\t[truncated: only the first {scorer.max_length - 2} pieces scored]"
        print(line)
    _print_corpus_summary([(r["pll"], r["pieces"], len(r["words"])) for r in records])
    if failed is not None:
        raise UserError(failed)
    return 0


# Sentences scored between two saves of --output's unfinished file: small enough that a kill costs minutes, large
# enough that batches stay full.
SCORE_CHUNK = 1024


def _record(number: int, res, identity: str | None) -> dict:
    """One --output JSON line: a sentence's score with its input line number and the scorer that made it."""
    return {
        "text": res.text,
        "line": number,
        "pll": res.pll,
        "pieces": res.pieces,
        "tokens": res.tokens,
        "words": res.words,
        "truncated": res.truncated,
        "pll_scorer": identity,
    }


def _unfinished(output: str | Path) -> Path:
    return Path(output).with_name(f"{Path(output).name}.unfinished")


def _check_unfinished(output: str | Path, resume: bool, overwrite: bool) -> None:
    """Before the model loads: an earlier run's unfinished scores are continued (--resume), deleted (--overwrite)
    or named; a new run must not append to them, nor silently discard hours of scoring."""
    unfinished = _unfinished(output)
    if resume or not unfinished.exists():
        return
    if overwrite:
        unfinished.unlink()
        return
    raise UserError(
        f"{unfinished} holds the scores of an interrupted run; pass --resume to continue it, or --overwrite to "
        "start over."
    )


def _score_to_output(
    args: argparse.Namespace, scorer, numbered: list[tuple[int, str]]
) -> tuple[list, str | None]:
    """Score in chunks, appending each chunk's JSON lines to OUTPUT.unfinished, renamed to OUTPUT once whole: a
    run killed after hours (a scheduler's limit, Ctrl-C) kept nothing, and now `--resume` continues it. Returns
    the records and, when the disk refused a write, the message to end with (the scores still reach standard
    output, and the unfinished file keeps what was written)."""
    unfinished = _unfinished(args.output)
    records = _resumed_records(unfinished, numbered, scorer.identity) if args.resume else []
    if len(numbered) > SCORE_CHUNK:
        print(
            f"saving scores to {unfinished} as they come ({SCORE_CHUNK} sentences at a time); if stopped, "
            "rerun with --resume to continue",
            file=sys.stderr,
        )
    failed = None
    with open(unfinished, "a", encoding="utf-8") as handle:
        for start in range(len(records), len(numbered), SCORE_CHUNK):
            chunk = numbered[start : start + SCORE_CHUNK]
            results = scorer.score([s for _, s in chunk])
            new = [_record(number, res, scorer.identity) for (number, _), res in zip(chunk, results)]
            records.extend(new)
            if failed is None:
                try:
                    _append_lines(handle, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new))
                except OSError as exc:  # a disk that filled up: keep scoring, for standard output
                    failed = (
                        f"--output {args.output}: could not be written ({exc.strerror or exc}); the scores are on "
                        f"standard output above, and the first {start} are kept in {unfinished}: free some space "
                        "and rerun with --resume, or choose another --output."
                    )
            if len(numbered) > SCORE_CHUNK:
                print(f"scored {len(records)} of {len(numbered)} sentences", file=sys.stderr)
    if failed is None:
        os.replace(unfinished, args.output)
    return records, failed


def _append_lines(handle, text: str) -> None:
    handle.write(text)
    handle.flush()


def _saved_lines(unfinished: Path, identity: str | None) -> list[dict]:
    """The JSON lines an interrupted run saved in `unfinished`, each made by this scorer (else refused in one
    line). A last line cut short by the kill is dropped, and the file truncated to the whole lines before more
    are appended."""
    if not unfinished.exists():
        return []
    records, kept = [], 0
    with open(unfinished, "rb") as handle:
        for raw in handle:
            try:
                record = json.loads(raw)
            except ValueError:
                break  # cut short by the kill: scored again
            if not raw.endswith(b"\n") or not isinstance(record, dict):
                break
            if record.get("pll_scorer") != identity:
                raise UserError(
                    f"--resume: {unfinished} was scored by {record.get('pll_scorer')}, not by {identity}; resume "
                    "with that model and --method, or pass --overwrite to start over."
                )
            records.append(record)
            kept += len(raw)
    os.truncate(unfinished, kept)
    return records


def _resumed_records(unfinished: Path, numbered: list[tuple[int, str]], identity: str | None) -> list[dict]:
    """The records an interrupted run saved, checked against this input line by line."""
    records = _saved_lines(unfinished, identity)
    for index, record in enumerate(records):
        if index >= len(numbered) or (record.get("line"), record.get("text")) != numbered[index]:
            raise UserError(
                f"--resume: {unfinished} line {index + 1} holds the score of another input (input line "
                f"{record.get('line')}: {record.get('text')!r}); resume with the input it was made from, or "
                "pass --overwrite to start over."
            )
    print(
        f"--resume: {len(records)} of {len(numbered)} sentences scored earlier ({unfinished})",
        file=sys.stderr,
    )
    return records


def _score_texts_saving(
    scorer, texts: list[str], output: str | Path | None, resume: bool
) -> dict[str, tuple[float, int, int]]:
    """An n-best list's distinct texts scored in chunks, each chunk's (pll, pieces, word count) appended to
    OUTPUT.unfinished (when there is an `output`), so that `--resume` scores only the texts not saved: a list of
    a few thousand utterances is hours of masked-LM PLL, and a kill had kept nothing."""
    unfinished = _unfinished(output) if output else None
    scores: dict[str, tuple[float, int, int]] = {}
    if resume and unfinished is not None:
        wanted = set(texts)
        for record in _saved_lines(unfinished, scorer.identity):
            if record.get("text") not in wanted or not {"pll", "pieces", "word_count"} <= record.keys():
                raise UserError(
                    f"--resume: {unfinished} holds the score of {record.get('text')!r}, which this list does not "
                    "hold; resume with the list it was made from, or pass --overwrite to start over."
                )
            scores[record["text"]] = (record["pll"], record["pieces"], record["word_count"])
        print(f"--resume: {len(scores)} of {len(texts)} texts scored earlier ({unfinished})", file=sys.stderr)
    todo = [text for text in texts if text not in scores]
    if unfinished is not None:  # rescore's --output-dir is made once there is work to save in it
        unfinished.parent.mkdir(parents=True, exist_ok=True)
    handle = open(unfinished, "a", encoding="utf-8") if unfinished is not None else None
    try:
        for start in range(0, len(todo), SCORE_CHUNK):
            lines = []
            for res in scorer.score(todo[start : start + SCORE_CHUNK]):
                scores[res.text] = (res.pll, res.pieces, res.word_count)
                record = {
                    "text": res.text,
                    "pll": res.pll,
                    "pieces": res.pieces,
                    "word_count": res.word_count,
                }
                lines.append(json.dumps({**record, "pll_scorer": scorer.identity}, ensure_ascii=False) + "\n")
            if handle is not None:
                try:
                    _append_lines(handle, "".join(lines))
                except OSError as exc:  # a full disk: keep scoring; the list goes to stdout if unsaved
                    print(f"warning: {unfinished}: no longer saved ({exc.strerror or exc})", file=sys.stderr)
                    handle.close()
                    handle = None
            if len(todo) > SCORE_CHUNK:
                print(f"scored {len(scores)} of {len(texts)} distinct texts", file=sys.stderr)
    finally:
        if handle is not None:
            handle.close()
    return scores


def _check_device(name: str) -> None:
    from electra.pll.scoring import check_device  # where `load_scorer` checks it too

    check_device(name)


def _read_input(raw: str) -> tuple[str, str]:
    """(name for messages, text) of a file or, for '-', standard input."""
    from electra.core.files import decode_user_text

    if raw == "-":
        data = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        path = require_file(raw, "input file", "'-' reads standard input")
        data, name = path.read_bytes(), str(path)
    return name, decode_user_text(data, name, "one sentence per line or an n-best JSON")


def _score_nbest(args: argparse.Namespace, name: str, text: str) -> int:
    """Every hypothesis of an n-best list scored once per distinct text, written back in the list's format."""
    from electra.pll.nbest import read_nbest, write_nbest
    from electra.pll.rescore import attach_plls

    utts, fmt = read_nbest(name, text)
    if args.output:
        _check_unfinished(args.output, args.resume, args.overwrite)
    scorer = _scorer(args)
    by_text: dict[str, tuple[float, int, int]] = {}

    def score_texts(texts: list[str]) -> list[tuple[float, int]]:
        by_text.update(_score_texts_saving(scorer, texts, args.output, args.resume))
        return [by_text[t][:2] for t in texts]

    attach_plls([utts], score_texts, scorer=scorer.identity)
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
    _unfinished(args.output).unlink(missing_ok=True)  # its scores are in the list now
    count = sum(len(u.hyps) for u in utts)
    print(f"{len(utts)} utterances, {count} hypotheses scored -> {args.output}", file=sys.stderr)
    _print_corpus_summary(summary)
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
    """--lambdas as numbers, read before any scoring: a typo there used to surface only after every hypothesis
    was scored, and `nan` or `inf` was taken, writing NaN (not JSON) into report.json and every list."""
    from electra.pll.rescore import DEFAULT_LAMBDAS

    if raw is None:
        return DEFAULT_LAMBDAS
    try:
        lambdas = tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--lambdas {raw!r}: give comma-separated numbers, e.g. 0.1,0.2,0.5.") from None
    if not lambdas:
        raise UserError("no λ values to try; pass at least one to --lambdas.")
    if not all(math.isfinite(lam) for lam in lambdas):
        raise UserError(f"--lambdas {raw!r}: every λ must be a finite number, e.g. 0.1,0.2,0.5.")
    return lambdas


# Feature names `rescore` computes itself rather than reading from a hypothesis's fields.
COMPUTED_FEATURES = ("score", "pll", "words", "pieces")


def _check_features(args: argparse.Namespace, features: list[str], named_lists: list) -> None:
    """--features, checked on every list before any scoring: one name twice (or one that --model/--scores or
    --length adds anyway) collapsed into a single weight, the anchor's lost (`--features score,score` fused with
    weight 0 on everything); a field missing from a test list failed only after all the scoring and after dev's
    list was written, with a message naming neither the file nor the utterance."""
    added = (["pll"] if args.model or args.scores else []) + ([args.length] if args.length != "none" else [])
    every = features + added
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
                    if not _is_finite_number(hyp.extra.get(name)):
                        raise UserError(
                            f"{path}:{utt.id}: hypothesis {hyp.text!r} has no finite number in field {name!r}, "
                            "which --features fuses; every hypothesis of every list needs it: name fields all "
                            "of them have (e.g. --features am_score,lm_score)."
                        )


def _is_finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_rescore(args: argparse.Namespace) -> int:
    from electra.pll.fusion import LengthNorm, fuse, fused_score, split_table
    from electra.pll.nbest import read_nbest, write_nbest
    from electra.pll.rescore import (
        DEFAULT_LAMBDAS,
        check_test_refs,
        choose_lambda,
        has_reference_words,
        require_refs,
    )

    require_counts(args, ("batch_size",))
    if not math.isfinite(args.ln) or args.ln < 0:
        raise UserError(
            f"--ln {args.ln}: the length-normalisation exponent must be a finite number, 0 or more."
        )
    # Read before any scoring, which can take hours.
    lambdas = _parse_lambdas(args.lambdas) if args.lambdas is not None else None
    if args.model:
        _check_device(args.device)
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    if not features:
        raise UserError("--features: name at least one numeric field of the hypotheses (e.g. score).")
    out_dir = Path(args.output_dir)
    targets = [out_dir / name for name in _rescored_names(args.dev, args.test)]
    pll_files = _pll_files(out_dir, args.model, features)
    refuse_to_replace([out_dir / "report.json", *targets, *pll_files.values()], args.overwrite)
    for saved in pll_files.values():  # before any list is read or model loaded, as `score --output` does
        _check_unfinished(saved, args.resume, args.overwrite)
    dev, dev_fmt = read_nbest(args.dev)
    require_refs(dev, args.dev)
    tests = [(path, *read_nbest(path)) for path in args.test]
    for path, utts, _ in tests:
        check_test_refs(utts, path)
    _check_features(args, features, [(args.dev, dev), *((p, u) for p, u, _ in tests)])
    classic = features == ["score"] and (args.model or args.scores) and len(args.model) <= 1
    if lambdas is not None and not (classic and args.length == "none"):
        raise UserError(CLASSIC_ONLY)  # said before the scoring, not after it
    lists = [dev] + [utts for _, utts, _ in tests]
    method = scorer = None
    if args.model or args.scores:
        method, scorer = _attach_first_pll(args, dev, tests, lists, pll_files.get("pll"))
        features.append("pll")
    for extra, (name, saved) in zip(args.model[1:], list(pll_files.items())[1:]):
        _attach_extra_pll(args, extra, lists, name, saved)
        features.append(name)
    if args.length != "none":
        features.append(args.length)
    ln = LengthNorm(args.ln, args.ln_type)

    if lambdas is not None:
        if features != ["score", "pll"]:
            raise UserError(CLASSIC_ONLY)
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
    # An --overwrite killed between two files left the new dev list beside the old test list and report; with the
    # old ones gone first, a folder without report.json is plainly unfinished.
    for stale in [out_dir / "report.json", *targets]:
        stale.unlink(missing_ok=True)
    rows = []
    for name, path, utts, fmt, target in reports:
        write_nbest(target, utts, fmt, None, combine=lambda h: fused_score(h, weights, ln))
        entry = {"split": name, "file": str(path), "output": str(target), "utterances": len(utts)}
        if all(u.ref is not None for u in utts) and has_reference_words(utts):
            table = split_table(utts, weights, ln)
            entry["wer"] = table
            entry.update(  # the first report's names, kept for scripts that read them
                wer_first_best=table["first_pass"], wer_rescored=table["fused"], wer_oracle=table["oracle"]
            )
            rows.append((name, Path(path).name, len(utts), table))
        else:
            why = "its references are all empty" if utts[0].ref is not None else "no references"
            print(f"{name}: {Path(path).name}: {why}, WER not computed")
        summary["splits"].append(entry)
    _print_wer_table(rows)
    write_json_atomically(out_dir / "report.json", summary)
    for name, path, _, _, target in reports:
        print(f"{name}: {path} -> {target}")
    print(f"rescored lists and report.json written to {out_dir}")
    return 0


CLASSIC_ONLY = (
    "--lambdas is the classic score + λ·PLL recipe: use it with one --model (or --scores) and no "
    "--features/--length, or drop it to search weights for every feature."
)


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


def _pll_files(out_dir: Path, models: list[str], features: list[str]) -> dict[str, Path]:
    """Feature name -> the JSON-lines file in --output-dir that keeps its model's PLLs: `pll.jsonl` for the first
    model, `pll-DIRNAME.jsonl` for each further one (feature `pll:DIRNAME`, numbered when two directories share a
    name). Scoring every hypothesis of a few thousand utterances is hours of masked-LM PLL, which a kill used to
    lose and a second fusion setting used to redo; the file fills as the scoring goes (`--resume` continues it)
    and, whole, is what `--scores` reads."""
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


def _keep_plls(path: Path, scores: dict[str, tuple[float, int | None]], identity: str | None) -> None:
    """Every PLL of one feature, written whole in the JSON lines `score --output` writes (so `--scores` reads it);
    the unfinished copy the scoring appended to goes once this is on disk."""
    lines = "".join(
        json.dumps({"text": text, "pll": pll, "pieces": pieces, "pll_scorer": identity}, ensure_ascii=False)
        + "\n"
        for text, (pll, pieces) in scores.items()
    )
    write_text_atomically(path, lines)
    _unfinished(path).unlink(missing_ok=True)


def _attach_first_pll(args, dev, tests, lists, saved: Path | None) -> tuple[str, str | None]:
    """PLLs of the first model (or --scores) on every hypothesis: feature `pll`. Those the model scores are saved
    in `saved` as they come, and then every PLL of the feature is kept there.

    Returns the method's name and the scorer's identity (None when the saved scores do not record one)."""
    from electra.pll.rescore import attach_plls, saved_scores

    known = saved_scores(args.scores)
    texts = _texts(lists)
    unscored = texts - known.keys()
    identity = None
    if args.model:
        from electra.pll.scoring import scorer_identity

        identity = scorer_identity(args.model[0], args.method, args.within_word)
        if args.scores:
            _refuse_other_scorer(args, known, identity, len(unscored))
    score_texts, method = None, "saved scores"
    fresh: dict[str, tuple[float, int, int]] = {}
    if unscored and args.model:
        scorer = _scorer(args, args.model[0], identity)
        method = scorer.method if not known else f"{scorer.method} + saved scores"
        _warn_long(scorer, [(args.dev, dev), *((p, u) for p, u, _ in tests)])

        def score_texts(texts: list[str]) -> list[tuple[float, int]]:
            fresh.update(_score_texts_saving(scorer, texts, saved, args.resume))
            return [fresh[t][:2] for t in texts]

    scored = attach_plls(lists, score_texts, known, scorer=identity)
    if fresh and saved is not None:
        used = {text: known[text] for text in texts & known.keys()}
        _keep_plls(saved, used | {text: (pll, pieces) for text, (pll, pieces, _) in fresh.items()}, identity)
        print(f"PLLs kept in {saved}: pass it to --scores to fuse again without the model", file=sys.stderr)
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


def _attach_extra_pll(args, model: str, lists, name: str, saved: Path) -> None:
    """A further model's PLLs, stored on each hypothesis as feature `name` (and written back with the lists),
    saved in `saved` as they come."""
    scorer = _scorer(args, model)
    scores = _score_texts_saving(scorer, sorted(_texts(lists)), saved, args.resume)
    _keep_plls(saved, {text: (pll, pieces) for text, (pll, pieces, _) in scores.items()}, scorer.identity)
    for utts in lists:
        for utt in utts:
            for hyp in utt.hyps:
                hyp.extra[name] = scores[hyp.text][0]


def _print_wer_table(rows: list) -> None:
    if not rows:
        return
    columns = list(rows[0][3])
    print(f"{'split':<6} {'file':<28} {'utts':>5} " + " ".join(f"{c:>14}" for c in columns))
    for name, file, count, table in rows:
        cells = " ".join(f"{100 * table[c]:>13.2f}%" for c in columns)
        print(f"{name:<6} {file[:28]:<28} {count:>5} {cells}")


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

    from electra.pll.nbest import OWN_HYP_FIELDS, read_nbest, write_nbest
    from electra.pll.ngram import KneserNeyLM, corpus_sentences, normalize_words

    from electra.data.corpus import read_documents

    if args.order < 1:
        raise UserError(f"--order {args.order}: give 1 or more.")
    # A field the lists or `rescore` already give a meaning: `--field score` replaced every recognizer score with
    # the n-gram's, and `--field text` every hypothesis's words with a number, in the lists written.
    reserved = dict.fromkeys([*OWN_HYP_FIELDS, *COMPUTED_FEATURES])
    if not args.field.strip() or args.field in reserved or args.field.startswith("pll:"):
        raise UserError(
            f"--field {args.field!r}: that name is taken ({', '.join(reserved)} and pll:NAME are the hypotheses' "
            "own or computed features); choose another, e.g. --field ngram."
        )
    if not Path(args.corpus).exists():
        raise UserError(f"{args.corpus}: corpus does not exist.")
    out_dir = Path(args.output_dir)
    targets = [out_dir / Path(p).name for p in args.nbest]
    # Lists are written under their own file name: two of one name (a/dev.json, b/dev.json) were both written to
    # OUTPUT/dev.json, the first one lost.
    clash = next((t for t in targets if targets.count(t) > 1), None)
    if clash is not None:
        inputs = [p for p, t in zip(args.nbest, targets) if t == clash]
        raise UserError(
            f"--nbest {' and '.join(inputs)} would both be written as {clash}; give each list once, and rename "
            "one of two lists that share a file name (or annotate them in separate runs)."
        )
    if any(t.resolve() == Path(p).resolve() for t, p in zip(targets, args.nbest)):
        raise UserError(f"--output {out_dir}: would overwrite the input lists; choose another directory.")
    refuse_to_replace(targets, args.overwrite)
    lists = [(path, *read_nbest(path)) for path in args.nbest]
    started = time.perf_counter()
    lm = KneserNeyLM(args.order)
    try:
        lm.fit(corpus_sentences(read_documents(args.corpus)))
    except ValueError:
        if lm.sentences:
            raise
        # An empty corpus, or one of digits and punctuation only, was a ValueError traceback from the counting.
        raise UserError(
            f"{args.corpus}: holds no words to count (the n-gram reads words of letters, lowercased, as the "
            "lists' references are); give a corpus of running text."
        ) from None
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
    from electra.pll.asr import decode_nbest, read_transcription
    from electra.pll.nbest import write_nbest
    from electra.pll.rescore import first_best, oracle_best
    from electra.pll.wer import corpus_wer

    if args.nbest < 1:
        raise UserError("--nbest must be at least 1.")
    refs_path = Path(args.refs) if args.refs else Path(args.audio) / "transcription"
    check_output_file(args.output, args.overwrite, example="nbest.json", reads={"--refs": str(refs_path)})
    if args.refs:
        require_file(refs_path, "references file")
    audio = Path(args.audio)
    if not audio.is_dir():
        raise UserError(f"{audio}: audio directory does not exist; give the folder of the .wav files.")
    stems = [wav.stem for wav in sorted(audio.glob("*.wav"))]
    if not stems:
        raise UserError(f"{audio}: no .wav files.")
    refs = read_transcription(refs_path) if refs_path.is_file() else None
    if refs is not None:
        _check_refs_match(refs_path, refs, stems)
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


def _check_refs_match(path: Path, refs: dict[str, str], stems: list[str]) -> None:
    """References are found by the wav file's name: a file whose ids match none of them (another corpus, ids
    with a speaker prefix) was used silently, the lists written without a single 'ref' and no WER printed, after
    the whole decoding. None matching is refused before decoding; some missing is said on standard error."""
    missing = [stem for stem in stems if stem not in refs]
    if len(missing) == len(stems):
        first = next(iter(refs), None)
        theirs = f" (its first is {first!r})" if first is not None else " (it holds none)"
        raise UserError(
            f"{path}: none of its utterance ids{theirs} is the name of a .wav file (the first is "
            f"{stems[0]!r}); the id is the wav file's name without .wav: give the references of these files."
        )
    if missing:
        print(
            f"warning: {path}: {len(missing)} of {len(stems)} .wav files have no reference (first: "
            f"{missing[0]!r}); their lists get no 'ref' and the WER leaves them out",
            file=sys.stderr,
        )
