"""`electra probe`: linear probes of one or more frozen encoders, printed as a table and written as JSON."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import write_json_atomically
from electra.core.flags import DefaultsHelpFormatter, add_output_option, require_counts
from electra.core.overwrite import refuse_to_replace, refuse_to_replace_an_input, refuse_unwritable_directory

DESCRIPTION = """Fit a linear probe (logistic regression by L-BFGS) on the frozen last layer of each --model and
report its dev accuracy over seeds: sst2 (sentiment from the mean of the tokens) and pos (Brown part-of-speech tags
from each word's first piece). Cheap and low-noise where GLUE fine-tuning on small budgets is not; compare against
--random-baseline, a randomly initialised copy of the first model."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "probe",
        help="linear probes (sst2, pos) of frozen encoders",
        description=DESCRIPTION,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        help="checkpoint directory or pretraining run (its export.json); repeat for several",
    )
    parser.add_argument("--probes", default="sst2,pos", help="comma list of probes: sst2, pos")
    parser.add_argument(
        "--data", default=None, help="folder holding glue/SST-2/ and corpus/brown/ (None: $ELECTRA_DATA)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="probe fits per model; the median is reported")
    parser.add_argument("--seed", type=int, default=1, help="first seed; fits use seed, seed+1, ...")
    parser.add_argument(
        "--max-train",
        type=int,
        default=None,
        help="training sentences drawn per seed (None: each probe's own, sst2 10000, pos 2000)",
    )
    parser.add_argument("--max-length", type=int, default=128, help="word-pieces per sentence")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass")
    parser.add_argument(
        "--random-baseline",
        action="store_true",
        help="also probe a randomly initialised copy of the first --model (the reference for the gap)",
    )
    add_output_option(parser, "output", "write the results to this JSON file", directory=False, default=None)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows an interrupted run left in --output (same data, seeds and lengths) and probe the rest; "
        "a row whose data or model files have changed since is probed again",
    )
    parser.set_defaults(func=run)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def format_table(rows: list[dict]) -> str:
    """Aligned plain text: accuracies as percentages, the median first, then the seeds' range."""
    table = [["probe", "model", "median", "min-max", "majority", "n_train", "n_dev", "seconds"]]
    for row in rows:
        table.append(
            [
                row["probe"],
                row["label"],
                _pct(row["median"]),
                f"{_pct(row['min'])}-{_pct(row['max'])}",
                _pct(row["majority"]),
                str(row["n_train"]),
                str(row["n_dev"]),
                f"{row['seconds']:.1f}",
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _distinct_models(models: list[str]) -> dict[str, Path]:
    """Each model checked (weights safetensors, a tokenizer beside them) and kept once, by its first spelling,
    with its checkpoint directory: one given twice, or by two spellings (a run and its discriminator/), is
    probed once, not listed as two rows of the same encoder."""
    from electra.data.tokenization import require_tokenizer
    from electra.export.layout import require_safetensors
    from electra.finetune.models import resolve_model_dir

    first: dict[Path, str] = {}
    directories: dict[str, Path] = {}
    for model in models:
        directory = require_safetensors(resolve_model_dir(model))
        # where there is no tokenizer, AutoTokenizer makes an empty one and every word is [UNK]
        require_tokenizer(directory)
        kept = first.setdefault(directory.resolve(), model)
        if kept is not model:
            print(f"probe: --model {model} is {kept} again ({directory}); probed once.", file=sys.stderr)
            continue
        directories[model] = directory
    return directories


def run(args: argparse.Namespace) -> int:
    from electra.probes.inputs import check_probe_inputs, parse_probe_list

    require_counts(args, ("seeds", "max_length", "batch_size"), optional=("max_train",))
    if args.resume and not args.output:
        raise UserError("--resume continues the run whose rows are in --output; pass --output FILE.")
    specs = parse_probe_list(args.probes)
    data = _data_folder(args.data)
    directories = _distinct_models(args.model)  # a wrong model stops here, before any reading or extraction
    args.model = list(directories)
    check_probe_inputs(specs, data, args.max_length)  # every probe's files, before the first probe runs
    reads = [(f"--model {model}", directory) for model, directory in directories.items()]
    # a run given as --model is read too (its export.json names the part), not only the part's folder
    reads += [(f"--model {model}", Path(model)) for model in directories if Path(model).is_dir()]
    reads += [(f"the {spec.name} probe's data", Path(data) / need) for spec in specs for need in spec.needs]
    settings = {
        "probes": [s.name for s in specs],
        "data": str(data),
        "seeds": [args.seed + i for i in range(args.seeds)],
        "max_train": args.max_train,
        "max_length": args.max_length,
        "random_baseline": args.random_baseline,
    }
    done = _earlier_rows(args, settings, reads)
    _load_everything_once(directories, specs, data, settings["seeds"], args.max_train)
    with tempfile.TemporaryDirectory(prefix="electra-probe-") as scratch:
        rows = _probe_all(args, specs, data, directories, settings, done, Path(scratch))
    print(format_table(rows))
    _write_results(args.output, settings, rows, complete=True)
    return 0


def _data_folder(given: str | None) -> str:
    """--data, or $ELECTRA_DATA: a folder that exists."""
    data = given or os.environ.get("ELECTRA_DATA")
    if not data:
        raise UserError(
            "no data folder: pass --data DIR or set ELECTRA_DATA (the folder holding glue/ and corpus/)."
        )
    if not Path(data).is_dir():
        raise UserError(
            f"{data}: data folder not found; pass --data DIR holding glue/SST-2/ and corpus/brown/."
        )
    return data


def _load_everything_once(
    directories: dict[str, Path], specs: list, data: str, seeds: list[int], max_train: int | None
) -> None:
    """Each model loaded and each probe's data and seed samples read once before the first probe: a second
    --model that cannot be probed (a damaged config, a tokenizer larger than its embeddings) or a malformed row of
    the last probe's data stops the command before the earlier probes run, not after (their results lost without
    --output). Each seed's sample must hold two classes."""
    from transformers.utils import logging as transformers_logging

    from electra.probes.linear import load_frozen
    from electra.probes.run import training_samples

    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # the probe's own load shows one; a check needs none
    try:
        for directory in directories.values():
            load_frozen(directory)
    finally:
        if bars:
            transformers_logging.enable_progress_bar()
    for spec in specs:
        training_samples(spec, spec.read(Path(data)), data, seeds, max_train)


def _probe_all(
    args: argparse.Namespace,
    specs: list,
    data: str,
    directories: dict[str, Path],
    settings: dict,
    done: dict,
    scratch: Path,
) -> list[dict]:
    """Every probe on every model (and the random encoder, built in `scratch`), as rows; a row an earlier run
    left in --output is reused unless its data or model changed since. Each row is written as it is made."""
    from electra.core.run_records import INPUT_DIGESTS
    from electra.probes.run import data_sha256, model_sha256, random_encoder_dir, run_probe

    models = [(model, model, False) for model in args.model]
    checkpoints = {model: directories[model] for model in args.model}
    if args.random_baseline:
        random_dir = random_encoder_dir(args.model[0], scratch / "random")
        models.append((str(random_dir), f"random ({args.model[0]})", True))
        checkpoints[models[-1][1]] = random_dir
    # what each row was probed on, kept with it: a --resume redoes a row whose data or model has changed
    inputs = {}
    if args.output:
        data_digests = {spec.name: data_sha256(spec, data) for spec in specs}
        model_digests = {label: model_sha256(checkpoints[label]) for _, label, _ in models}
        inputs = {
            (spec.name, label): {"data": data_digests[spec.name], "model": model_digests[label]}
            for spec in specs
            for _, label, _ in models
        }
    rows: list[dict] = []
    for spec in specs:
        for model, label, is_random in models:
            row = done.get((spec.name, label))
            changed = row and _changed_inputs(
                row.get(INPUT_DIGESTS),
                inputs.get((spec.name, label)),
                Path(data),
                Path(label) if is_random else checkpoints[label],  # not the scratch folder's name
            )
            if changed:
                print(
                    f"probe: {spec.name} {label}: {changed} changed since its row in {args.output} was "
                    "probed; probing it again.",
                    file=sys.stderr,
                )
                row = None
            reused = row is not None
            if row is None:
                row = run_probe(
                    model,
                    spec,
                    data,
                    seeds=settings["seeds"],
                    max_train=args.max_train,
                    max_length=args.max_length,
                    batch_size=args.batch_size,
                )
                row.update(label=label, random=is_random)
                if is_random:
                    row["model"] = row["model_dir"] = label
                if args.output:
                    row[INPUT_DIGESTS] = inputs[(spec.name, label)]
            said = ", from the earlier run" if reused else ""
            rows.append(row)
            print(
                f"{spec.name} {label}: median {_pct(row['median'])} ({row['seconds']:.1f} s{said})",
                file=sys.stderr,
            )
            _write_results(args.output, settings, rows, complete=False)
    return rows


# What must match for an earlier run's rows to be reused: the rest (the probe list, the random baseline, the
# models) only says which rows a run holds.
_ROW_SETTINGS = ("data", "seeds", "max_train", "max_length")


def _earlier_rows(
    args: argparse.Namespace, settings: dict, reads: list[tuple[str, Path]] = ()
) -> dict[tuple[str, str], dict]:
    """The rows a `--resume` keeps, by (probe, model label); without --resume, the --output checks. Probes of
    several models take an hour on a CPU, and a run stopped at its last model must not lose them all: the
    results file is written after each row (`complete: false` until the end)."""
    from electra.core.errors import UserError
    from electra.core.files import read_json_record
    from electra.core.run_records import refuse_changed_settings

    if not args.output:
        return {}
    output = Path(args.output)
    if output.is_dir() or args.output.endswith(("/", os.sep)):  # Path() drops the "/" that says "a folder"
        raise UserError(f"--output {args.output}: is a folder; give the JSON file to write.")
    earlier = read_json_record(output) if output.is_file() else None
    if not (earlier and isinstance(earlier.get("results"), list)):  # its earlier results may sit anywhere
        refuse_to_replace_an_input(output, reads)
    if not args.resume:
        refuse_to_replace([output], args.overwrite, resume_hint=True)
    refuse_unwritable_directory(output.parent, option=f"--output {output}: its folder")
    if not (args.resume and output.exists()):
        return {}
    if earlier is None or not isinstance(earlier.get("results"), list):
        raise UserError(
            f"--resume: {output} is not a results file of `electra probe`; pass --overwrite to redo it."
        )
    saved = {name: (earlier.get("settings") or {}).get(name) for name in _ROW_SETTINGS}
    current = {name: settings[name] for name in _ROW_SETTINGS}
    for values in (saved, current):  # one folder, however it is spelled
        values["data"] = values["data"] and str(Path(values["data"]).resolve())
    refuse_changed_settings(
        output, saved, current, "probe with those settings, or pass --overwrite to start over."
    )
    return {
        (row["probe"], row["label"]): row for row in earlier["results"] if "probe" in row and "label" in row
    }


def _changed_inputs(saved: object, current: dict | None, data: Path, checkpoint: Path) -> str:
    """The files (comma list) whose SHA-256 differs between an earlier row's record and now, or "" when none does
    (a row without a record cannot be told: it is kept)."""
    if not (isinstance(saved, dict) and current):
        return ""
    changed = []
    for part, folder in (("data", data), ("model", checkpoint)):
        before, now = saved.get(part) or {}, current[part]
        changed += [
            str(folder / name) for name in sorted(set(before) | set(now)) if before.get(name) != now.get(name)
        ]
    return ", ".join(changed)


def _write_results(output: str | None, settings: dict, rows: list[dict], complete: bool) -> None:
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomically(Path(output), {"settings": settings, "complete": complete, "results": rows})
