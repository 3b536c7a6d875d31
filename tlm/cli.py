"""`electra tlm retrieve | texts | train | sciie`: TLM's retrieval step, a task's texts as a corpus, its two-stage
training, and the SciERC task builder."""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Mapping
from dataclasses import field, make_dataclass
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.flags import (
    add_output_option,
    add_setting_flags,
    flag_values,
    flagged_fields,
    require_counts,
)
from electra.core.overwrite import refuse_to_replace, refuse_unowned, start_over
from electra.core.settings import COUNT, NOT_NEGATIVE_COUNT, declaration
from electra.tlm.declared import TASK_ONLY, TLMDeclared
from electra.tlm.outputs import TLM_OUTPUTS, refuse_missing_resume

# Flags that act only under a condition are None until given, so that one given where it cannot act is refused
# (`refuse_unused`) instead of being ignored in silence; not given, the setting keeps its declared default
# (`electra.tlm.declared.TLMDeclared`). `tartan`'s META_FLAGS follow the same pattern.
LM_FLAGS = ("rho1", "rho2")  # `tlm train` with an LM objective (not --objective none)
# `tlm train` and `tartan` with --finetune-epochs N > 0
FINETUNE_FLAGS = ("finetune_lr", "finetune_layer_decay", "finetune_batch_size")
# The settings `tlm train` takes from flags of their own names, in --help's order.
TRAIN_SETTINGS = (
    "retrieved",
    "objective",
    "size",
    "config_file",
    *LM_FLAGS,
    "batch_size",
    "steps",
    "flops_budget",
    "finetune_epochs",
    *FINETUNE_FLAGS,
    "vocab",
    "init_from",
    "eval_every",
    "metric",
    "seed",
    "cache_dir",
    "save_every",
    "resume",
)
ISS_DEFAULTS = {  # `tlm retrieve --select iss`: its reference model
    "objective": "electra",
    "size": "tiny",
    "reference_steps": 100,
    "reference_lr": 1e-4,
    "iss_layer": "-1",
    "iss_batch_size": 16,
    "seed": 42,
}
# ISS-only flags with no default at all (None, or an empty list for --set)
ISS_ONLY = ("task_dev", "init_from", "vocab", "set")
FINETUNE_UNUSED = (
    "{flag} is for the fine-tuning epochs, and --finetune-epochs 0 runs none; give --finetune-epochs N or drop "
    "{flag}."
)
TASK_FILES = ("task_train", "task_dev", "task_test")


def command_settings(
    name: str,
    settings: tuple[str, ...],
    until_given: Collection[str] = (),
    defaults: Mapping[str, Any] | None = None,
    choices: Mapping[str, tuple[str, ...]] | None = None,
    helps: Mapping[str, str] | None = None,
) -> type:
    """The flags a command takes of `TLMDeclared`'s settings, as a dataclass for `add_setting_flags` and
    `flag_values`: the declarations of `settings`, in that order, with the command's own `defaults`, narrower
    `choices` and `helps` (its own words for a setting) where it has them. Each help ends in the value the setting
    takes when its flag is not given. The flags of `until_given` default to None in argparse, so that "given" can
    be told from "not given"."""
    columns = []
    for setting_name in settings:
        spec = declaration(TLMDeclared, setting_name)
        default = (defaults or {}).get(setting_name, spec.default)
        metadata = {**spec.metadata, "help": (helps or {}).get(setting_name, spec.metadata["help"])}
        if default is not None and not isinstance(default, bool):
            metadata["help"] = f"{metadata['help']} (default {default})"
        if setting_name in (choices or {}):
            metadata["choices"] = choices[setting_name]
        flag_default = None if setting_name in until_given else default
        columns.append((setting_name, spec.type, field(default=flag_default, metadata=metadata)))
    return make_dataclass(name, columns)


TRAIN_FLAGS = command_settings("TrainFlags", TRAIN_SETTINGS, until_given=(*LM_FLAGS, *FINETUNE_FLAGS))


def with_default(text: str, defaults: dict, name: str) -> str:
    """A help line ending in the value a None-until-given flag takes when it is not given."""
    return f"{text} (default {defaults[name]})"


def given_flags(args: argparse.Namespace, names) -> list[str]:
    """Which of `names` (argparse dests whose default is None, or an empty list) the user gave."""
    return [name for name in names if getattr(args, name, None) not in (None, [])]


def refuse_unused(args: argparse.Namespace, names, acts: bool, why: str) -> None:
    """When the flags `names` cannot act (`acts` false), the first of them the user gave is refused in one line:
    `why`, with `{flag}` standing for it. Ignored in silence, a user's setting had changed nothing."""
    if acts:
        return
    given = given_flags(args, names)
    if given:
        raise UserError(why.format(flag="--" + given[0].replace("_", "-")))


def fill_defaults(args: argparse.Namespace, defaults: dict) -> None:
    """The one place a None-until-given flag of `tlm retrieve` gets its default: every name of `defaults` the
    parser has and the user did not give."""
    for name, value in defaults.items():
        if hasattr(args, name) and getattr(args, name) is None:
            setattr(args, name, value)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tlm",
        help="TLM: retrieve a task-relevant corpus with BM25, then train task + LM jointly from scratch",
        description="Task-driven language modelling (Yao et al., 2022) with mlm, electra or electric as the LM.",
    )
    sub = parser.add_subparsers(dest="tlm_command", metavar="STEP")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    add_retrieve_parser(sub)
    add_texts_parser(sub)
    add_train_parser(sub)
    add_sciie_parser(sub)


def add_retrieve_parser(sub) -> None:
    retrieve = sub.add_parser(
        "retrieve", help="BM25 top-K passages of a general corpus for every task example"
    )
    retrieve.add_argument(
        "--corpus",
        required=True,
        nargs="+",
        action="extend",
        help="general corpus: text files, folders, .jsonl files or saved datasets (several are indexed together)",
    )
    retrieve.add_argument(
        "--task-train", required=True, help="task training file whose texts are the queries"
    )
    retrieve.add_argument("--top-k", type=int, default=50, help="passages per query (the paper: 50 to 5000)")
    add_output_option(
        retrieve, "out", "output folder: corpus/retrieved.txt, retrieved.jsonl, summary.json", required=True
    )
    retrieve.add_argument(
        "--index", default=None, help="index folder (built once, reused; default OUT/index)"
    )
    retrieve.add_argument("--passage-words", type=int, default=128, help="maximum words per indexed passage")
    retrieve.add_argument("--min-passage-words", type=int, default=5, help="shorter passages are not indexed")
    retrieve.add_argument(
        "--long-query-words", type=int, default=64, help="longer inputs query with RAKE keywords"
    )
    retrieve.add_argument(
        "--keyword-words", type=int, default=32, help="words of RAKE keywords per long query"
    )
    retrieve.add_argument(
        "--select",
        choices=["bm25", "iss"],
        default="bm25",
        help="bm25: the top-K union; iss: influence-based subset of that union (Wang et al., 2023)",
    )
    retrieve.add_argument(
        "--select-size",
        type=int,
        default=None,
        help="passages to keep (bm25: its best-ranked ones; iss: required, at most the top-K pool)",
    )
    add_iss_flags(retrieve.add_argument_group("ISS reference model (with --select iss)"))
    add_task_columns(retrieve)
    retrieve.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    retrieve.set_defaults(func=run_retrieve)


def add_iss_flags(iss) -> None:
    """`tlm retrieve`'s flags for ISS's reference model. Those of ISS_DEFAULTS are None until given, so that one
    given with --select bm25 is refused (`check_retrieve_flags`); ISS_DEFAULTS holds their values when not given."""
    iss.add_argument(
        "--task-dev", default=None, help="task validation file: the batches influence is measured on"
    )
    iss.add_argument("--init-from", default=None, help="checkpoint the reference model starts from")
    iss.add_argument(
        "--objective",
        help=with_default("LM objective of the joint loss (registry)", ISS_DEFAULTS, "objective"),
    )
    iss.add_argument(
        "--size", help=with_default("model size preset when not --init-from", ISS_DEFAULTS, "size")
    )
    add_set_flag(iss, "config override")
    iss.add_argument(
        "--reference-steps",
        type=int,
        help=with_default("joint task + LM steps of the reference model", ISS_DEFAULTS, "reference_steps"),
    )
    iss.add_argument(
        "--reference-lr",
        type=float,
        help=with_default("peak learning rate of the reference model", ISS_DEFAULTS, "reference_lr"),
    )
    iss.add_argument(
        "--iss-layer", help="encoder layer index or parameter-name prefix (default -1: the last layer)"
    )
    iss.add_argument(
        "--iss-batch-size",
        type=int,
        help=with_default("passages (and dev rows) per gradient batch", ISS_DEFAULTS, "iss_batch_size"),
    )
    iss.add_argument("--vocab", default=None, help="vocab.txt for a reference trained from scratch")
    iss.add_argument("--seed", type=int, help=with_default("seed of the reference run", ISS_DEFAULTS, "seed"))


def add_texts_parser(sub) -> None:
    texts = sub.add_parser("texts", help="a task file's texts as a corpus (for TAPT with `electra pretrain`)")
    texts.add_argument("--task", required=True, help="task TSV, CSV or JSONL")
    add_output_option(texts, "out", "folder for corpus/task_texts.txt", required=True)
    add_task_columns(texts)
    texts.add_argument("--overwrite", action="store_true", help="replace an earlier corpus in the output")
    texts.set_defaults(func=run_texts)


def add_train_parser(sub) -> None:
    """`tlm train`'s flags: the task files and the output by hand, every other setting built from its declaration
    (TRAIN_FLAGS). --rho1/--rho2 and the --finetune-* settings are None until given, so that one given where it
    cannot act (--objective none, --finetune-epochs 0) is refused (`check_train_flags`)."""
    train = sub.add_parser("train", help="stage 1: task + LM jointly; stage 2: task alone; report dev/test")
    add_task_files(train)
    add_output_option(train, "out", "output folder", default="runs/tlm")
    add_setting_flags(train, TRAIN_FLAGS, declared_defaults=True)
    add_set_flag(train, "config override (repeatable)")
    add_task_columns(train)
    train.add_argument(
        "--overwrite", action="store_true", help="replace what an earlier run left in the output"
    )
    train.set_defaults(func=run_train, several_processes=True)


def add_sciie_parser(sub) -> None:
    sciie = sub.add_parser(
        "sciie", help="build DSP's sciie relation-classification task from SciERC jsonl files"
    )
    sciie.add_argument(
        "--scierc", required=True, help="folder with SciERC train.json, dev.json, test.json (DyGIE form)"
    )
    add_output_option(sciie, "out", "folder for train/dev/test.jsonl with text and label", required=True)
    sciie.add_argument("--overwrite", action="store_true", help="replace splits an earlier run wrote there")
    sciie.set_defaults(func=run_sciie)


def add_task_files(parser: argparse.ArgumentParser) -> None:
    """The three task splits `tlm train` and `tartan` require, with their declared help."""
    for name in TASK_FILES:
        help = declaration(TLMDeclared, name).metadata["help"]
        parser.add_argument("--" + name.replace("_", "-"), dest=name, required=True, help=help)


def add_set_flag(parser, help: str) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def add_task_columns(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--text-column", default=None, help="text column name(s) or 0-based index(es), comma-separated"
    )
    parser.add_argument("--label-column", default=None, help="label column name or 0-based index")
    parser.add_argument(
        "--header", choices=["auto", "yes", "no"], default="auto", help="does the TSV/CSV have a header"
    )
    parser.add_argument(
        "--task-format", choices=["tsv", "csv", "jsonl"], default=None, help="default: from the suffix"
    )


TLM_READS = ("retrieved", "dapt_corpus", "init_from", "vocab", "task_train", "task_dev", "task_test")


def check_train_flags(args) -> None:
    """`tlm train`'s flags that would be ignored in silence are refused: --rho1/--rho2 weigh the LM objective,
    which --objective none does not train, and the --finetune-* settings act only with --finetune-epochs N."""
    refuse_unused(
        args,
        LM_FLAGS,
        args.objective != TASK_ONLY,
        f"{{flag}} weighs the LM objective, which --objective {TASK_ONLY} does not train; choose an LM "
        "--objective or drop {flag}.",
    )
    # a negative --finetune-epochs is refused on its own (`settings_from_flags`), not as "0"
    refuse_unused(args, FINETUNE_FLAGS, args.finetune_epochs != 0, FINETUNE_UNUSED)


def settings_from_flags(args, command_flags: type, **given: Any):
    """The `electra.tlm.settings.TLMSettings` of `tlm train` or `tartan`: the values of `command_flags` that were
    given or have a default (a None-until-given flag not given leaves its setting at the declared default), the
    task files, the output and `given` (the settings a command derives from flags of other names).

    Every setting is checked there, in one line naming it. A count that sizes the run is refused first, naming the
    flag the user typed (0 steps is a typo, not "unset", and a negative budget is no budget), with its declared
    range."""
    for spec in flagged_fields(command_flags):
        value, within = getattr(args, spec.name), spec.metadata["within"]
        if within in (COUNT, NOT_NEGATIVE_COUNT) and value is not None and not within[0](value):
            raise UserError(f"{spec.metadata['flags'][0]} must {within[1]}, got {value}.")
    from electra.tlm.settings import TLMSettings

    values = {name: value for name, value in flag_values(command_flags, args).items() if value is not None}
    files = {name: getattr(args, name) for name in (*TASK_FILES, "out")}
    return TLMSettings(**files, **values, **given, progress=not args.no_progress, **column_kwargs(args))


def refuse_to_replace_run(args) -> None:
    """Before any work for `tlm train` / `tartan`: a --resume finds a run to continue, and a finished or started
    output is kept unless --resume or --overwrite."""
    if args.resume and args.overwrite:  # --overwrite had been ignored in silence under --resume
        raise UserError(
            "--resume continues the run in --output and --overwrite deletes it; give one of them."
        )
    refuse_missing_resume(args.out, args.resume)  # as `train_tlm` refuses it
    if not args.resume:
        refuse_unowned(args.out, TLM_OUTPUTS)
        refuse_to_replace([Path(args.out) / name for name in TLM_OUTPUTS], args.overwrite, resume_hint=True)


def start_over_run(args) -> None:
    """Once the flags are read, before any work: the inputs must exist, and only then does --overwrite delete the
    earlier run in --out (`electra.core.overwrite.start_over`), so that a mistyped path costs no results."""
    from electra.core.files import require_file

    reads = [getattr(args, name, None) for name in TLM_READS]
    for name, path in zip(TLM_READS, reads):
        if path is not None and name.startswith("task_"):
            require_file(path, "task file")  # a folder here would pass `exists` and fail after --overwrite
        elif path is not None and not Path(path).exists():  # named with its flag: two of them may be folders
            raise UserError(f"--{name.replace('_', '-')} {path}: no such file or directory; check the path.")
    if not args.resume:
        start_over(args.out, TLM_OUTPUTS, args.overwrite, reads)


def column_kwargs(args) -> dict:
    from electra.tlm.tasks import parse_columns

    label = parse_columns(args.label_column)
    return {
        "text_columns": parse_columns(args.text_column),
        "label_column": label[0] if label else None,
        "header": {"auto": None, "yes": True, "no": False}[args.header],
    }


def check_retrieve_flags(args) -> None:
    """The ISS reference model's flags, given with --select bm25 (which trains none), were ignored without a word;
    now refused in one line. Then the defaults of those not given are filled in."""
    refuse_unused(
        args,
        (*ISS_ONLY, *ISS_DEFAULTS),
        args.select == "iss",
        "{flag} is for the ISS reference model, which --select bm25 does not train; add --select iss (with "
        "--task-dev and --select-size) or drop {flag}.",
    )
    fill_defaults(args, ISS_DEFAULTS)


def run_retrieve(args) -> int:
    from electra.tlm.retrieval import CORPUS_SUBDIR, PROVENANCE_FILE, SUMMARY_FILE
    from electra.tlm.selection import CorpusSelection, select_corpus
    from electra.tlm.tasks import read_task_file

    # every name the selection writes in OUT, not only corpus/: a summary.json or retrieved.jsonl of the user's
    # there was replaced in silence (and ISS's reference run writes OUT/reference/)
    out = Path(args.out)
    produced = [out / CORPUS_SUBDIR, out / PROVENANCE_FILE, out / SUMMARY_FILE]
    refuse_to_replace(produced + ([out / "reference"] if args.select == "iss" else []), args.overwrite)
    if args.select == "iss" and (args.task_dev is None or args.select_size is None):
        raise UserError("--select iss needs --task-dev (the validation batches) and --select-size.")
    check_retrieve_flags(args)
    # Before the index is built (an hour on a large corpus): `--top-k 0` was refused only after it, and
    # `--passage-words 0` never returned (`split_passages` cut empty windows forever); `--reference-steps 0`
    # meant "unset" and trained the size's max_steps, `--iss-batch-size 0` ended in a traceback.
    require_counts(args, ("top_k", "passage_words"), optional=("select_size",))
    if args.select == "iss":
        require_counts(args, ("reference_steps", "iss_batch_size"))
    examples = read_task_file(args.task_train, fmt=args.task_format, **column_kwargs(args))
    iss = args.select == "iss"
    selection = CorpusSelection(
        corpus=args.corpus,
        task_train=args.task_train,
        out=args.out,
        index_dir=Path(args.index) if args.index else out / "index",
        top_k=args.top_k,
        passage_words=args.passage_words,
        min_passage_words=args.min_passage_words,
        long_query_words=args.long_query_words,
        keyword_words=args.keyword_words,
        select_size=args.select_size,
        reference=_reference_settings(args) if iss else None,
        iss_layer=_iss_layer(args) if iss else -1,
        iss_batch_size=args.iss_batch_size,
        progress=not args.no_progress,
    )
    print(select_corpus(selection, [e.text for e in examples]))
    return 0


def _iss_layer(args) -> int | str:
    return int(args.iss_layer) if args.iss_layer.lstrip("-").isdigit() else args.iss_layer


def _reference_settings(args):
    """The `electra.tlm.settings.TLMSettings` of ISS's reference run, in OUT/reference."""
    from electra.core.config_files import parse_overrides
    from electra.tlm.settings import TLMSettings

    return TLMSettings(
        task_train=args.task_train,
        task_dev=args.task_dev,
        task_test=args.task_dev,
        out=str(Path(args.out) / "reference"),
        objective=args.objective,
        size=args.size,
        overrides=parse_overrides(args.set),
        rho1=0,
        rho2=1.0,
        steps=args.reference_steps,
        finetune_epochs=0,
        vocab=args.vocab,
        task_format=args.task_format,
        seed=args.seed,
        init_from=args.init_from,
        learning_rate=args.reference_lr,
        progress=not args.no_progress,
        **column_kwargs(args),
    )


def run_texts(args) -> int:
    from electra.tlm.task_files import write_task_texts
    from electra.tlm.tasks import read_task_file

    out = Path(args.out) / "corpus" / "task_texts.txt"
    refuse_to_replace([out], args.overwrite)
    examples = read_task_file(args.task, fmt=args.task_format, **column_kwargs(args))
    count = write_task_texts(examples, args.task, out)
    print(f"{count} task texts -> {out}")
    return 0


def run_train(args) -> int:
    check_train_flags(args)
    from electra.core.config import with_frozen_generator
    from electra.core.config_files import parse_overrides
    from electra.tlm.train import train_tlm

    overrides = with_frozen_generator(parse_overrides(args.set))
    settings = settings_from_flags(args, TRAIN_FLAGS, overrides=overrides)
    refuse_to_replace_run(args)
    start_over_run(args)
    results = train_tlm(settings)
    print(
        json.dumps(
            {k: results[k] for k in ("objective", "stage1_steps", "stage1_flops", "dev", "test")}, indent=2
        )
    )
    return 0


def run_sciie(args) -> int:
    """All three splits are read before any is written, and written whole (`write_text_atomically`): before, a
    missing dev.json stopped the run after train.jsonl was written, and existing splits in --out (a user's own
    train.jsonl) were replaced without --overwrite."""
    from electra.tlm.task_files import write_sciie_splits

    source, out = Path(args.scierc), Path(args.out)
    splits = ("train", "dev", "test")
    for split in splits:
        if not (source / f"{split}.json").is_file():
            raise UserError(
                f"{source / f'{split}.json'}: missing; --scierc needs train.json, dev.json and test.json."
            )
    refuse_to_replace([out / f"{split}.jsonl" for split in splits], args.overwrite)
    write_sciie_splits(source, out, splits)
    return 0
