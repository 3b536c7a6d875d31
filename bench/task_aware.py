"""Experiment (not a test): task-aware training at equal compute, issue 13's comparison.

Every arm starts from one tiny ELECTRA pretrained here once on the general corpus of `../shared/data/corpus` (except
the TLM arms, which train from scratch), gets the same total training FLOPs from the library's FLOP meter
(pretraining and task training alike, in the ELECTRA paper's accounting), and is scored on the task's test split at
its best dev evaluation:

    ft          fine-tune only
    tapt_ft     continued pretraining (ELECTRA) on the task's own texts for half the budget, then fine-tune
    dapt_ft     continued pretraining on BM25-retrieved domain text for half the budget, then fine-tune
    mt_electra  MT-TARTAN: task + TAPT + DAPT, uniform weights, auxiliary objective ELECTRA   (also mt_mlm)
    meta_electra META-TARTAN: the same terms, meta-learned weights                             (also meta_mlm)
    *_balanced  the same with every term divided by its running mean (`electra tartan --losses balanced`)
    tlm_bm25    TLM from scratch on the BM25 corpus (task + ρ2·LM(task) + LM(retrieved))
    tlm_iss     TLM from scratch on an ISS-selected subset of the BM25 pool, as many passages as BM25's corpus

Tasks: SciERC relation classification (`sciie`, macro-F1) and AG News with 1,000 training rows (accuracy; dev is
500 other labelled rows, test the 7,600 of `alps/test.tsv`). Results land in WORK/<task>/<arm>/seed<k>/ and a run
that exists is reused, so an interrupted experiment continues where it stopped (like `electra compare`). The
Markdown table goes to stdout and WORK/results.md, the plot to WORK/task-aware.png.

    python bench/task_aware.py --work runs/task-aware --seeds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from itertools import chain
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.tlm_agnews import CORPUS_PARTS, REUTERS, part_documents, reuters_articles  # noqa: E402
from electra.app.cli import main as electra_main  # noqa: E402
from electra.core.errors import UserError  # noqa: E402
from electra.tlm.iss import select_with_reference  # noqa: E402
from electra.tlm.retrieval import load_or_build_index, retrieve_corpus  # noqa: E402
from electra.tlm.tasks import build_sciie, read_task_file, split_examples, write_jsonl  # noqa: E402
from electra.tlm.train import TLMSettings, train_tlm  # noqa: E402

ARMS = (
    "ft",
    "tapt_ft",
    "dapt_ft",
    "mt_electra",
    "mt_mlm",
    "meta_electra",
    "meta_mlm",
    "mt_electra_balanced",
    "meta_electra_balanced",
    "tlm_bm25",
    "tlm_iss",
)
TASKS = {"sciie": "macro_f1", "agnews": "accuracy"}
LABELS = {
    "ft": "fine-tune only",
    "tapt_ft": "TAPT → fine-tune",
    "dapt_ft": "DAPT (BM25) → fine-tune",
    "mt_electra": "MT-TARTAN, ELECTRA aux",
    "mt_mlm": "MT-TARTAN, MLM aux",
    "meta_electra": "META-TARTAN, ELECTRA aux",
    "meta_mlm": "META-TARTAN, MLM aux",
    "mt_electra_balanced": "MT-TARTAN, ELECTRA aux, balanced losses",
    "meta_electra_balanced": "META-TARTAN, ELECTRA aux, balanced losses",
    "tlm_bm25": "TLM from scratch, BM25 subset",
    "tlm_iss": "TLM from scratch, ISS subset",
}


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


def task_splits(data: Path, work: Path, task: str) -> dict[str, Path]:
    folder = work / task / "data"
    paths = {split: folder / f"{split}.jsonl" for split in ("train", "dev", "test")}
    if all(p.is_file() for p in paths.values()):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    if task == "sciie":
        for split in paths:
            write_jsonl(build_sciie(data / "tlm_scierc" / f"{split}.json"), paths[split])
    else:
        labelled = read_task_file(data / "tlm_agnews" / "alps" / "dev.tsv")
        rest, dev = split_examples(labelled, 500, seed=0)
        write_jsonl(rest[:1000], paths["train"])
        write_jsonl(dev, paths["dev"])
        write_jsonl(read_task_file(data / "tlm_agnews" / "alps" / "test.tsv"), paths["test"])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work", default=str(REPO / "runs" / "task-aware"))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=8e12, help="training FLOPs per arm (after the base)")
    parser.add_argument(
        "--base-budget", type=float, default=2e13, help="FLOPs of the shared base pretraining"
    )
    parser.add_argument("--top-k", type=int, default=5, help="BM25 passages per task example (DAPT, TLM)")
    parser.add_argument("--iss-pool", type=int, default=4, help="ISS's BM25 pool is this many times top-k")
    parser.add_argument(
        "--learning-rate", type=float, default=1e-3, help="task training (ft, TARTAN, ISS reference)"
    )
    parser.add_argument("--reference-steps", type=int, default=200, help="ISS reference model's joint steps")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument(
        "--report-only", action="store_true", help="table and plot of the finished arms, no training"
    )
    args = parser.parse_args(argv)
    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    seq = [f"max_seq_length={args.max_seq_length}"]

    if args.report_only:
        return report(work, args)
    corpus = general_corpus(data, work)
    base = work / "base"
    if not (base / "export.json").is_file():
        shutil.rmtree(base, ignore_errors=True)
        run_cli(["pretrain", "--size", "tiny", "--corpus", str(corpus), "--flops-budget", str(args.base_budget)]
                + ["--out", str(base), "--seed", "0", "--no-progress"])  # fmt: skip
    print(f"base model ready ({time.time() - started:.0f}s)", flush=True)

    results: dict[str, dict[str, list[dict]]] = {}
    for task in args.tasks.split(","):
        metric = TASKS[task]
        paths = task_splits(data, work, task)
        corpora = prepare_corpora(args, work / task, paths, corpus, base)
        for seed in range(args.seeds):
            for arm in args.arms.split(","):
                result = run_arm(args, arm, task, metric, seed, paths, corpora, base, seq)
                results.setdefault(task, {}).setdefault(arm, []).append(result)
                print(
                    f"{task} {arm} seed {seed}: test {metric} {result['test'][metric]:.4f} (dev "
                    f"{result['dev'][metric]:.4f}), {result['total_flops']:.3g} FLOPs, {result['wall_s']:.0f}s "
                    f"[{time.time() - started:.0f}s]",
                    flush=True,
                )
    return report(work, args)


def report(work: Path, args) -> int:
    """Table and plot of every finished arm, also those of earlier invocations (other seeds or arms)."""
    results = collect(work)
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = table(results, args)
    (work / "results.md").write_text(text + "\n")
    plot(results, work / "task-aware.png", {task: majority(work, task) for task in results})
    print(text)
    return 0


def majority(work: Path, task: str) -> float:
    """The task metric of always predicting the training split's most common label, on test."""
    from collections import Counter

    train = Counter(e.label for e in read_task_file(work / task / "data" / "train.jsonl"))
    test = [e.label for e in read_task_file(work / task / "data" / "test.jsonl")]
    share = test.count(train.most_common(1)[0][0]) / len(test)
    return share if TASKS[task] == "accuracy" else (2 * share / (1 + share)) / len(train)


def prepare_corpora(args, folder: Path, paths: dict[str, Path], corpus: Path, base: Path) -> dict[str, Path]:
    """TAPT texts, the BM25 corpus (DAPT and TLM) and the ISS subset of the same size."""
    tapt = folder / "tapt"
    if not (tapt / "corpus" / "task_texts.txt").is_file():
        run_cli(["tlm", "texts", "--task", str(paths["train"]), "--out", str(tapt), "--overwrite"])
    texts = [e.text for e in read_task_file(paths["train"])]
    bm25, iss = folder / "bm25", folder / "iss"
    with load_or_build_index(corpus, folder.parent / "index", progress=False) as index:
        if not (bm25 / "summary.json").is_file():
            retrieve_corpus(index, texts, args.top_k, bm25, progress=False, source=str(paths["train"]))
        size = json.loads((bm25 / "summary.json").read_text())["retrieved_passages"]
        if not (iss / "summary.json").is_file():
            reference = TLMSettings(
                task_train=str(paths["train"]),
                task_dev=str(paths["dev"]),
                task_test=str(paths["dev"]),
                out=str(iss / "reference"),
                objective="electra",
                rho1=0,
                rho2=1.0,
                steps=args.reference_steps,
                finetune_epochs=0,
                init_from=str(base),
                learning_rate=args.learning_rate,
                seed=0,
                progress=False,
            )
            summary = select_with_reference(
                index, reference, args.top_k * args.iss_pool, size, iss, batch_size=16, progress=False
            )
            print(
                f"ISS: {summary['retrieved_passages']} passages in {summary['selection_seconds']:.0f}s",
                flush=True,
            )
    return {"tapt": tapt, "bm25": bm25, "iss": iss}


def run_arm(args, arm, task, metric, seed, paths, corpora, base, seq) -> dict:
    out = Path(args.work) / task / arm / f"seed{seed}"
    done = out / "arm.json"
    if done.is_file():
        return json.loads(done.read_text())
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    common = dict(
        task_train=str(paths["train"]),
        task_dev=str(paths["dev"]),
        task_test=str(paths["test"]),
        size="tiny",
        batch_size=32,
        finetune_epochs=0,
        seed=seed,
        progress=False,
        eval_every=args.eval_every,
        metric=metric,
    )
    pretrain_flops = 0.0
    init_from = str(base)
    budget = args.budget
    if arm in ("tapt_ft", "dapt_ft"):
        corpus = corpora["tapt"] / "corpus" if arm == "tapt_ft" else corpora["bm25"] / "corpus"
        pre = out / "continued"
        run_cli(["pretrain", "--init-from", str(base), "--corpus", str(corpus), "--flops-budget", str(budget / 2)]
                + ["--out", str(pre), "--seed", str(seed), "--no-progress"])  # fmt: skip
        pretrain_flops = json.loads((pre / "summary.json").read_text())["flops"]
        init_from, budget = str(pre), budget - pretrain_flops
    if arm in ("ft", "tapt_ft", "dapt_ft"):
        settings = TLMSettings(**common, out=str(out / "task"), objective="none", init_from=init_from,
                               flops_budget=budget, learning_rate=args.learning_rate)  # fmt: skip
    elif arm.startswith(("mt_", "meta_")):
        weighting, objective = arm.split("_")[:2]
        settings = TLMSettings(
            **common,
            out=str(out / "task"),
            objective=objective,
            init_from=init_from,
            retrieved=str(corpora["bm25"]),
            rho1=1,
            rho2=1.0,
            weighting="uniform" if weighting == "mt" else "meta",
            balance_losses=arm.endswith("_balanced"),
            flops_budget=budget,
            learning_rate=args.learning_rate,
        )
    elif arm in ("tlm_bm25", "tlm_iss"):
        settings = TLMSettings(
            **common,
            out=str(out / "task"),
            objective="electra",
            retrieved=str(corpora["bm25" if arm == "tlm_bm25" else "iss"]),
            vocab=str(base / "discriminator"),  # the same vocabulary as every other arm
            overrides={k: v for k, v in (s.split("=") for s in seq)},
            rho1=3,
            rho2=20.0,
            flops_budget=budget,
        )
    else:
        raise UserError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    result = train_tlm(settings)
    result.update(arm=arm, task=task, pretrain_flops=pretrain_flops, wall_s=time.time() - t0)
    result["total_flops"] = result["total_flops"] + pretrain_flops
    done.write_text(json.dumps(result, indent=2) + "\n")
    return result


def collect(work: Path) -> dict[str, dict[str, list[dict]]]:
    """WORK/<task>/<arm>/seed<k>/arm.json of every finished arm, tasks and arms in the experiment's order."""
    results: dict[str, dict[str, list[dict]]] = {}
    for task in TASKS:
        for arm in ARMS:
            runs = sorted((work / task / arm).glob("seed*/arm.json"), key=lambda p: int(p.parent.name[4:]))
            if runs:
                results.setdefault(task, {})[arm] = [json.loads(r.read_text()) for r in runs]
    return results


def _summary(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.median(values):.1f} [{100 * min(values):.1f}–{100 * max(values):.1f}]"


def table(results: dict[str, dict[str, list[dict]]], args) -> str:
    lines = [
        f"size `tiny`, {args.budget:.2g} training FLOPs per arm (after a {args.base_budget:.2g}-FLOP base), "
        "median [min–max] over seeds (n) of the test metric at the best dev evaluation",
        "",
        "| arm | "
        + " | ".join(f"{t} test {TASKS[t]} | {t} dev" for t in results)
        + " | FLOPs (median) | wall s |",
        "|---|" + "---:|---:|" * len(results) + "---:|---:|",
    ]
    arms = list(dict.fromkeys(a for t in results.values() for a in t))
    for arm in arms:
        cells, flops, wall = [], [], []
        for task, by_arm in results.items():
            runs = by_arm.get(arm, [])
            metric = TASKS[task]
            cells.append(f"{_summary([r['test'][metric] for r in runs])} (n={len(runs)})" if runs else "–")
            cells.append(_summary([r["dev"][metric] for r in runs]) if runs else "–")
            flops += [r["total_flops"] for r in runs]
            wall += [r["wall_s"] for r in runs]
        lines.append(
            f"| {LABELS.get(arm, arm)} | " + " | ".join(cells)
            + f" | {statistics.median(flops):.2g} | {statistics.median(wall):.0f} |"
        )  # fmt: skip
    return "\n".join(lines)


def plot(results: dict[str, dict[str, list[dict]]], output: Path, baselines: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2), dpi=120, squeeze=False)
    for axis, (task, by_arm) in zip(axes[0], results.items()):
        metric = TASKS[task]
        arms = list(by_arm)
        for position, arm in enumerate(arms):
            values = [100 * r["test"][metric] for r in by_arm[arm]]
            median = statistics.median(values)
            axis.barh(position, median, color="tab:blue" if "tartan" in LABELS[arm].lower() else "tab:gray")
            axis.plot(values, [position] * len(values), "k.", markersize=4)
        axis.axvline(
            100 * baselines[task], color="tab:red", linestyle="--", linewidth=1, label="majority class"
        )
        axis.legend(fontsize=8, loc="lower right")
        axis.set_yticks(range(len(arms)), [LABELS.get(a, a) for a in arms], fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel(f"test {metric} (%), median bar, seeds as dots")
        axis.set_title(task)
        axis.grid(axis="x", alpha=0.3)
        low = min(100 * r["test"][metric] for runs in by_arm.values() for r in runs)
        axis.set_xlim(max(0, min(low, 100 * baselines[task]) - 10), None)
    figure.suptitle("Task-aware training at equal FLOPs (size tiny)")
    figure.tight_layout()
    figure.savefig(output)
    plt.close(figure)


if __name__ == "__main__":
    raise SystemExit(main())
