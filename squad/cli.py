"""`electra squad` (fine-tune and evaluate) and `electra squad-eval` (the official evaluation on its own)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from electra.core.flags import add_output_option, add_setting_flags, flag_values
from electra.core.overwrite import check_output_file, refuse_to_replace, refuse_unowned, start_over
from electra.squad.settings import SquadSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "squad",
        help="fine-tune a checkpoint on SQuAD 1.1/2.0 and report the official EM/F1",
        description="Fine-tune an ELECTRA/BERT checkpoint (a Hugging Face directory with its tokenizer) on SQuAD with "
        "ELECTRA's XLNet-style span head, then evaluate with the official metrics. Writes OUTPUT/model, "
        "predictions.json, nbest_predictions.json, null_odds.json (2.0) and results.json.",
    )
    add_setting_flags(parser, SquadSettings, declared_defaults=True)
    parser.add_argument(
        "--answerable",
        choices=("auto", "on", "off"),
        default="auto",
        help="answerability classifier (auto: on for 2.0)",
    )
    add_output_option(parser, "output", "output directory (default: squad_output)", default="squad_output")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    parser.set_defaults(func=run, several_processes=True)

    ev = subparsers.add_parser(
        "squad-eval",
        help="the official SQuAD 1.1/2.0 evaluation of a predictions file",
        description="Score predictions (JSON qid -> text) against an official SQuAD file; prints the result JSON.",
    )
    ev.add_argument("--data", required=True, help="the official dataset JSON")
    ev.add_argument("--predictions", required=True, help="predictions JSON: {question id: answer text}")
    ev.add_argument("--na-probs", help="2.0: JSON {question id: no-answer score}; adds the best thresholds")
    ev.add_argument(
        "--na-prob-thresh", type=float, default=1.0, help="2.0: predict no answer above this score"
    )
    ev.add_argument("--version", choices=("1.1", "2.0"), help="default: the data file's version field")
    ev.add_argument("--output", "--out", dest="out", help="also write the result JSON here")
    ev.set_defaults(func=run_eval)


# What an evaluation writes in --output; a run that trains also writes model/ and train/.
SQUAD_EVAL_OUTPUTS = ("results.json", "predictions.json", "nbest_predictions.json", "null_odds.json")


def prepare_output(settings, overwrite: bool) -> dict:
    """What `electra squad` and `electra.finetune_squad` check before any work, in this order: an earlier run's
    results in the output (refused unless `overwrite` or `settings.resume`), the model and data files; then, the
    inputs being sound, `overwrite` deletes the earlier run's files (never a user's). Returns the questions read
    (`electra.squad.inputs.check_inputs`)."""
    from electra.core.errors import UserError
    from electra.data.tokenization import require_tokenizer
    from electra.export.layout import finetune_dir, require_safetensors
    from electra.squad.inputs import check_inputs, check_model_fits

    produced = SQUAD_EVAL_OUTPUTS + (("model", "train") if settings.train else ())
    if settings.resume and settings.train is None:
        # nothing trains, so there is nothing to continue: it had skipped the check below and replaced the
        # earlier results unasked
        raise UserError("--resume continues training; without --train there is nothing to resume: drop it.")
    # a user's own files under names a run writes (no run.json beside them) are named as theirs first: a --resume
    # into their folder had written the run into their model/ and train/, and the refusal below suggested an
    # --overwrite that then refused them
    refuse_unowned(settings.output, produced)
    if not settings.resume:  # --resume is offered only where there is training to continue
        paths = [Path(settings.output) / name for name in produced]
        refuse_to_replace(paths, overwrite, resume_hint=settings.train is not None)
    parsed = check_inputs(settings)
    if settings.train is not None:  # pickled weights: refused before run.json is written
        require_safetensors(finetune_dir(settings.model))
    # where there is none, AutoTokenizer makes an empty one (a hub name is answered by electra.squad.inputs.load_tokenizer)
    tokenizer = Path(settings.tokenizer or finetune_dir(settings.model))
    if tokenizer.is_dir():
        require_tokenizer(tokenizer)
    check_model_fits(settings)
    if not settings.resume:  # the inputs are sound: only now does --overwrite delete the earlier run
        reads = (settings.model, settings.tokenizer, settings.train, settings.eval)
        start_over(settings.output, produced, overwrite, reads=reads)
    return parsed


def run(args: argparse.Namespace) -> int:
    import logging

    from electra.squad.train import finetune

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    answerable = {"auto": None, "on": True, "off": False}[args.answerable]
    values = flag_values(SquadSettings, args)
    settings = SquadSettings(output=args.output, answerable=answerable, **values)
    parsed = prepare_output(settings, args.overwrite)
    results = finetune(settings, parsed)
    if "eval" in results:
        print(json.dumps(results["eval"], indent=2))
    _say_where(Path(settings.output), SQUAD_EVAL_OUTPUTS + ("model", "train"))
    return 0


def _say_where(output: Path, names: tuple[str, ...]) -> None:
    """Where the run wrote, on stderr (stdout is the scores' JSON): without --output it is ./squad_output, which
    nothing had said."""
    import sys

    from electra.training.processes import process_state

    written = [name + ("/" if (output / name).is_dir() else "") for name in names if (output / name).exists()]
    if written and process_state().is_main_process:
        print(f"wrote {', '.join(written)} in {output}", file=sys.stderr)


def run_eval(args: argparse.Namespace) -> int:
    """Scores what the official script scores: gold answers straight from the file. Whatever this library's reader
    would refuse to train on (an answer_start that misses its text, a 1.1 file under --version 2.0) is a warning."""
    import sys

    from electra.core.errors import UserError
    from electra.core.files import write_text_atomically
    from electra.squad.data import load_squad_json, read_squad
    from electra.squad.metrics import evaluate_v1, evaluate_v2, gold_answers

    if args.out:
        # before any work, and never one of the files read: `--output dev-v1.1.json` had replaced the dataset with
        # the scores, and a folder or an unwritable path was a traceback once scoring was done. An earlier result
        # is replaced, as this command always has (it has no --overwrite).
        reads = {"--data": args.data, "--predictions": args.predictions, "--na-probs": args.na_probs}
        check_output_file(args.out, overwrite=True, example="results.json", reads=reads)
    payload = load_squad_json(args.data)
    file_version = "2.0" if str(payload.get("version", "")).lstrip("v").startswith("2") else "1.1"
    version = args.version or file_version
    try:
        golds = gold_answers(payload["data"])
    except (KeyError, TypeError) as exc:
        # the reader names the article, paragraph or question and the field (a TypeError's own text read as
        # "missing string indices must be integers")
        read_squad(args.data, file_version)
        raise UserError(f"{args.data}: not a SQuAD file ({exc}); expected data/paragraphs/qas.") from None
    if version != file_version:
        print(f"warning: {args.data} says version {file_version}; scoring it as {version}", file=sys.stderr)
    try:
        read_squad(args.data, file_version)
    except UserError as exc:
        print(f"warning: {exc} (scored anyway, as the official script does)", file=sys.stderr)
    predictions = _load_mapping(args.predictions, str)
    unknown = [qid for qid in predictions if qid not in golds]
    if unknown:
        raise UserError(
            f"{args.predictions}: question {unknown[0]} is not in {args.data} ({len(unknown)} unknown ids)."
        )
    if version == "1.1":
        if args.na_probs:
            raise UserError(
                "--na-probs is for SQuAD 2.0; this is a 1.1 evaluation (pass --version 2.0 if needed)."
            )
        result = evaluate_v1(golds, predictions)
    else:
        na_probs = _load_mapping(args.na_probs, (int, float)) if args.na_probs else None
        if na_probs is not None:
            _require_na_probs_match(args.na_probs, na_probs, args.data, golds, args.predictions, predictions)
        result = evaluate_v2(golds, predictions, na_probs, args.na_prob_thresh)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        write_text_atomically(args.out, text + "\n")
    return 0


def _require_na_probs_match(
    path: str, na_probs: dict, data: str, golds: dict, preds_path: str, preds: dict
) -> None:
    """--na-probs must be the scores of these questions: a file for another data set (ids unknown) had scored every
    question as 0.0 in silence, and so did a question answered without a score (the official script's KeyError)."""
    from electra.core.errors import UserError

    unknown = [qid for qid in na_probs if qid not in golds]
    if unknown:
        raise UserError(
            f"{path}: question {unknown[0]} is not in {data} ({len(unknown)} unknown ids); give the null_odds.json "
            "written with these predictions."
        )
    missing = [qid for qid in preds if qid not in na_probs]
    if missing:
        raise UserError(
            f"{path}: no no-answer score for question {missing[0]}, which {preds_path} answers ({len(missing)} "
            "missing); give the null_odds.json written with these predictions."
        )


def _load_mapping(path: str, kind: type | tuple[type, ...]) -> dict:
    from electra.core.errors import UserError
    from electra.core.files import require_file
    from electra.squad.data import read_json_file

    file = require_file(path, "JSON file")
    mapping = read_json_file(file, "expected a JSON object {question id: value}.")
    if not isinstance(mapping, dict):
        raise UserError(f"{path}: expected a JSON object {{question id: value}}.")
    wanted = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    for qid, value in mapping.items():
        if isinstance(value, bool) or not isinstance(value, kind):
            shown = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
            hint = (
                " (is this nbest_predictions.json? give predictions.json)" if isinstance(value, list) else ""
            )
            raise UserError(f"{path}: question {qid}: value {shown} is not a {wanted}{hint}.")
        # JSON's NaN or Infinity: no threshold can be tuned on it (a ValueError traceback in the threshold search)
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{path}: question {qid}: value {value} is not a finite number.")
    return mapping
