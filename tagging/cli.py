"""`electra tag`: fine-tune a checkpoint to tag the words of CoNLL-style column files and report span F1 (or token
accuracy) over seeds."""

from __future__ import annotations

import argparse
from pathlib import Path

from electra.core.errors import UserError
from electra.core.flags import (
    DefaultsHelpFormatter,
    add_output_option,
    add_setting_flags,
    flag_values,
    require_counts,
)
from electra.core.overwrite import refuse_unowned, start_over
from electra.tagging.settings import TagSettings

DESCRIPTION = """Fine-tune any local ELECTRA or BERT checkpoint (or a pretraining run of this library) to tag the
words of CoNLL-style column files: chunking, named entities, part of speech. Each word's label sits on its first
piece; the optimizer is GLUE's (layer-wise decay, learning rate by model size). Reports span F1 for BIO/BIOES labels
(the conlleval convention, as seqeval computes it) or token accuracy otherwise, as the median over seeds."""

TAG_OUTPUTS = (
    "results.json",
    "results.md",
    "runs",
    "model",
    "dev.predictions.txt",
    "test.predictions.txt",
)  # what a run writes in --output


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tag",
        help="fine-tune a checkpoint as a sequence tagger (chunking, NER, POS)",
        description=DESCRIPTION,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model", required=True, help="Hugging Face checkpoint directory, or a pretraining run directory"
    )
    parser.add_argument("--train", required=True, help="training column file (its labels are the label set)")
    parser.add_argument(
        "--dev", required=True, help="column file scored after training (picks the best seed)"
    )
    parser.add_argument("--test", default=None, help="another column file to score and tag")
    add_output_option(
        parser, "output", "write results, predictions and the best seed's model here", default=None
    )
    parser.add_argument("--seeds", type=int, default=1, help="fine-tuning runs; the median is reported")
    parser.add_argument("--seed", type=int, default=1, help="first seed; runs use seed, seed+1, ...")
    add_setting_flags(parser, TagSettings, declared_defaults=True)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the seeds OUTPUT already finished and continue an interrupted one from its checkpoint",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the results an earlier run left in the output"
    )
    parser.set_defaults(func=run)


def refuse_foreign_run(output: Path) -> None:
    """An --output holding another command's run is refused, with or without --overwrite or --resume: a tagging
    run there would write its run.json over that run's record, and --overwrite would delete names both write."""
    from electra.core.files import read_json_record

    record = read_json_record(output / "run.json") if (output / "run.json").is_file() else None
    if record and record.get("command") != "tag":
        raise UserError(
            f"{output} holds another command's run ({output / 'run.json'} is not one `electra tag` wrote); a "
            "tagging run there would replace or delete that run's files: choose another --output."
        )


def run(args: argparse.Namespace) -> int:
    from electra.core.files import require_file
    from electra.data.tokenization import require_tokenizer
    from electra.export.layout import finetune_dir, require_safetensors
    from electra.finetune.models import resolve_model_dir
    from electra.finetune.recipe import check_seeds
    from electra.tagging.conll import read_conll
    from electra.tagging.finetune import run_tag

    require_counts(args, ("seeds",))
    settings = TagSettings(**flag_values(TagSettings, args), progress=not args.no_progress)
    if (args.resume or settings.save_every) and not args.output:
        raise UserError("--save-every and --resume need --output DIR.")
    seeds = [args.seed + i for i in range(args.seeds)]
    check_seeds(seeds)
    files = [("--train", args.train), ("--dev", args.dev)] + ([("--test", args.test)] if args.test else [])
    for flag, path in files:  # each file read once before any work: a bad line is one line naming it
        read_conll(require_file(path, f"{flag} column file"), settings.columns, settings.label)
    if settings.unlabeled is not None and not Path(settings.unlabeled).exists():
        raise UserError(
            f"--unlabeled {settings.unlabeled} does not exist; give a corpus of text (a file or folder)."
        )
    model_dir = resolve_model_dir(args.model)
    require_safetensors(model_dir)
    require_tokenizer(finetune_dir(args.model))
    if args.output:
        output = Path(args.output)
        refuse_foreign_run(output)
        refuse_unowned(output, TAG_OUTPUTS)
        if not args.resume:  # the inputs are sound: only now does --overwrite delete an earlier run
            start_over(output, TAG_OUTPUTS, args.overwrite, reads=(args.model, *(p for _, p in files)))
    run_tag(
        args.model,
        args.train,
        args.dev,
        settings,
        seeds,
        test=args.test,
        output_dir=args.output,
        resume=args.resume,
    )
    return 0
