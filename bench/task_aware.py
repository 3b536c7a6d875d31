"""Experiment (not a test): task-aware training at equal compute (issues 13 and 54).

Every arm starts from one encoder and gets the same total training FLOPs from the library's FLOP meter (continued
pretraining and task training alike, in the ELECTRA paper's accounting); each is scored on the task's test split at
its best dev evaluation. The encoder is `--encoder DIR` (a run of this library, or a transformers ELECTRA or BERT
directory: its shape and vocabulary are used, and a head it lacks starts fresh), or, without it, one tiny ELECTRA
pretrained here once on the general corpus of `../shared/data/corpus` (issue 13's setting). The arms are named in
`bench/task_aware_arms.py`: fine-tuning alone, TAPT/DAPT (ELECTRA or MLM) then fine-tuning, MT-/META-TARTAN with
ELECTRA or MLM as the auxiliary objective on TAPT or TAPT+DAPT text, and TLM from scratch.

The budget is `--budget` FLOPs, or `--budget-epochs E`: the FLOPs of E epochs of fine-tuning alone on the task's
training split (`electra.tlm.budget`), the unit to choose it in from a well-trained encoder (E where fine-tuning
alone has converged on dev; docs/task-aware.md says how to find it).

Tasks: SciERC relation classification (`sciie`, macro-F1), AG News with 1,000 training rows (`agnews`, accuracy;
dev is 500 other labelled rows, test the 7,600 of `alps/test.tsv`), and any task given as `--task-dir NAME METRIC
DIR` (DIR holding train, dev and test files the strict reader reads: .jsonl, .tsv or .csv). Results land in
WORK/<task>/<arm>/seed<k>/ and a run that exists is reused, so an interrupted experiment continues where it stopped
(like `electra compare`). The report (bench/task_aware_report.py) goes to stdout and WORK/results.md, the plots to
WORK/task-aware.png and WORK/meta-weights.png.

    python bench/task_aware.py --work runs/task-aware --seeds 3                      # issue 13's tiny setting
    python bench/task_aware.py --encoder /tmp/minilm_model --budget-epochs 10 --seeds 5 \
        --learning-rate 5e-5 --pretrain-learning-rate 1e-4 --work runs/task-aware-minilm  # issue 54's study
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from itertools import chain
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.task_aware_arms import STUDY_ARMS, Arm, parse_arm  # noqa: E402
from bench.task_aware_report import TASK_FILE, collect, plot, table, weight_curves  # noqa: E402
from bench.tlm_agnews import CORPUS_PARTS, REUTERS, part_documents, reuters_articles  # noqa: E402
from electra.app.cli import main as electra_main  # noqa: E402
from electra.core.errors import UserError  # noqa: E402
from electra.tlm.budget import finetune_epoch_flops  # noqa: E402
from electra.tlm.indexing import load_or_build_index  # noqa: E402
from electra.tlm.iss import select_with_reference  # noqa: E402
from electra.tlm.retrieval import retrieve_corpus  # noqa: E402
from electra.tlm.tasks import build_sciie, read_task_file, split_examples, write_jsonl  # noqa: E402
from electra.tlm.train import TLMSettings, train_tlm  # noqa: E402
from electra.training.continued import init_vocabulary  # noqa: E402

TASKS = {"sciie": "macro_f1", "agnews": "accuracy"}
SPLITS = ("train", "dev", "test")


def run_cli(argv: list[str]) -> None:
    code = electra_main(argv)
    if code != 0:
        raise SystemExit(f"`electra {' '.join(argv)}` failed with exit code {code}")


def general_corpus(data: Path, work: Path) -> Path:
    """The general corpus as one UTF-8 text file (Latin-1 parts decoded as such), written once."""
    path = work / "general" / "corpus.txt"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        documents = chain(
            reuters_articles(data / "corpus" / REUTERS),
            *(part_documents(data / "corpus" / part) for part in CORPUS_PARTS),
        )
        staging = path.with_suffix(".partial")
        with open(staging, "w", encoding="utf-8") as handle:
            for document in documents:
                handle.write(document.strip() + "\n\n")
        staging.rename(path)
    return path


def task_splits(data: Path, work: Path, task: str, source: Path | None) -> dict[str, Path]:
    """WORK/<task>/data/{train,dev,test}.jsonl, written once: SciERC's and AG News's from `data`, another task's
    from the files in `source` (train.*, dev.*, test.*)."""
    folder = work / task / "data"
    paths = {split: folder / f"{split}.jsonl" for split in SPLITS}
    if all(p.is_file() for p in paths.values()):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    if source is not None:
        for split in SPLITS:
            found = sorted(p for p in source.glob(f"{split}.*") if p.suffix in (".jsonl", ".tsv", ".csv"))
            if not found:
                raise UserError(
                    f"--task-dir {task}: {source} has no {split}.jsonl, {split}.tsv or {split}.csv."
                )
            write_jsonl(read_task_file(found[0]), paths[split])
    elif task == "sciie":
        for split in paths:
            write_jsonl(build_sciie(data / "tlm_scierc" / f"{split}.json"), paths[split])
    else:
        labelled = read_task_file(data / "tlm_agnews" / "alps" / "dev.tsv")
        rest, dev = split_examples(labelled, 500, seed=0)
        write_jsonl(rest[:1000], paths["train"])
        write_jsonl(dev, paths["dev"])
        write_jsonl(read_task_file(data / "tlm_agnews" / "alps" / "test.tsv"), paths["test"])
    return paths


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work", default=str(REPO / "runs" / "task-aware"))
    parser.add_argument(
        "--encoder",
        metavar="DIR",
        help="the encoder every arm starts from: a run of this library or a transformers ELECTRA or BERT directory "
        "(its shape and vocabulary; heads it lacks start fresh); default: a tiny ELECTRA pretrained here",
    )
    parser.add_argument("--tasks", help="comma-separated; default: sciie,agnews, or the --task-dir tasks")
    parser.add_argument(
        "--task-dir",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "METRIC", "DIR"),
        help="another task: DIR holds train, dev and test (.jsonl, .tsv or .csv); METRIC macro_f1 or accuracy",
    )
    parser.add_argument("--arms", default=",".join(STUDY_ARMS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=8e12, help="training FLOPs per arm (after the base)")
    parser.add_argument(
        "--budget-epochs",
        type=float,
        help="training FLOPs per arm as epochs of fine-tuning alone on the task (replaces --budget): choose the "
        "epochs at which fine-tuning alone has converged on dev",
    )
    parser.add_argument(
        "--base-budget", type=float, default=2e13, help="FLOPs of the shared base pretraining (no --encoder)"
    )
    parser.add_argument("--top-k", type=int, default=5, help="BM25 passages per task example (DAPT, TLM)")
    parser.add_argument(
        "--dapt-multiple",
        type=float,
        help="keep BM25's best passages, this many times the training examples (TARTAN's Table 2: 10); default: "
        "the whole top-k union",
    )
    parser.add_argument("--iss-pool", type=int, default=4, help="ISS's BM25 pool is this many times top-k")
    parser.add_argument(
        "--learning-rate", type=float, default=1e-3, help="task training (ft, TARTAN, ISS reference)"
    )
    parser.add_argument(
        "--pretrain-learning-rate",
        type=float,
        help="continued pretraining (TAPT, DAPT); default: the size preset's",
    )
    parser.add_argument(
        "--pretrain-batch-size", type=int, help="continued pretraining's batch; default: the size preset's"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="task (and auxiliary) batch")
    parser.add_argument("--reference-steps", type=int, default=200, help="ISS reference model's joint steps")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model config override for every run, continued pretraining included (e.g. mixed_precision=bf16)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="table and plot of the finished arms, no training"
    )
    args = parser.parse_args(argv)
    args.arms = [parse_arm(a) for a in args.arms.split(",")]  # every name checked before any work
    malformed = [item for item in args.set if "=" not in item]
    if malformed:
        raise UserError(f"--set {malformed[0]!r}: give KEY=VALUE.")
    args.overrides = dict(item.split("=", 1) for item in args.set)
    args.task_dirs = {name: (metric, Path(d)) for name, metric, d in args.task_dir}
    for name, (metric, _) in args.task_dirs.items():
        if metric not in ("macro_f1", "accuracy"):
            raise UserError(f"--task-dir {name}: metric {metric!r} is not macro_f1 or accuracy.")
    tasks = args.tasks or (",".join(args.task_dirs) if args.task_dirs else ",".join(TASKS))
    args.tasks = tasks.split(",")
    unknown = [t for t in args.tasks if t not in TASKS and t not in args.task_dirs]
    if unknown:
        raise UserError(f"task {unknown[0]!r} is not sciie or agnews, nor given by --task-dir.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    if args.report_only:
        return report(work, args)
    needs_general = args.encoder is None or any(arm.needs_dapt for arm in args.arms)
    corpus = general_corpus(data, work) if needs_general else None
    base = Path(args.encoder) if args.encoder else work / "base"
    if args.encoder is None and not (base / "export.json").is_file():
        shutil.rmtree(base, ignore_errors=True)
        run_cli(["pretrain", "--size", "tiny", "--corpus", str(corpus), "--flops-budget", str(args.base_budget)]
                + ["--out", str(base), "--seed", "0", "--no-progress"])  # fmt: skip
    print(f"encoder: {base} ({time.time() - started:.0f}s)", flush=True)

    # every task's splits, budget and corpora before any arm trains: a retrieval that refuses (a pool smaller than
    # --dapt-multiple asks for) stops the run at once, not after the first task's hours of training
    prepared = {}
    for task in args.tasks:
        metric, source = args.task_dirs.get(task, (TASKS.get(task), None))
        paths = task_splits(data, work, task, source)
        (work / task / TASK_FILE).write_text(
            json.dumps({"metric": metric, "source": str(source or data)}) + "\n"
        )
        budget = task_budget(args, paths, base, metric)
        prepared[task] = metric, paths, budget, prepare_corpora(args, work / task, paths, corpus, base)
    for task, (metric, paths, budget, corpora) in prepared.items():
        for seed in range(args.seeds):
            for arm in args.arms:
                result = run_arm(args, arm, task, metric, seed, paths, corpora, base, budget)
                print(
                    f"{task} {arm.name} seed {seed}: test {metric} {result['test'][metric]:.4f} (dev "
                    f"{result['dev'][metric]:.4f}), {result['total_flops']:.3g} FLOPs, {result['wall_s']:.0f}s "
                    f"[{time.time() - started:.0f}s]",
                    flush=True,
                )
    return report(work, args)


def task_budget(args, paths: dict[str, Path], base: Path, metric: str) -> float:
    """Each arm's training FLOPs on this task: `--budget`, or `--budget-epochs` epochs of fine-tuning alone."""
    if args.budget_epochs is None:
        return args.budget
    settings = TLMSettings(**task_settings(args, paths, metric, 0), out="", init_from=str(base))
    epoch = finetune_epoch_flops(settings)
    print(f"one fine-tuning epoch: {epoch:.3g} FLOPs; budget {args.budget_epochs:g} epochs", flush=True)
    return args.budget_epochs * epoch


def report(work: Path, args) -> int:
    """Table and plots of every finished arm, also those of earlier invocations (other seeds or arms)."""
    results = collect(work)
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    encoder = args.encoder or f"a tiny ELECTRA pretrained here ({args.base_budget:.2g} FLOPs)"
    budget = (
        f"{args.budget_epochs:g} fine-tuning epochs" if args.budget_epochs else f"{args.budget:.2g} FLOPs"
    )
    heading = (
        f"From {encoder}; {budget} of training per arm (FLOP meter); test metric at the best dev evaluation, "
        "median [min–max] over seeds, every seed listed; TARTAN arms against TAPT by a two-sided Mann-Whitney U test."
    )
    text = table(results, work, heading)
    (work / "results.md").write_text(text)
    if results:
        plot(
            results,
            work,
            work / "task-aware.png",
            f"Task-aware training at equal FLOPs, from {Path(encoder).name}",
        )
        weight_curves(work, work / "meta-weights.png")
    print(text)
    return 0


def prepare_corpora(
    args, folder: Path, paths: dict[str, Path], corpus: Path | None, base: Path
) -> dict[str, Path]:
    """What the arms read: TAPT texts, the BM25 domain corpus (DAPT, TLM) and the ISS subset of the same size,
    each built once and only where an arm needs it."""
    tapt = folder / "tapt"
    if not (tapt / "corpus" / "task_texts.txt").is_file():
        run_cli(["tlm", "texts", "--task", str(paths["train"]), "--out", str(tapt), "--overwrite"])
    corpora = {"tapt": tapt}
    if not any(arm.needs_dapt for arm in args.arms):
        return corpora
    texts = [e.text for e in read_task_file(paths["train"])]
    bm25, iss = folder / "bm25", folder / "iss"
    corpora.update(dapt=bm25, bm25=bm25, iss=iss)
    select = round(args.dapt_multiple * len(texts)) if args.dapt_multiple else None
    with load_or_build_index(corpus, folder.parent / "index", progress=False) as index:
        if not (bm25 / "summary.json").is_file():
            retrieve_corpus(
                index, texts, args.top_k, bm25, progress=False, source=str(paths["train"]), select_size=select
            )
        size = json.loads((bm25 / "summary.json").read_text())["retrieved_passages"]
        if any(arm.name == "tlm_iss" for arm in args.arms) and not (iss / "summary.json").is_file():
            reference = TLMSettings(
                **{**task_settings(args, paths, "macro_f1", 0), "task_test": str(paths["dev"])},
                out=str(iss / "reference"),
                objective="electra",
                rho1=0,
                rho2=1.0,
                steps=args.reference_steps,
                init_from=str(base),
                learning_rate=args.learning_rate,
            )
            summary = select_with_reference(
                index, reference, args.top_k * args.iss_pool, size, iss, batch_size=16, progress=False
            )
            print(
                f"ISS: {summary['retrieved_passages']} passages in {summary['selection_seconds']:.0f}s",
                flush=True,
            )
    return corpora


def task_settings(args, paths: dict[str, Path], metric: str, seed: int) -> dict:
    """The settings every task run of an arm shares (`TLMSettings` fields)."""
    return dict(
        task_train=str(paths["train"]),
        task_dev=str(paths["dev"]),
        task_test=str(paths["test"]),
        size="tiny",
        batch_size=args.batch_size,
        finetune_epochs=0,
        seed=seed,
        progress=False,
        eval_every=args.eval_every,
        metric=metric,
        overrides={**args.overrides, "max_seq_length": args.max_seq_length},
    )


def continued_pretraining(
    args, arm: Arm, out: Path, corpora, base: Path, budget: float, seed: int
) -> tuple[Path, float]:
    """`electra pretrain --init-from` on each of the arm's corpora in turn, half the budget split among them:
    (the last run, its FLOPs)."""
    start, spent = base, 0.0
    for corpus in arm.corpora:
        pre = out / f"continued_{corpus}"
        folder = corpora[corpus] / "corpus"
        argv = ["pretrain", "--init-from", str(start), "--corpus", str(folder), "--objective", arm.objective]
        argv += ["--flops-budget", str(budget / 2 / len(arm.corpora)), "--out", str(pre), "--seed", str(seed)]
        argv += ["--max-seq-length", str(args.max_seq_length), "--no-progress", "--no-plot"]
        if args.pretrain_learning_rate is not None:
            argv += ["--learning-rate", str(args.pretrain_learning_rate)]
        if args.pretrain_batch_size is not None:
            argv += ["--batch-size", str(args.pretrain_batch_size)]
        run_cli(argv + [f"--set={item}" for item in args.set])
        spent += json.loads((pre / "summary.json").read_text())["flops"]
        start = pre
    return start, spent


def run_arm(
    args, arm: Arm, task: str, metric: str, seed: int, paths, corpora, base: Path, budget: float
) -> dict:
    out = Path(args.work) / task / arm.name / f"seed{seed}"
    done = out / "arm.json"
    if done.is_file():
        return json.loads(done.read_text())
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    common = task_settings(args, paths, metric, seed)
    pretrain_flops, init_from, left = 0.0, base, budget
    if arm.kind == "continued":
        init_from, pretrain_flops = continued_pretraining(args, arm, out, corpora, base, budget, seed)
        left = budget - pretrain_flops
        if left < 1:
            raise UserError(
                f"{arm.name}: continued pretraining spent {pretrain_flops:.3g} of the arm's {budget:.3g} FLOPs "
                "(a step costs more than half the budget); raise the budget or lower --pretrain-batch-size."
            )
    task_lr = dict(learning_rate=args.learning_rate, flops_budget=left, out=str(out / "task"))
    if arm.kind in ("ft", "continued"):
        settings = TLMSettings(**common, **task_lr, objective="none", init_from=str(init_from))
    elif arm.kind == "tartan":
        settings = TLMSettings(
            **common,
            **task_lr,
            objective=arm.objective,
            init_from=str(base),
            retrieved=str(corpora["dapt"]) if "dapt" in arm.corpora else None,
            rho1=1 if "dapt" in arm.corpora else 0,
            rho2=1.0,
            weighting=arm.weighting,
            balance_losses=arm.balanced,
        )
    else:  # TLM from scratch, with the encoder's vocabulary as every other arm
        settings = TLMSettings(
            **common,
            out=str(out / "task"),
            objective="electra",
            retrieved=str(corpora[arm.corpora[0]]),
            vocab=str(init_vocabulary(base)),
            rho1=3,
            rho2=20.0,
            flops_budget=budget,
        )
    result = train_tlm(settings)
    result.update(
        arm=arm.name, task=task, pretrain_flops=pretrain_flops, budget=budget, wall_s=time.time() - t0
    )
    result["total_flops"] = result["total_flops"] + pretrain_flops
    done.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
