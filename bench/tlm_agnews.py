"""Experiment (not a test): TLM on AG News with ELECTRA vs MLM as the LM objective vs task-only training, at one
stage-1 FLOP budget, same seeds; prints macro-F1 and accuracy on the 7,600 test rows as a Markdown table.

Data: `../shared/data/tlm_agnews/alps/dev.tsv` (10,001 labelled rows drawn from the AG News train set; the train
set itself is not staged) is split into a training set (`--train-size` rows) and a 1,000-row dev set;
`alps/test.tsv` is the test set. The general corpus is the English text of `../shared/data/corpus/` (Brown,
Reuters-21578, State of the Union, Gutenberg, WikiText-2 raw valid/test, tiny-shakespeare). Reuters and two
Gutenberg books hold Latin-1 bytes, which the library's strict UTF-8 reader rejects, so those files are decoded here
as Latin-1; the NLTK zips are left out (`abc.zip` has the same problem) and so is the tokenized WikiText-2.
All arms use the same WordPiece vocabulary (trained on the retrieved corpus) and the same encoder (`--size`), and
all are fine-tuned on the task alone in stage 2.

The README figures (about 20 minutes on 2 shared CPU cores; the BM25 index of the corpus takes ~30 s once):

    python bench/tlm_agnews.py --set max_seq_length=64 --train-size 1000 --top-k 10 --flops-budget 1e13 \
        --finetune-epochs 3 --finetune-lr 1e-3 --seeds 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from itertools import chain
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from electra.core.config_files import parse_overrides  # noqa: E402
from electra.core.errors import UserError  # noqa: E402
from electra.data.corpus import read_documents  # noqa: E402
from electra.tlm.indexing import build_index, corpus_digest  # noqa: E402
from electra.tlm.retrieval import retrieve_corpus  # noqa: E402
from electra.tlm.saved_index import BM25Index  # noqa: E402
from electra.tlm.tasks import read_task_file, split_examples, write_jsonl  # noqa: E402
from electra.tlm.train import TLMSettings, train_tlm  # noqa: E402

ARMS = ("electra", "mlm", "none")
CORPUS_PARTS = ("brown", "sotu", "nltk_gutenberg", "wikitext-2-raw", "tinyshakespeare")
REUTERS = "nltk_reuters.tar.gz"


def reuters_articles(path: Path):
    """One document per Reuters-21578 article (training/ and test/ members), decoded as Latin-1."""
    import tarfile

    with tarfile.open(path) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            parts = member.name.split("/")
            if member.isfile() and len(parts) >= 2 and parts[-2] in ("training", "test"):
                yield archive.extractfile(member).read().decode("latin-1")


def part_documents(path: Path):
    """The library reader's documents of each file under `path`; Latin-1 blank-line blocks where it refuses one."""
    for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        try:
            yield from list(read_documents(str(file)))
        except UserError:
            yield from (b for b in file.read_bytes().decode("latin-1").split("\n\n") if b.strip())


def general_index(corpus: Path, index_dir: Path) -> BM25Index:
    """The BM25 index of the general corpus, built once under WORK/index and again when a part changes (the
    corpus fingerprint `tlm retrieve` keys its own index on)."""
    source = f"{corpus.resolve()}: {REUTERS} + {', '.join(CORPUS_PARTS)}"
    fingerprint = corpus_digest([corpus / part for part in (REUTERS, *CORPUS_PARTS)])
    meta = index_dir / "tlm_index.json"
    if meta.is_file():
        saved = json.loads(meta.read_text())
        if [saved.get("source"), saved.get("corpus_fingerprint")] == [source, fingerprint]:
            return BM25Index(index_dir)
    documents = chain(
        reuters_articles(corpus / REUTERS), *(part_documents(corpus / part) for part in CORPUS_PARTS)
    )
    return build_index(documents, index_dir, source=source, fingerprint=fingerprint)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work", default=str(REPO / "runs" / "tlm_agnews"))
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--train-size", type=int, default=2000, help="training rows taken from alps/dev.tsv")
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--rho1", type=int, default=3)
    parser.add_argument("--rho2", type=float, default=20.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--flops-budget", type=float, default=2e13, help="stage-1 training FLOPs per arm")
    parser.add_argument("--finetune-epochs", type=int, default=2)
    parser.add_argument("--finetune-lr", type=float, default=3e-4)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args(argv)

    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()

    # ---- task splits ----
    labelled = read_task_file(data / "tlm_agnews" / "alps" / "dev.tsv")
    train, dev = split_examples(labelled, 1000, seed=0)
    train = train[: args.train_size]
    write_jsonl(train, work / "train.jsonl")
    write_jsonl(dev, work / "dev.jsonl")
    test_path = data / "tlm_agnews" / "alps" / "test.tsv"

    # ---- retrieval (the index is built once under WORK/index and reused) ----
    retrieved = work / f"retrieved_top{args.top_k}_n{len(train)}"
    if not (retrieved / "summary.json").is_file():
        with general_index(data / "corpus", work / "index") as index:
            retrieve_corpus(index, [e.text for e in train], args.top_k, retrieved, source="train.jsonl")
    summary = json.loads((retrieved / "summary.json").read_text())
    print(
        f"retrieval: {summary['retrieved_passages']} passages of {summary['index_passages']} for "
        f"{summary['queries']} queries (top-{args.top_k}) in {time.time() - started:.0f}s",
        flush=True,
    )

    # ---- the arms ----
    results: dict[str, list[dict]] = {}
    for seed in range(args.seeds):
        for arm in args.arms.split(","):
            t0 = time.time()
            result = train_tlm(
                TLMSettings(
                    task_train=str(work / "train.jsonl"),
                    task_dev=str(work / "dev.jsonl"),
                    task_test=str(test_path),
                    out=str(work / "runs" / f"{arm}-seed{seed}"),
                    retrieved=str(retrieved),  # for `none` only the vocabulary comes from it
                    objective=arm,
                    size=args.size,
                    overrides=parse_overrides(args.set),
                    rho1=args.rho1,
                    rho2=args.rho2,
                    batch_size=args.batch_size,
                    flops_budget=args.flops_budget,
                    finetune_epochs=args.finetune_epochs,
                    finetune_lr=args.finetune_lr,
                    finetune_layer_decay=1.0,
                    seed=seed,
                    progress=False,
                )
            )
            result["wall_s"] = time.time() - t0
            results.setdefault(arm, []).append(result)
            print(
                f"{arm} seed {seed}: {result['stage1_steps']} steps, {result['stage1_flops']:.3g} FLOPs, "
                f"test macro-F1 {result['test']['macro_f1']:.4f}, {result['wall_s']:.0f}s",
                flush=True,
            )
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table(results, args))
    return 0


def _mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def table(results: dict[str, list[dict]], args) -> str:
    names = {"electra": "TLM, ELECTRA (RTD) LM", "mlm": "TLM, BERT MLM", "none": "task only, from scratch"}
    lines = [
        f"AG News, size `{args.size}`, {args.train_size} training rows, stage-1 budget {args.flops_budget:.2g} FLOPs, "
        f"ρ1={args.rho1}, ρ2={args.rho2}, top-{args.top_k}, {args.seeds} seed(s)",
        "",
        "| arm | stage-1 steps | stage-1 FLOPs | dev macro-F1 | test accuracy | test macro-F1 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arm, runs in results.items():
        lines.append(
            f"| {names.get(arm, arm)} | {statistics.mean(r['stage1_steps'] for r in runs):.0f} "
            f"| {statistics.mean(r['stage1_flops'] for r in runs):.2e} "
            f"| {_mean_sd([r['dev']['macro_f1'] for r in runs])} "
            f"| {_mean_sd([r['test']['accuracy'] for r in runs])} "
            f"| {_mean_sd([r['test']['macro_f1'] for r in runs])} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
