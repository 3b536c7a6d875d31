"""Pretrained word vectors for the CNN-BiLSTM models (`--word-vectors FILE`), and training some with gensim.

One reader for the text formats word vectors are shipped in: GloVe (`word v1 ... vd` per line, no header), word2vec
and fastText `.vec` (the same lines after a `count dim` header line); any of them gzipped (`.gz`, or gzip's magic
bytes). The file is checked here, once: a line whose numbers are not `dim` floats, a header that disagrees with the
lines, or vectors of another size than the model's word embeddings is one `UserError` naming the file, the line and
the fix. Words are keyed as the model looks them up (`electra.tagging.cvt_model.normalize_word`: lowercased, digits
as 0); where several of a file's words share a key (`Paris` and `paris`), the first in the file wins (files list
frequent words first).

`train_word_vectors` trains skip-gram vectors on an unlabeled corpus with gensim (an optional extra:
`pip install gensim`) and writes them in word2vec text format, the words already normalized, for users who have no
vectors in their language.
"""

from __future__ import annotations

import gzip
import io
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from electra.core.errors import UserError
from electra.tagging.cvt_model import normalize_word


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    if gzipped:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="strict")
    return open(path, encoding="utf-8", errors="strict")


def read_word_vectors(
    path: str | Path, dim: int | None = None, max_words: int | None = None
) -> tuple[list[str], torch.Tensor]:
    """(keys, vectors [N, d]): the file's words normalized as the model looks them up (the first of each key
    kept), in file order, at most `max_words` of them, and their vectors. With `dim`, vectors of another size are
    refused (the fix: `--word-dim` d). A file that is missing, empty, not UTF-8, or has a malformed line is one
    UserError naming the file (and the line)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--word-vectors {path}: no such file; give a GloVe, word2vec or fastText text file.")
    keys: list[str] = []
    rows: list[list[float]] = []
    seen: set[str] = set()
    width: int | None = None
    try:
        with _open_text(path) as lines:
            for number, line in enumerate(lines, 1):
                parts = line.rstrip("\r\n").rstrip(" ").split(" ")
                if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                    width = int(parts[1])  # word2vec / fastText header: count dim
                    if width < 1:
                        raise UserError(
                            f"{path}:1: the header gives {width}-dimensional vectors; fix the header."
                        )
                    continue
                if parts == [""]:
                    continue
                if width is None:
                    width = len(parts) - 1
                    if width < 1:
                        raise UserError(f"{path}:{number}: a word with no numbers after it; {_FORMAT}.")
                if dim is not None and width != dim:
                    raise UserError(
                        f"--word-vectors {path} holds {width}-dimensional vectors but --word-dim is {dim}; "
                        f"pass --word-dim {width} (or give vectors of size {dim})."
                    )
                if len(parts) < width + 1:
                    raise UserError(
                        f"{path}:{number}: {len(parts) - 1} numbers where {width} were expected; {_FORMAT}."
                    )
                word = " ".join(parts[:-width])  # a few GloVe files have words with spaces in them
                try:
                    vector = [float(x) for x in parts[-width:]]
                except ValueError:
                    raise UserError(
                        f"{path}:{number}: the values after {word!r} are not all numbers; {_FORMAT}."
                    ) from None
                if not all(math.isfinite(x) for x in vector):
                    raise UserError(
                        f"{path}:{number}: {word!r} has a NaN or infinite value; fix or drop that line."
                    )
                key = normalize_word(word)
                if key in seen:
                    continue
                seen.add(key)
                keys.append(key)
                rows.append(vector)
                if max_words is not None and len(keys) >= max_words:
                    break
    except UnicodeDecodeError:
        raise UserError(f"--word-vectors {path}: not UTF-8 text; {_FORMAT}.") from None
    except (OSError, EOFError) as exc:
        raise UserError(f"--word-vectors {path}: cannot be read ({exc}); {_FORMAT}.") from None
    if not keys:
        raise UserError(f"--word-vectors {path}: no vectors in it; {_FORMAT}.")
    return keys, torch.tensor(rows, dtype=torch.float32)


_FORMAT = "give a GloVe, word2vec or fastText text file (`word v1 ... vd` per line, optionally gzipped)"


def train_word_vectors(
    sentences: Callable[[], Iterator[list[str]]],
    output: str | Path,
    dim: int = 100,
    window: int = 5,
    min_count: int = 2,
    epochs: int = 5,
    seed: int = 1,
    workers: int = 1,
) -> int:
    """Train skip-gram word2vec vectors with gensim on `sentences()` (called once per pass: an iterable that can be
    read again), their words normalized as the model looks them up, and write them to `output` in word2vec text
    format (most frequent word first). Returns the number of words written. Without gensim installed: one
    UserError naming `pip install gensim`."""
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise UserError(
            "training word vectors needs gensim: `pip install gensim` (or `pip install electra[vectors]`)."
        ) from None

    class Corpus:
        def __iter__(self) -> Iterator[list[str]]:
            for words in sentences():
                yield [normalize_word(w) for w in words]

    model = Word2Vec(
        sentences=Corpus(),
        vector_size=dim,
        window=window,
        min_count=min_count,
        sg=1,
        epochs=epochs,
        seed=seed,
        workers=workers,
    )
    if len(model.wv) == 0:
        raise UserError(
            f"no word occurs {min_count} times in the corpus; lower --min-count or give more text."
        )
    model.wv.save_word2vec_format(str(output), binary=False)
    return len(model.wv)
