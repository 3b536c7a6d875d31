"""bench/data_throughput.py at two tiny sizes: our packing's peak memory must not grow with the corpus (#51).

Memory is measured by the bench on the subprocess tree that does the work (the packing process and its `num_proc`
workers), never on this test's process. Nothing here is timed.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "data_throughput.py"
MB = 10**6
WORDS = (
    "the a of to and in city river council school market garden winter summer people worked built opened walked "
    "found said asked gave took made road bridge station library hospital museum farmers teachers workers "
    "children families morning evening north south old new small large quiet busy early late"
).split()


def _bench():
    spec = importlib.util.spec_from_file_location("bench_data_throughput", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source_and_vocab(directory: Path) -> tuple[Path, Path]:
    """A text of 3,000 seeded paragraphs of plain sentences, and a WordPiece vocabulary holding all its words (so
    tokenising is cheap and the run's time goes to reading and packing)."""
    rng = random.Random(1)
    paragraphs = []
    for _ in range(3000):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
            for _ in range(rng.randint(3, 8))
        ]
        paragraphs.append(" ".join(sentences))
    source = directory / "source.txt"
    source.write_text("\n\n".join(paragraphs) + "\n")
    characters = sorted(set("".join(WORDS)) | {"."})
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS)), *characters]
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(pieces + ["##" + c for c in characters]) + "\n")
    return source, vocab


def test_synthetic_corpus_is_json_lines_of_5kb_documents_and_reused(tmp_path):
    import json

    bench = _bench()
    source, _ = _source_and_vocab(tmp_path)
    paragraphs = bench.load_paragraphs(source)
    corpus = bench.build_corpus(paragraphs, MB, tmp_path / "work", seed=0)
    lines = corpus.read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    assert corpus.stat().st_size >= MB and all(len(t) >= bench.DOCUMENT_CHARS for t in texts)
    assert all(set(t.split("\n")) <= set(paragraphs) for t in texts[:20])
    modified = corpus.stat().st_mtime_ns
    assert bench.build_corpus(paragraphs, MB, tmp_path / "work", seed=0) == corpus
    assert corpus.stat().st_mtime_ns == modified  # reused, not rewritten
    assert bench.build_corpus(paragraphs, MB, tmp_path / "work", seed=1) != corpus


def test_peak_memory_of_our_packing_does_not_grow_with_corpus_size(tmp_path, monkeypatch):
    """Peak RSS of the packing's process tree at 12 MB and 48 MB of JSON lines (the smaller one past the workers'
    warm-up): the extra peak may be at most the extra corpus bytes, plus 24 MB of slack for allocator and polling
    noise.

    Why not `peak(48 MB) <= 1.25 x peak(12 MB)`: at these sizes the fixed part (imports in the main process and in
    each forked worker, ~1.2 GB summed over the tree on 2 workers) hides any growth, and a reader that holds a file
    whole passes it. A bound on extra memory per extra corpus byte does not: holding the file whole costs 3-4 bytes
    in the main process per corpus byte, and ~11 summed over the tree (forked workers count the pages the reader
    left behind), while a streaming reader's peak stays flat."""
    bench = _bench()
    # The packers' word caches grow until their bound (400k words, reached after ~100 MB of text); a small bound
    # shows here, on small corpora, the flat memory that large ones get.
    monkeypatch.setenv("ELECTRA_WORD_CACHE", "5000")
    source, vocab = _source_and_vocab(tmp_path)
    paragraphs = bench.load_paragraphs(source)
    small, large = (
        bench.build_corpus(paragraphs, size, tmp_path / "work", seed=0) for size in (12 * MB, 48 * MB)
    )
    low = bench.measure("ours", small, vocab, num_proc=2, scratch_root=tmp_path)
    high = bench.measure("ours", large, vocab, num_proc=2, scratch_root=tmp_path)
    assert low["examples"] > 0 and high["examples"] > 3 * low["examples"]
    assert low["peak_processes"] >= 3  # the tree was seen: the main process and its 2 workers
    extra_corpus = high["corpus_bytes"] - low["corpus_bytes"]
    slack = 24 * MB
    for key in ("peak_rss_tree_bytes", "peak_rss_largest_bytes"):
        extra = high[key] - low[key]
        assert extra <= extra_corpus + slack, (
            f"{key}: {low[key] / MB:.0f} MB at 12 MB, {high[key] / MB:.0f} MB at 48 MB of corpus: "
            f"{extra / extra_corpus:.1f} bytes of peak memory per extra corpus byte"
        )


def test_the_streaming_loader_gives_its_first_batch_without_packing_the_corpus(tmp_path):
    """`ours-stream` draws from `--streaming`'s loader: examples come back, and only a few of the corpus's
    windows were packed (its streams' ledgers count them)."""
    bench = _bench()
    source, vocab = _source_and_vocab(tmp_path)
    corpus = bench.build_corpus(bench.load_paragraphs(source), 48 * MB, tmp_path / "work", seed=0)
    run = bench.measure("ours-stream", corpus, vocab, num_proc=2, scratch_root=tmp_path)
    assert run["examples"] == (bench.STREAM_BATCHES + 1) * bench.BLOCK
    assert run["first_batch_s"] > 0 and run["stream_examples_per_s"] > 0
    assert 2 <= run["windows_packed"] < 48 * MB // 4_000_000
