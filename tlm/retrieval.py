"""BM25 retrieval of a task-relevant corpus (TLM's data step), on `bm25s`: no server, index built once and saved.

The general corpus is streamed: documents are cut into passages, written to a line-indexed store on disk, and only
their BM25 token ids stay in memory, so the text of a corpus larger than memory never has to be held at once.
Each task example queries the index (long inputs through RAKE keywords); the top-K passages of every query are
unioned, deduplicated, and written as a plain-text corpus that `electra.data.read_documents` reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from electra.corpus import read_documents
from electra.errors import UserError
from electra.run_log import progress_off
from tlm.keywords import keyword_query

logger = logging.getLogger(__name__)

INDEX_FORMAT = 1
META_FILE = "tlm_index.json"
DOCS_FILE = "passages.jsonl"
OFFSETS_FILE = "passages.offsets.npy"
BM25_DIR = "bm25"
CORPUS_SUBDIR = "corpus"  # the folder the pretraining data pipeline reads
CORPUS_FILE = "retrieved.txt"
PROVENANCE_FILE = "retrieved.jsonl"  # kept outside CORPUS_SUBDIR so a directory reader never sees it twice


def split_passages(document: str, max_words: int = 128, min_words: int = 5) -> list[str]:
    """Pack a document's lines into passages of at most `max_words` words (long lines are cut into windows).

    Retrieval units must be short: a whole book or speech would match every query. Lines are packed greedily so
    verse or one-sentence-per-line text still makes passages of useful length; fragments under `min_words`
    (titles, page headers) are dropped.
    """
    passages: list[str] = []
    current: list[str] = []
    for line in document.splitlines():
        words = line.split()
        while len(words) > max_words:  # a long paragraph: flush, then emit full windows
            if current:
                passages.append(" ".join(current))
                current = []
            passages.append(" ".join(words[:max_words]))
            words = words[max_words:]
        if not words:
            # A blank line closes a passage that is already long enough.
            if current and len(current) >= max_words // 2:
                passages.append(" ".join(current))
                current = []
            continue
        if len(current) + len(words) > max_words:
            passages.append(" ".join(current))
            current = []
        current.extend(words)
    if current:
        passages.append(" ".join(current))
    return [p for p in passages if len(p.split()) >= min_words]


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(" ".join(text.lower().split()).encode("utf-8"), digest_size=12).digest()


def _bm25_tokens(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class BM25Index:
    """A saved BM25 index plus its passage store; `search` returns (passage id, score) lists."""

    def __init__(self, index_dir: str | Path):
        import bm25s

        self.dir = Path(index_dir)
        meta_path = self.dir / META_FILE
        if not meta_path.is_file():
            raise UserError(
                f"{self.dir}: no BM25 index here ({META_FILE} missing); build it with `electra tlm retrieve`."
            )
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("format") != INDEX_FORMAT:
            raise UserError(
                f"{meta_path}: index format {self.meta.get('format')} is not {INDEX_FORMAT}; rebuild it."
            )
        self.retriever = bm25s.BM25.load(str(self.dir / BM25_DIR), show_progress=False, mmap=True)
        self.offsets = np.load(self.dir / OFFSETS_FILE)
        self._docs = open(self.dir / DOCS_FILE, "rb")  # kept open: passages are read by offset

    @property
    def num_docs(self) -> int:
        return int(self.offsets.shape[0])

    def get(self, doc_id: int) -> str:
        self._docs.seek(int(self.offsets[doc_id]))
        return json.loads(self._docs.readline())["text"]

    def search(
        self, queries: Sequence[str], k: int, batch_size: int = 256, progress: bool = False
    ) -> list[list[tuple[int, float]]]:
        """Top-k passages per query, best first; passages with score 0 (no shared term) are left out."""
        from tqdm.auto import tqdm

        k = min(k, self.num_docs)
        results: list[list[tuple[int, float]]] = []
        starts = range(0, len(queries), batch_size)
        for start in tqdm(starts, desc="bm25 search", unit="batch", disable=not progress or progress_off()):
            tokens = _bm25_tokens(queries[start : start + batch_size])
            known = [[t for t in q if t in self.retriever.vocab_dict and t] for q in tokens]
            active = [i for i, q in enumerate(known) if q]
            batch: list[list[tuple[int, float]]] = [[] for _ in known]
            if active:
                docs, scores = self.retriever.retrieve(
                    [known[i] for i in active], k=k, show_progress=False, n_threads=0
                )
                for row, i in enumerate(active):
                    batch[i] = [(int(d), float(s)) for d, s in zip(docs[row], scores[row]) if s > 0]
            results.extend(batch)
        return results

    def close(self) -> None:
        self._docs.close()

    def __enter__(self) -> BM25Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_index(
    documents: Iterable[str],
    index_dir: str | Path,
    max_words: int = 128,
    min_words: int = 5,
    chunk_size: int = 5000,
    source: str | None = None,
    progress: bool = True,
) -> BM25Index:
    """Stream documents into passages, store them on disk, index their BM25 tokens, save everything.

    Exact duplicate passages (case and spacing ignored) are stored once, so retrieval never returns two copies.
    """
    import bm25s
    from bm25s.tokenization import Tokenizer
    from tqdm.auto import tqdm

    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    progress = progress and not progress_off()  # --no-progress silences bm25s's own bars too
    # The same lowercasing, token pattern and stopwords as `bm25s.tokenize` applies to queries.
    tokenizer = Tokenizer(stopwords="en")
    token_ids: list[np.ndarray] = []
    offsets: list[int] = []
    seen: set[bytes] = set()
    pending: list[str] = []
    num_documents = 0

    with open(index_dir / DOCS_FILE, "wb") as store:

        def flush() -> None:
            for text, ids in zip(pending, tokenizer.streaming_tokenize(pending, update_vocab=True)):
                offsets.append(store.tell())
                store.write((json.dumps({"id": len(token_ids), "text": text}) + "\n").encode("utf-8"))
                token_ids.append(np.asarray(ids, dtype=np.int32))
            pending.clear()

        for document in tqdm(documents, desc="indexing corpus", unit="doc", disable=not progress):
            num_documents += 1
            for passage in split_passages(document, max_words, min_words):
                key = _text_key(passage)
                if key in seen:
                    continue
                seen.add(key)
                pending.append(passage)
            if len(pending) >= chunk_size:
                flush()
        flush()

    if not token_ids:
        raise UserError(
            f"{source or index_dir}: the corpus has no passage of {min_words} words or more; check the path and format."
        )
    retriever = bm25s.BM25()
    retriever.index((token_ids, tokenizer.get_vocab_dict()), show_progress=progress)
    retriever.save(str(index_dir / BM25_DIR), show_progress=False)
    np.save(index_dir / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    meta = {
        "format": INDEX_FORMAT,
        "source": source,
        "num_documents": num_documents,
        "num_passages": len(token_ids),
        "max_words": max_words,
        "min_words": min_words,
    }
    (index_dir / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    logger.info("indexed %d passages from %d documents into %s", len(token_ids), num_documents, index_dir)
    return BM25Index(index_dir)


def load_or_build_index(
    corpus: str | Path | Sequence[str | Path],
    index_dir: str | Path,
    max_words: int = 128,
    min_words: int = 5,
    progress: bool = True,
) -> BM25Index:
    """Reuse the index in `index_dir` when it was built from the same corpus (one path or several) with the same
    passage sizes; otherwise stream the corpus through the library's reader and build it."""
    corpora = [Path(corpus)] if isinstance(corpus, str | Path) else [Path(c) for c in corpus]
    index_dir = Path(index_dir)
    meta_path = index_dir / META_FILE
    source = " + ".join(str(c.resolve()) for c in corpora)
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if [meta.get("source"), meta.get("max_words"), meta.get("min_words")] == [
            source,
            max_words,
            min_words,
        ]:
            logger.info("reusing the BM25 index in %s", index_dir)
            return BM25Index(index_dir)
        logger.info("the index in %s was built from another corpus or passage size; rebuilding", index_dir)
    for path in corpora:
        if not path.exists():
            raise UserError(
                f"{path}: corpus path does not exist; pass a text file, a .jsonl file or a folder."
            )
    # the library's one corpus reader (it strips Brown's /tags)
    documents = (document for path in corpora for document in read_documents(str(path)))
    return build_index(documents, index_dir, max_words, min_words, source=source, progress=progress)


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
    """The deduplicated union of every task text's top-k passages (long texts query with their keywords)."""
    if top_k < 1:
        raise UserError(f"--top-k must be at least 1, got {top_k}.")
    if not texts:
        raise UserError(f"{source}: no task texts to query with; is the file empty?")
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
    every selection (BM25, ISS) writes and `tlm train --retrieved` reads. Returns the summary as written."""
    out_dir = Path(out_dir)
    (out_dir / CORPUS_SUBDIR).mkdir(parents=True, exist_ok=True)
    with (
        open(out_dir / CORPUS_SUBDIR / CORPUS_FILE, "w") as corpus,
        open(out_dir / PROVENANCE_FILE, "w") as prov,
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
    summary = {
        **summary,
        "retrieved_passages": len(doc_ids),
        "index": str(index.dir),
        "index_passages": index.num_docs,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


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
    """Query with every task text and write the union (cut to BM25's best `select_size` passages when given)."""
    start = time.perf_counter()
    result = retrieve(index, texts, top_k, long_query_words, keyword_words, progress, source)
    if select_size is not None and select_size < 1:
        raise UserError(f"--select-size must be at least 1, got {select_size}.")
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
