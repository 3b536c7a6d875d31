"""BM25 retrieval of a task-relevant corpus (TLM's data step) from the index `electra.tlm.indexing` builds.

Each task example queries the index (long inputs through RAKE keywords); the top-K passages of every query are
unioned, deduplicated, and written as a plain-text corpus that `electra.data.packing.read_documents` reads, with
its provenance and a summary that `check_selection` holds the corpus to.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import read_json_record, write_json_atomically
from electra.tlm.keywords import keyword_query
from electra.tlm.saved_index import BM25Index

logger = logging.getLogger(__name__)

CORPUS_SUBDIR = "corpus"  # the folder the pretraining data pipeline reads
CORPUS_FILE = "retrieved.txt"
PROVENANCE_FILE = "retrieved.jsonl"  # kept outside CORPUS_SUBDIR so a directory reader never sees it twice
SUMMARY_FILE = "summary.json"


def make_query(text: str, long_query_words: int = 64, keyword_words: int = 32) -> str:
    """Short inputs are their own query; longer ones are replaced by their RAKE keywords (TLM's long-text queries)."""
    if len(text.split()) <= long_query_words:
        return text
    return keyword_query(text, keyword_words) or text


@dataclass
class RetrievalResult:
    """The deduplicated union: passage ids in first-retrieved order, and the queries that retrieved each."""

    doc_ids: list[int] = field(default_factory=list)
    queries: dict[int, list[int]] = field(default_factory=dict)
    best_score: dict[int, float] = field(default_factory=dict)
    best_rank: dict[int, int] = field(default_factory=dict)  # the best position any query gave the passage
    empty_queries: int = 0

    def cut(self, size: int) -> list[int]:
        """The `size` passages BM25 ranks highest for some query (all queries' first hits, then their seconds, ...)."""
        position = {doc_id: n for n, doc_id in enumerate(self.doc_ids)}
        return sorted(self.doc_ids, key=lambda d: (self.best_rank[d], position[d]))[:size]


def union_top_k(hits: Sequence[Sequence[tuple[int, float]]]) -> RetrievalResult:
    """Merge per-query hit lists into one list with each passage once, remembering provenance."""
    result = RetrievalResult()
    for query_id, query_hits in enumerate(hits):
        if not query_hits:
            result.empty_queries += 1
        for rank, (doc_id, score) in enumerate(query_hits):
            if doc_id not in result.queries:
                result.doc_ids.append(doc_id)
                result.queries[doc_id] = []
                result.best_score[doc_id] = score
                result.best_rank[doc_id] = rank
            result.queries[doc_id].append(query_id)
            result.best_score[doc_id] = max(result.best_score[doc_id], score)
            result.best_rank[doc_id] = min(result.best_rank[doc_id], rank)
    return result


def retrieve(
    index: BM25Index,
    texts: Sequence[str],
    top_k: int,
    long_query_words: int = 64,
    keyword_words: int = 32,
    progress: bool = True,
    source: str = "task",
) -> RetrievalResult:
    """The deduplicated union of every task text's top-k passages (long texts query with their keywords).
    `top_k` is at least 1: `electra tlm retrieve` checks --top-k before the index is built; `texts` are a task
    file's, which `electra.tlm.tasks.read_task_file` refuses when it holds no examples."""
    queries = [make_query(t, long_query_words, keyword_words) for t in texts]
    result = union_top_k(index.search(queries, top_k, progress=progress))
    if not result.doc_ids:
        raise UserError(
            f"{source}: BM25 retrieved nothing for {len(texts)} queries (no query shares a word with the corpus "
            f"in {index.dir}); check that the corpus and the task are in the same language and not empty."
        )
    return result


def write_selection(
    index: BM25Index,
    result: RetrievalResult,
    doc_ids: Sequence[int],
    out_dir: str | Path,
    summary: dict,
    extra: dict[int, dict] | None = None,
) -> dict:
    """`OUT/corpus/retrieved.txt` (blank-line separated), its provenance JSONL and `summary.json`: the one layout
    every selection (BM25, ISS) writes and `tlm train --retrieved` reads. Returns the summary as written.

    The two text files are written under hidden names and renamed into place once whole, and `summary.json`,
    which records the corpus's size, comes last (an earlier one is deleted first): written in place, a run
    interrupted half way (Ctrl-C, SIGTERM, a full disk) left a cut-short corpus that `tlm train` trained on
    without a word, and a rerun was refused because OUT/corpus existed. `check_selection` tells a complete
    selection from one without its summary or of another size.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus_path = out_dir / CORPUS_SUBDIR / CORPUS_FILE
    # hidden, so no corpus reader takes them for text; beside OUT/corpus, so the moves are renames
    staged_corpus = out_dir / f".{CORPUS_FILE}.partial"
    staged_provenance = out_dir / f".{PROVENANCE_FILE}.partial"
    try:
        with (
            open(staged_corpus, "w", encoding="utf-8") as corpus,
            open(staged_provenance, "w", encoding="utf-8") as prov,
        ):
            for doc_id in doc_ids:
                text = index.get(doc_id)
                corpus.write(text + "\n\n")
                record = {
                    "id": doc_id,
                    "score": result.best_score[doc_id],
                    "queries": result.queries[doc_id],
                    **((extra or {}).get(doc_id, {})),
                    "text": text,
                }
                prov.write(json.dumps(record) + "\n")
        (out_dir / SUMMARY_FILE).unlink(missing_ok=True)  # it would describe the files replaced below
        corpus_path.parent.mkdir(exist_ok=True)
        os.replace(staged_provenance, out_dir / PROVENANCE_FILE)
        os.replace(staged_corpus, corpus_path)
    finally:  # after a success both are gone already
        staged_corpus.unlink(missing_ok=True)
        staged_provenance.unlink(missing_ok=True)
    summary = {
        **summary,
        "retrieved_passages": len(doc_ids),
        "corpus_bytes": corpus_path.stat().st_size,
        "index": str(index.dir),
        "index_passages": index.num_docs,
    }
    write_json_atomically(out_dir / SUMMARY_FILE, summary)
    return summary


def check_selection(folder: str | Path) -> None:
    """Refuse, in one line, a `tlm retrieve` output whose corpus is not the one it wrote: no `summary.json` beside
    OUT/corpus/retrieved.txt (the run was stopped before it finished, or by a version that wrote in place), or a
    corpus of another size than the summary records (cut short by a copy or a full disk, edited by hand).
    Training on it would silently train on other text than the selection. A folder that is no `tlm retrieve`
    output (any corpus) is not checked; nor is a summary from before the size was recorded."""
    folder = Path(folder)
    corpus_path = folder / CORPUS_SUBDIR / CORPUS_FILE
    if not corpus_path.is_file():
        return
    use_as_is = f"run `electra tlm retrieve` again (with --overwrite), or pass {folder / CORPUS_SUBDIR} to train on it as it is"
    summary = read_json_record(folder / SUMMARY_FILE)
    if summary is None:
        raise UserError(
            f"{corpus_path}: no readable {SUMMARY_FILE} beside it, so `electra tlm retrieve` did not finish "
            f"writing it; {use_as_is}."
        )
    written = summary.get("corpus_bytes")
    size = corpus_path.stat().st_size
    if written is not None and size != written:
        raise UserError(
            f"{corpus_path}: holds {size} bytes, not the {written} `electra tlm retrieve` wrote (cut short or "
            f"edited); {use_as_is}."
        )


def retrieve_corpus(
    index: BM25Index,
    texts: Sequence[str],
    top_k: int,
    out_dir: str | Path,
    long_query_words: int = 64,
    keyword_words: int = 32,
    progress: bool = True,
    source: str = "task",
    select_size: int | None = None,
) -> RetrievalResult:
    """Query with every task text and write the union (cut to BM25's best `select_size` passages when given;
    at least 1, as `electra tlm retrieve` checks --select-size before the index is built)."""
    start = time.perf_counter()
    result = retrieve(index, texts, top_k, long_query_words, keyword_words, progress, source)
    if select_size is not None and select_size > len(result.doc_ids):
        # as ISS refuses it: a smaller corpus than asked for, silently, is no equal-size comparison
        raise UserError(
            f"--select-size {select_size} is more than the {len(result.doc_ids)} passages BM25's top-{top_k} "
            "pool holds; raise --top-k or lower --select-size."
        )
    doc_ids = result.cut(select_size) if select_size else result.doc_ids
    summary = {
        "select": "bm25",
        "queries": len(texts),
        "queries_without_hits": result.empty_queries,
        "top_k": top_k,
        "candidates": len(result.doc_ids),
        "selection_seconds": round(time.perf_counter() - start, 3),
    }
    write_selection(index, result, doc_ids, out_dir, summary)
    logger.info("retrieved %d unique passages for %d queries", len(doc_ids), len(texts))
    result.doc_ids = list(doc_ids)
    return result


def read_retrieved(out_dir: str | Path) -> Iterator[dict]:
    """The provenance records written by `retrieve_corpus`, in order."""
    with open(Path(out_dir) / PROVENANCE_FILE) as handle:
        for line in handle:
            yield json.loads(line)
