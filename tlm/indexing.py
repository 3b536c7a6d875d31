"""The BM25 index of a general corpus (TLM's data step), on `bm25s`: no server, built once, saved and reused.

The general corpus is streamed: documents are cut into passages, written to a line-indexed store on disk, and only
their BM25 token ids stay in memory, so the text of a corpus larger than memory never has to be held at once.
`electra.tlm.saved_index` opens what is saved here; `electra.tlm.retrieval` queries it.

An index is built in a staging folder beside its own and moved in only when complete, its metadata last: a build
that fails (an empty corpus) or is interrupted leaves the previous index as it was. The metadata records the
corpus's fingerprint, so a corpus edited in place is indexed again instead of answering with its old text.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.data.corpus import corpus_fingerprint, read_documents
from electra.tlm.saved_index import (
    BM25_DIR,
    DOCS_FILE,
    INDEX_FORMAT,
    META_FILE,
    OFFSETS_FILE,
    BM25Index,
    DamagedIndexError,
)
from electra.training.run_log import progress_off

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; a killed build's staging folder stays there
    fcntl = None

logger = logging.getLogger(__name__)

BUILD_LOCK = ".build.lock"  # in a staging folder, held while the build writes it


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


def build_index(
    documents: Iterable[str],
    index_dir: str | Path,
    max_words: int = 128,
    min_words: int = 5,
    chunk_size: int = 5000,
    source: str | None = None,
    progress: bool = True,
    fingerprint: str | None = None,
) -> BM25Index:
    """Stream documents into passages, store them on disk, index their BM25 tokens, save everything.

    Exact duplicate passages (case and spacing ignored) are stored once, so retrieval never returns two copies.
    The index is written to a staging folder beside `index_dir` and moved in only once complete, its metadata
    last: a corpus with no passage, an error or a Ctrl-C half way leaves the index that was there before. (Written
    in place, a failed build truncated the passages and kept the old metadata, and every later run reused the
    empty store.) `fingerprint` is the corpus's (`corpus_digest`), recorded so an edited corpus is seen.
    """
    index_dir = Path(index_dir)
    if index_dir.exists() and not index_dir.is_dir():
        raise UserError(f"{index_dir}: is a file, not an index folder; pass another --index.")
    if max_words < 1:  # `split_passages` would cut empty windows forever
        raise UserError(f"--passage-words must be at least 1, got {max_words}.")
    # Beside the index (resolved: `--index .` has no name of its own), so the moves into it are renames on one
    # file system; a name of its own per build, so two builds at once never write into each other's.
    home = index_dir.resolve()
    made = [folder for folder in (home.parent, *home.parent.parents) if not folder.exists()]
    home.parent.mkdir(parents=True, exist_ok=True)
    try:
        _clear_abandoned_builds(home)
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(home), dir=home.parent))
        try:
            with _build_lock(staging):
                meta = _write_index(
                    documents,
                    staging,
                    index_dir,
                    max_words,
                    min_words,
                    chunk_size,
                    source,
                    progress,
                    fingerprint,
                )
                _move_into_place(staging, index_dir)
        finally:  # after a success it holds only the replaced files
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:  # an error or a Ctrl-C: the folders made to hold this index go as well
        _remove_made_folders(made)
        raise
    logger.info(
        "indexed %d passages from %d documents into %s",
        meta["num_passages"],
        meta["num_documents"],
        index_dir,
    )
    return BM25Index(index_dir)


def _write_index(
    documents: Iterable[str],
    folder: Path,
    index_dir: Path,
    max_words: int,
    min_words: int,
    chunk_size: int,
    source: str | None,
    progress: bool,
    fingerprint: str | None,
) -> dict:
    """Every file of the index for `index_dir`, its metadata included, into `folder`; returns the metadata."""
    import bm25s
    from bm25s.tokenization import Tokenizer
    from tqdm.auto import tqdm

    progress = progress and not progress_off()  # --no-progress silences bm25s's own bars too
    # The same lowercasing, token pattern and stopwords as `bm25s.tokenize` applies to queries.
    tokenizer = Tokenizer(stopwords="en")
    token_ids: list[np.ndarray] = []
    offsets: list[int] = []
    seen: set[bytes] = set()
    pending: list[str] = []
    num_documents = 0

    with open(folder / DOCS_FILE, "wb") as store:

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
        passages_bytes = store.tell()

    if not token_ids:
        raise UserError(
            f"{source or index_dir}: the corpus has no passage of {min_words} words or more; check the path and format."
        )
    retriever = bm25s.BM25()
    retriever.index((token_ids, tokenizer.get_vocab_dict()), show_progress=progress)
    retriever.save(str(folder / BM25_DIR), show_progress=False)
    np.save(folder / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    meta = {
        "format": INDEX_FORMAT,
        "source": source,
        "corpus_fingerprint": fingerprint,
        "num_documents": num_documents,
        "num_passages": len(token_ids),
        "passages_bytes": passages_bytes,
        "max_words": max_words,
        "min_words": min_words,
    }
    (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def _remove_made_folders(made: Sequence[Path]) -> None:
    """After a failed build: the folders it created to hold the index (`tlm retrieve`'s --out among them), innermost
    first, so that a bad corpus leaves no empty output behind. Only a folder that is still empty goes (`rmdir`): one
    the user had before is not in `made`, and anything written into a made one since (by another process) stays."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (or not ours to remove): nor are the folders above it


def _staging_prefix(home: Path) -> str:
    return f".{home.name}.building-"


@contextlib.contextmanager
def _build_lock(staging: Path) -> Iterator[None]:
    """Hold an advisory lock in the staging folder while the build writes it: the kernel drops it when the process
    dies, however it dies, which is how a later build tells an abandoned folder from a live one."""
    with open(staging / BUILD_LOCK, "w") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _clear_abandoned_builds(home: Path) -> None:
    """Delete the staging folders of builds that were killed (SIGKILL, a power cut: no `finally` ran), each a full
    copy of a corpus's passages. A folder is abandoned when its lock can be taken and it is over a minute old (a
    build that has only just created its folder may not hold the lock yet); a live build's is never touched."""
    if fcntl is None:
        return
    for folder in home.parent.glob(_staging_prefix(home) + "*"):
        lock = folder / BUILD_LOCK
        if not folder.is_dir() or not lock.is_file() or time.time() - folder.stat().st_mtime < 60:
            continue
        with open(lock) as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a build is writing it now
            logger.info("removing %s, left by a build that did not finish", folder)
            shutil.rmtree(folder, ignore_errors=True)


def _move_into_place(staging: Path, index_dir: Path) -> None:
    """Replace the index's files in `index_dir` by the complete ones in `staging`, the metadata last.

    The old metadata goes first, so no moment shows an index whose metadata and files disagree: an interruption
    in between leaves a folder without metadata, which the next run builds again. Only the index's own names are
    touched; anything else a user keeps in the folder stays. Replaced files go into `staging`, deleted with it.
    """
    index_dir.mkdir(parents=True, exist_ok=True)
    (index_dir / META_FILE).unlink(missing_ok=True)
    for name in (DOCS_FILE, OFFSETS_FILE, BM25_DIR):
        target = index_dir / name
        if os.path.lexists(target):  # os.replace cannot put a folder over a non-empty one
            os.replace(target, staging / f"{name}.replaced")
        os.replace(staging / name, target)
    os.replace(staging / META_FILE, index_dir / META_FILE)


def corpus_digest(corpora: Sequence[str | Path]) -> str:
    """SHA-256 of `electra.data.corpus.corpus_fingerprint` of each corpus path: every file's name, size and modification
    time, the fingerprint the example and tokenizer caches are keyed on. It changes with any write to the corpus,
    where a hash of each file's first 64 KiB would miss an edit further in that keeps the size; the cost is a
    rebuild after a bare `touch` or a copy that does not keep times."""
    payload = json.dumps([corpus_fingerprint(corpus) for corpus in corpora])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _stale_reason(
    index_dir: Path, source: str, fingerprint: str, max_words: int, min_words: int
) -> str | None:
    """Why the index in `index_dir` cannot answer for this corpus: "" when there is none, None when it can."""
    meta_path = index_dir / META_FILE
    if not meta_path.is_file():
        return ""
    meta = read_json_record(meta_path)
    if meta is None:
        return f"its {META_FILE} is damaged"
    if meta.get("format") != INDEX_FORMAT:
        return f"it has index format {meta.get('format')}, not {INDEX_FORMAT}"
    if meta.get("source") != source:
        return f"it was built from another corpus ({meta.get('source')})"
    if [meta.get("max_words"), meta.get("min_words")] != [max_words, min_words]:
        return (
            f"it was built with passages of {meta.get('min_words')} to {meta.get('max_words')} words, "
            f"not {min_words} to {max_words}"
        )
    if meta.get("corpus_fingerprint") is None:
        return "it records no corpus fingerprint (an older version built it), so an edited corpus would go unseen"
    if meta.get("corpus_fingerprint") != fingerprint:
        return "the corpus changed since it was built (a file's size or modification time differs)"
    return None


def load_or_build_index(
    corpus: str | Path | Sequence[str | Path],
    index_dir: str | Path,
    max_words: int = 128,
    min_words: int = 5,
    progress: bool = True,
) -> BM25Index:
    """Reuse the index in `index_dir` when it was built from the same corpus (one path or several, unchanged since)
    with the same passage sizes and its files are whole; otherwise stream the corpus through the library's reader
    and build it. Replacing an existing index is said in one printed line, with the reason."""
    corpora = [Path(corpus)] if isinstance(corpus, str | Path) else [Path(c) for c in corpus]
    index_dir = Path(index_dir)
    for path in corpora:
        if not path.exists():
            raise UserError(
                f"{path}: corpus path does not exist; pass a text file, a .jsonl file or a folder."
            )
    source = " + ".join(str(c.resolve()) for c in corpora)
    fingerprint = corpus_digest(corpora)
    reason = _stale_reason(index_dir, source, fingerprint, max_words, min_words)
    if reason is None:
        try:
            index = BM25Index(index_dir)
        except DamagedIndexError as exc:  # files missing or cut short (copied in part, deleted by hand)
            reason = f"it is damaged ({exc.why})"
        else:
            logger.info("reusing the BM25 index in %s", index_dir)
            return index
    if reason:
        print(f"{index_dir}: {reason}; rebuilding the BM25 index.", flush=True)
    # the library's one corpus reader (it strips Brown's /tags)
    documents = (document for path in corpora for document in read_documents(str(path)))
    return build_index(
        documents, index_dir, max_words, min_words, source=source, progress=progress, fingerprint=fingerprint
    )
