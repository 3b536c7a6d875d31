"""A BM25 index as `electra tlm retrieve` saves it (`electra.tlm.retrieval.build_index` writes it), opened and
checked: `BM25Index` refuses a folder that holds no index, one of another format, or one whose files are missing or
cut short (`DamagedIndexError`, which `load_or_build_index` answers by building it again), in one line naming the
folder, before any passage is read. What opens here is trusted by the search.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.training.run_log import progress_off

INDEX_FORMAT = 1
META_FILE = "tlm_index.json"
DOCS_FILE = "passages.jsonl"
OFFSETS_FILE = "passages.offsets.npy"
BM25_DIR = "bm25"


def _bm25_tokens(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class DamagedIndexError(UserError):
    """An index whose files are missing or cut short. `load_or_build_index` builds it again; opening it directly
    stops in one line, where reading a passage would have failed later with a JSONDecodeError."""

    def __init__(self, index_dir: Path, why: str):
        super().__init__(
            f"{index_dir}: the BM25 index is damaged ({why}); run `electra tlm retrieve` again to rebuild it, "
            "or delete the folder."
        )
        self.why = why


def _checked_offsets(index_dir: Path, meta: dict) -> np.ndarray:
    """The passage offsets, once the store's files are all there and as long as the metadata says.

    Reading a passage from a store that is missing or shorter than its offsets fails deep inside `get`, long
    after the index was opened (a JSONDecodeError at retrieval time); checking sizes here costs two `stat`s.
    """
    for name in (DOCS_FILE, OFFSETS_FILE):
        if not (index_dir / name).is_file():
            raise DamagedIndexError(index_dir, f"{name} is missing")
    if not (index_dir / BM25_DIR).is_dir():
        raise DamagedIndexError(index_dir, f"{BM25_DIR}/ is missing")
    try:
        offsets = np.load(index_dir / OFFSETS_FILE)
    except (OSError, ValueError, EOFError):
        raise DamagedIndexError(index_dir, f"{OFFSETS_FILE} does not load") from None
    expected = meta.get("num_passages")
    if offsets.ndim != 1 or (expected is not None and offsets.shape[0] != expected):
        raise DamagedIndexError(
            index_dir, f"{OFFSETS_FILE} does not list the {expected} passages the index holds"
        )
    size = (index_dir / DOCS_FILE).stat().st_size
    stored = meta.get("passages_bytes")  # absent from indexes built before it was recorded
    if stored is not None and size != stored:
        raise DamagedIndexError(index_dir, f"{DOCS_FILE} holds {size} bytes, not the {stored} written")
    if offsets.shape[0] and int(offsets[-1]) >= size:
        raise DamagedIndexError(index_dir, f"{DOCS_FILE} ends before its last passage")
    return offsets


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
        self.meta = read_json_record(meta_path)
        if self.meta is None:
            raise DamagedIndexError(self.dir, f"{META_FILE} is not a JSON object")
        if self.meta.get("format") != INDEX_FORMAT:
            raise UserError(
                f"{meta_path}: index format {self.meta.get('format')} is not {INDEX_FORMAT}; rebuild it."
            )
        self.offsets = _checked_offsets(self.dir, self.meta)
        try:
            self.retriever = bm25s.BM25.load(str(self.dir / BM25_DIR), show_progress=False, mmap=True)
        except (OSError, ValueError, KeyError) as exc:  # a missing or cut-short file of bm25s's own
            raise DamagedIndexError(self.dir, f"{BM25_DIR}/ does not load: {type(exc).__name__}") from None
        self._docs = open(self.dir / DOCS_FILE, "rb")  # kept open: passages are read by offset

    @property
    def num_docs(self) -> int:
        return int(self.offsets.shape[0])

    def get(self, doc_id: int) -> str:
        self._docs.seek(int(self.offsets[doc_id]))
        line = self._docs.readline()
        try:
            return json.loads(line)["text"]
        except (ValueError, KeyError, TypeError):  # a store changed on disk after its size was checked
            raise DamagedIndexError(
                self.dir, f"passage {doc_id} of {DOCS_FILE} is not a JSON record"
            ) from None

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
