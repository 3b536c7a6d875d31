"""Data-preparation throughput and memory: this library's packing beside the `run_mlm.py` path, on synthetic corpora
of given sizes, in one run.

For each size it writes (or reuses) a JSON-lines corpus (`{"text": ...}` per line, documents of about 5 KB made of
paragraphs drawn with a seeded RNG from the text of `--source`), then times, one after the other and each in a fresh
subprocess:

- **ours**: `electra.data.packing.build_pretraining_dataset` with the tokenizer of `load_vocab_tokenizer(vocab)`,
  into a fresh cache directory;
- **run_mlm**: what a user of transformers' `run_mlm.py` runs: `datasets.load_dataset("json")`, the fast BERT
  tokenizer mapped over the text (`batched=True`, `num_proc`, `return_special_tokens_mask=True`), then the token
  lists concatenated and cut into blocks of 128 (`run_mlm.py`'s `group_texts`), mapped the same way;
- **ours-stream**: `--streaming`'s loader (`electra.data.streaming.stream_loader`, `--num-proc` workers): the time
  to the first batch of 128 examples, then examples a second over the next STREAM_BATCHES batches.

Wall time is the subprocess's, start-up and imports included (each tool pays its own). Peak memory is polled every
0.1 s over the subprocess and all its descendants: the largest SUM of their resident sets at one moment ("tree"),
and the largest single process (the kernel's own high-water mark, `ru_maxrss`, where it is higher than the polled
one). The sum counts pages that forked workers share with their parent once per process, so it is an upper bound on
the memory the tree really holds; it is the figure a memory limit on a job (a cgroup sums differently, a scheduler
that adds up RSS the same way) would see first.

    python bench/data_throughput.py --sizes 0.25,1 --out runs/data-throughput
    python bench/data_throughput.py --sizes 0.05 --tools ours --num-proc 2 --repeats 3 --out /tmp/dt
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
DEFAULT_SOURCE = SHARED / "corpus"
DEFAULT_SUBSETS = ("wikitext-2-raw", "sotu", "nltk_gutenberg", "brown")
DEFAULT_VOCAB = SHARED / "bert_vocab" / "vocab.txt"
GB, MB = 10**9, 10**6
DOCUMENT_CHARS = 5000  # a document ends at the first paragraph that takes it to this many characters
MIN_PARAGRAPH_CHARS = 40  # shorter lines are headings and list items: not prose to draw from
BLOCK = 128  # run_mlm's max_seq_length in this comparison, and ours
TOOLS = ("ours", "run_mlm", "ours-stream")
STREAM_BATCHES = 200  # batches of BLOCK examples drawn after the first, for the streaming rate
POLL_SECONDS = 0.1
RESULT_PREFIX = "DATA_THROUGHPUT_RESULT "


# --- corpora -------------------------------------------------------------------------------------------------------


def load_paragraphs(source: Path, subsets: tuple[str, ...] = DEFAULT_SUBSETS) -> list[str]:
    """The prose paragraphs (lines of at least MIN_PARAGRAPH_CHARS) of `source`'s `subsets` folders, or of `source`
    itself when it holds none of them (a file, or a folder of other text), read with this library's reader."""
    from electra.data.corpus import read_documents

    roots = [source / name for name in subsets if (source / name).exists()] or [source]
    paragraphs = []
    for root in roots:
        for document in read_documents(root, doc_boundary="blank"):
            paragraphs += [line for line in document.split("\n") if len(line) >= MIN_PARAGRAPH_CHARS]
    if not paragraphs:
        raise SystemExit(
            f"{source}: no paragraphs of {MIN_PARAGRAPH_CHARS}+ characters; give --source some prose."
        )
    return paragraphs


def paragraphs_fingerprint(paragraphs: list[str]) -> str:
    digest = hashlib.sha256()
    for paragraph in paragraphs:
        digest.update(paragraph.encode())
        digest.update(b"\n")
    return digest.hexdigest()[:10]


def build_corpus(paragraphs: list[str], size_bytes: int, workdir: Path, seed: int = 0) -> Path:
    """A JSON-lines corpus of at least `size_bytes` bytes in `workdir`, named by its size, seed and source text, so
    a second run reuses it; written under a temporary name and renamed when complete."""
    name = f"synthetic-{size_bytes}B-seed{seed}-{paragraphs_fingerprint(paragraphs)}.jsonl"
    path = workdir / name
    if path.is_file() and path.stat().st_size >= size_bytes:
        return path
    workdir.mkdir(parents=True, exist_ok=True)
    # Each paragraph is escaped for JSON once; a document is then the join of escaped paragraphs (a paragraph break
    # is the two characters \n inside the JSON string), so writing costs a join and a write per document.
    escaped = [json.dumps(p, ensure_ascii=False)[1:-1] for p in paragraphs]
    lengths = [len(p) for p in paragraphs]
    sizes = [len(e.encode()) for e in escaped]
    rng = random.Random(seed)
    count = len(paragraphs)
    written, pending, pending_bytes = 0, [], 0
    tmp = workdir / f".{name}.partial"
    with open(tmp, "w", encoding="utf-8") as out:
        while written < size_bytes:
            chars, picked, line_bytes = 0, [], 13  # {"text": ""} and the newline
            while chars < DOCUMENT_CHARS:
                i = rng.randrange(count)
                picked.append(escaped[i])
                chars += lengths[i]
                line_bytes += sizes[i] + 2
            pending.append('{"text": "' + "\\n".join(picked) + '"}\n')
            line_bytes -= 2
            written += line_bytes
            pending_bytes += line_bytes
            if pending_bytes >= 8 * MB:
                out.write("".join(pending))
                pending, pending_bytes = [], 0
        out.write("".join(pending))
    os.replace(tmp, path)
    return path


# --- the measured work (runs in a fresh subprocess) ----------------------------------------------------------------


def _work_ours(corpus: str, vocab: str, num_proc: int, scratch: str) -> dict:
    from electra.data.packing import ExampleSettings, build_pretraining_dataset
    from electra.data.tokenization import load_vocab_tokenizer

    tokenizer = load_vocab_tokenizer(vocab)
    settings = ExampleSettings(max_seq_length=BLOCK)
    dataset = build_pretraining_dataset(
        corpus, tokenizer, cache_dir=scratch, num_proc=num_proc, settings=settings, show_progress=False
    )
    return {"examples": len(dataset)}


def _blocks_of(batch: dict[str, list[list[int]]], block: int = BLOCK) -> dict[str, list[list[int]]]:
    """Every column's token lists laid end to end and cut into rows of `block`; the tail shorter than a block is
    dropped (as `run_mlm.py` does)."""
    out = {}
    for column, rows in batch.items():
        joined = [token for row in rows for token in row]
        usable = len(joined) - len(joined) % block
        out[column] = [joined[start : start + block] for start in range(0, usable, block)]
    return out


def _work_run_mlm(corpus: str, vocab: str, num_proc: int, scratch: str) -> dict:
    import datasets
    from transformers import BertTokenizerFast

    datasets.disable_progress_bars()
    tokenizer = BertTokenizerFast(vocab_file=vocab)
    raw = datasets.load_dataset("json", data_files=corpus, split="train", cache_dir=scratch)

    def tokenize(batch):
        return tokenizer(batch["text"], return_special_tokens_mask=True)

    tokenized = raw.map(tokenize, batched=True, num_proc=num_proc, remove_columns=["text"])
    grouped = tokenized.map(_blocks_of, batched=True, num_proc=num_proc)
    return {"examples": len(grouped)}


def _work_ours_stream(corpus: str, vocab: str, num_proc: int, scratch: str) -> dict:
    from electra.data.packing import ExampleSettings, PretrainingCollator
    from electra.data.streaming import StreamSpec, stream_loader
    from electra.data.tokenization import load_vocab_tokenizer

    tokenizer = load_vocab_tokenizer(vocab)
    started = time.perf_counter()
    spec = StreamSpec(
        corpus=corpus,
        doc_boundary="auto",
        strict_utf8=False,
        text_field="text",
        tokenizer_json=tokenizer.backend_tokenizer.to_str(),
        cls_id=tokenizer.cls_token_id,
        sep_id=tokenizer.sep_token_id,
        settings=ExampleSettings(max_seq_length=BLOCK),
        seed=0,
        ledger_dir=scratch,
    )
    collate = PretrainingCollator(tokenizer.pad_token_id)
    batches = iter(stream_loader(spec, collate, BLOCK, rank=0, world=1, workers=num_proc, start=0))
    next(batches)
    first = time.perf_counter() - started
    for _ in range(STREAM_BATCHES):
        next(batches)
    rate = STREAM_BATCHES * BLOCK / (time.perf_counter() - started - first)
    # windows the streams had packed by then (workers run ahead of the loader: a few more than it drew from)
    packed = sum(1 for ledger in Path(scratch).glob("slot-*.txt") for line in ledger.read_text().splitlines())
    return {
        "examples": (STREAM_BATCHES + 1) * BLOCK,
        "first_batch_s": first,
        "stream_examples_per_s": rate,
        "windows_packed": packed,
    }


WORK = {"ours": _work_ours, "run_mlm": _work_run_mlm, "ours-stream": _work_ours_stream}


def _worker(tool: str, corpus: str, vocab: str, num_proc: int, scratch: str) -> None:
    started = time.perf_counter()
    result = WORK[tool](corpus, vocab, num_proc, scratch)
    result["work_s"] = time.perf_counter() - started
    result["maxrss_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    result["maxrss_children"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# --- measuring a subprocess tree -----------------------------------------------------------------------------------


def _tree_rss(process) -> tuple[int, int, int]:
    """(sum of RSS, largest RSS, process count) of `process` and its descendants now; vanished ones count 0."""
    import psutil

    try:
        members = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0, 0
    total = largest = 0
    for member in members:
        try:
            rss = member.memory_info().rss
        except psutil.NoSuchProcess:
            continue
        total += rss
        largest = max(largest, rss)
    return total, largest, len(members)


def measure(tool: str, corpus: Path, vocab: Path, num_proc: int, scratch_root: Path | None = None) -> dict:
    """Run one tool on one corpus in a fresh subprocess with a fresh cache directory; return its wall time, MB/s,
    peak tree and single-process RSS, and its examples. Raise RuntimeError with the subprocess's last output if it
    fails."""
    import psutil

    scratch = Path(tempfile.mkdtemp(prefix=f"dt-{tool}-", dir=scratch_root))
    env = dict(os.environ)
    # Every cache into the fresh directory, nothing from the network: the run measures the work, not a cache hit.
    env.update(
        HF_DATASETS_CACHE=str(scratch / "hf"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        ELECTRA_CACHE=str(scratch / "electra"),
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", tool, "--corpus", str(corpus)]
    argv += ["--vocab", str(vocab), "--num-proc", str(num_proc), "--scratch", str(scratch / "out")]
    peak_tree = peak_single = peak_processes = 0
    try:
        with open(scratch / "stdout", "w+") as stdout, open(scratch / "stderr", "w+") as stderr:
            started = time.perf_counter()
            child = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, cwd=str(scratch))
            process = psutil.Process(child.pid)
            while child.poll() is None:
                total, largest, count = _tree_rss(process)
                peak_tree, peak_single = max(peak_tree, total), max(peak_single, largest)
                peak_processes = max(peak_processes, count)
                time.sleep(POLL_SECONDS)
            wall = time.perf_counter() - started
            stdout.seek(0)
            lines = [line for line in stdout.read().splitlines() if line.startswith(RESULT_PREFIX)]
            if child.returncode != 0 or not lines:
                stderr.seek(0)
                tail = stderr.read()[-3000:]
                raise RuntimeError(f"{tool} on {corpus} exited with {child.returncode}:\n{tail}")
        result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    size = corpus.stat().st_size
    kernel_single = max(result.pop("maxrss_self"), result.pop("maxrss_children"))
    return {
        "tool": tool,
        "corpus_bytes": size,
        "wall_s": wall,
        "mb_per_s": size / MB / wall,
        "peak_rss_tree_bytes": peak_tree,
        "peak_rss_largest_bytes": max(peak_single, kernel_single),
        "peak_rss_largest_polled_bytes": peak_single,
        "peak_processes": peak_processes,
        **result,
    }


# --- report --------------------------------------------------------------------------------------------------------


def machine_info() -> dict:
    import importlib.metadata

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for package in ("torch", "tokenizers", "datasets", "transformers", "psutil"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    commit = (
        subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown (not a git checkout)"
    )
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "electra/data"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    import psutil

    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / GB, 1),
        "python": platform.python_version(),
        "commit": commit + (" (electra/data modified)" if dirty else ""),
        **versions,
    }


def summarise(runs: list[dict]) -> dict:
    """min/median/max of each measured figure over the repeats of one tool at one size."""
    keys = ("wall_s", "mb_per_s", "peak_rss_tree_bytes", "peak_rss_largest_bytes")
    out = {"tool": runs[0]["tool"], "corpus_bytes": runs[0]["corpus_bytes"], "repeats": len(runs)}
    for key in keys:
        values = [run[key] for run in runs]
        out[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    out["examples"] = runs[0].get("examples")
    for key in ("first_batch_s", "stream_examples_per_s"):
        if key in runs[0]:
            values = [run[key] for run in runs]
            out[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    return out


def _cell(stat: dict, scale: float = 1.0, digits: int = 1) -> str:
    median = f"{stat['median'] / scale:.{digits}f}"
    if stat["min"] == stat["max"]:
        return median
    return f"{median} ({stat['min'] / scale:.{digits}f}–{stat['max'] / scale:.{digits}f})"


def markdown(report: dict) -> str:
    machine = report["machine"]
    lines = [
        f"Data preparation, {machine['date_utc'][:10]}, {machine['cpu']}, {machine['cores_usable']} cores, "
        f"{machine['ram_gb']} GB RAM, num_proc={report['num_proc']}, commit {machine['commit']}; torch "
        f"{machine['torch']}, tokenizers {machine['tokenizers']}, datasets {machine['datasets']}, transformers "
        f"{machine['transformers']}. Median (min–max) over {report['repeats']} repeat(s).",
        "",
        "| corpus | tool | wall s | MB/s | peak RSS tree GB | peak RSS largest process GB | examples |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        examples = "" if row["examples"] is None else f"{row['examples']:,}"
        tool = row["tool"]
        rate = _cell(row["mb_per_s"], digits=2)
        if "first_batch_s" in row:  # a stream is not read to its end: its wall time is the sample's
            tool += (
                f" (first batch {_cell(row['first_batch_s'], digits=2)} s, then "
                f"{_cell(row['stream_examples_per_s'], digits=0)} examples/s)"
            )
            rate = "–"
        lines.append(
            f"| {row['corpus_bytes'] / GB:.3g} GB | {tool} | {_cell(row['wall_s'])} | {rate}"
            f" | {_cell(row['peak_rss_tree_bytes'], GB, 2)} | {_cell(row['peak_rss_largest_bytes'], GB, 2)}"
            f" | {examples} |"
        )
    ratios = report["ratios"]
    if ratios:
        lines += [
            "",
            "| corpus | throughput ours / run_mlm | peak tree ours / run_mlm | peak largest ours / run_mlm |",
        ]
        lines.append("|---|---:|---:|---:|")
        for ratio in ratios:
            lines.append(
                f"| {ratio['corpus_bytes'] / GB:.3g} GB | {ratio['throughput']:.2f}× | {ratio['peak_tree']:.2f}× "
                f"| {ratio['peak_largest']:.2f}× |"
            )
    return "\n".join(lines) + "\n"


def ratios_of(results: list[dict]) -> list[dict]:
    """Per size, our median throughput and peaks over the run_mlm path's."""
    out = []
    for size in sorted({row["corpus_bytes"] for row in results}):
        by_tool = {row["tool"]: row for row in results if row["corpus_bytes"] == size}
        ours, theirs = by_tool.get("ours"), by_tool.get("run_mlm")
        if ours and theirs:
            out.append(
                {
                    "corpus_bytes": size,
                    "throughput": ours["mb_per_s"]["median"] / theirs["mb_per_s"]["median"],
                    "peak_tree": ours["peak_rss_tree_bytes"]["median"]
                    / theirs["peak_rss_tree_bytes"]["median"],
                    "peak_largest": ours["peak_rss_largest_bytes"]["median"]
                    / theirs["peak_rss_largest_bytes"]["median"],
                }
            )
    return out


# --- command line --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.25,1", help="corpus sizes in GB (10^9 bytes), comma-separated")
    parser.add_argument("--out", type=Path, help="folder for results.json and results.md")
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB, help="WordPiece vocab.txt (BERT's)")
    parser.add_argument("--num-proc", type=int, default=os.cpu_count() or 1, help="workers for both tools")
    parser.add_argument(
        "--source", type=Path, default=DEFAULT_SOURCE, help="text the paragraphs are drawn from"
    )
    parser.add_argument(
        "--workdir", type=Path, help="where corpora are written and reused (default: a temp dir)"
    )
    parser.add_argument("--keep-corpora", action="store_true", help="keep corpora in a temp --workdir")
    parser.add_argument("--tools", default="ours,run_mlm,ours-stream", help=f"any of {','.join(TOOLS)}")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each tool at each size")
    parser.add_argument("--seed", type=int, default=0, help="seed of the paragraph draws")
    # Internal: one measured run, in the subprocess `measure` starts.
    parser.add_argument("--worker", choices=TOOLS, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None:
        tools = [t for t in args.tools.split(",") if t]
        unknown = sorted(set(tools) - set(TOOLS))
        if unknown:
            parser.error(f"--tools: unknown {', '.join(unknown)}; choose from {', '.join(TOOLS)}")
        args.tools = tools
        if not args.vocab.is_file():
            parser.error(f"--vocab {args.vocab} is not a file; give a WordPiece vocab.txt (e.g. BERT's)")
        args.vocab = args.vocab.resolve()  # the measured work runs in another folder
        if not args.source.exists():
            parser.error(f"--source {args.source} does not exist; give a folder or file of text")
        if args.repeats < 1 or args.num_proc < 1:
            parser.error("--repeats and --num-proc must be at least 1")
    return args


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.worker:
        _worker(args.worker, args.corpus, str(args.vocab), args.num_proc, args.scratch)
        return None
    sizes = [int(float(s) * GB) for s in args.sizes.split(",") if s]
    tools = list(args.tools)
    temporary = args.workdir is None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="data-throughput-"))
    started = time.perf_counter()
    paragraphs = load_paragraphs(args.source)
    print(
        f"{len(paragraphs):,} paragraphs from {args.source} in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    results = []
    try:
        for size in sizes:
            started = time.perf_counter()
            corpus = build_corpus(paragraphs, size, workdir, args.seed)
            print(f"corpus {corpus} ready in {time.perf_counter() - started:.1f} s", flush=True)
            for tool in tools:
                runs = []
                for repeat in range(args.repeats):
                    run = measure(tool, corpus, args.vocab, args.num_proc)
                    runs.append(run)
                    print(
                        f"  {tool} [{repeat + 1}/{args.repeats}]: {run['wall_s']:.1f} s, {run['mb_per_s']:.2f} MB/s, "
                        f"peak tree {run['peak_rss_tree_bytes'] / GB:.2f} GB, largest "
                        f"{run['peak_rss_largest_bytes'] / GB:.2f} GB, {run.get('examples')} examples",
                        flush=True,
                    )
                results.append({**summarise(runs), "runs": runs})
    finally:
        if temporary and not args.keep_corpora:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "machine": machine_info(),
        "num_proc": args.num_proc,
        "repeats": args.repeats,
        "seed": args.seed,
        "source": str(args.source),
        "vocab": str(args.vocab),
        "results": results,
        "ratios": ratios_of(results),
    }
    table = markdown(report)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "results.md").write_text(table)
    return report


if __name__ == "__main__":
    main()
