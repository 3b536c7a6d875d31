"""`electra tlm retrieve` below its flags: the BM25 index built or reused, then the selection written to OUT,
either BM25's top-K union (`electra.tlm.retrieval`) or ISS's influence-based subset of it (`electra.tlm.iss`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.tlm import indexing
from electra.tlm.iss import check_reference, select_with_reference
from electra.tlm.retrieval import retrieve_corpus
from electra.tlm.settings import TLMSettings


@dataclass(frozen=True)
class CorpusSelection:
    """What `electra tlm retrieve` selects, its flags checked: the corpus and its index, the queries' top-K and
    RAKE settings, and the size to keep. `reference` is ISS's reference run (None: the BM25 union), with its
    `iss_layer`, `iss_batch_size` and `progress`."""

    corpus: Sequence[str]
    task_train: str
    out: str
    index_dir: Path
    top_k: int
    passage_words: int
    min_passage_words: int
    long_query_words: int
    keyword_words: int
    select_size: int | None
    reference: TLMSettings | None = None
    iss_layer: int | str = -1
    iss_batch_size: int = 16
    progress: bool = True


def select_corpus(selection: CorpusSelection, texts: Sequence[str]) -> str:
    """Select with the task's `texts` as queries and write OUT; return the line that says what was kept. ISS's
    reference run is checked (`electra.tlm.iss.check_reference`) before the index is built, an hour on a large
    corpus."""
    s = selection
    out = Path(s.out)
    if s.reference is not None:
        check_reference(s.reference, s.iss_layer)
    with indexing.load_or_build_index(s.corpus, s.index_dir, s.passage_words, s.min_passage_words) as index:
        if s.reference is not None:
            summary = _select_iss(s, index)
            return (
                f"ISS kept {summary['retrieved_passages']} of {summary['candidates']} BM25 candidates in "
                f"{summary['selection_seconds']:.1f} s -> {out / 'corpus'}"
            )
        result = retrieve_corpus(
            index,
            texts,
            s.top_k,
            s.out,
            long_query_words=s.long_query_words,
            keyword_words=s.keyword_words,
            source=s.task_train,
            select_size=s.select_size,
        )
        total = index.num_docs
    return (
        f"retrieved {len(result.doc_ids)} unique passages (of {total} indexed) for {len(texts)} queries "
        f"-> {out / 'corpus'}"
    )


def _select_iss(s: CorpusSelection, index) -> dict:
    return select_with_reference(
        index,
        s.reference,
        s.top_k,
        s.select_size,
        s.out,
        layer=s.iss_layer,
        batch_size=s.iss_batch_size,
        long_query_words=s.long_query_words,
        keyword_words=s.keyword_words,
        progress=s.progress,
    )
