"""What a long data preparation shows while it runs: a bar, or (with --no-progress, or in a batch job's log) a
line every half minute, with documents, bytes, throughput and the time left."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from electra.data.corpus import corpus_fingerprint, is_saved_dataset
from electra.data.corpus_files import COMPRESSIONS, SHORT_TAR, suffix_of

LINE_EVERY_S = 30.0


def corpus_size(corpus: str | Path) -> int | None:
    """The corpus's bytes of text as stored, when the files' sizes say it (none compressed, archived, Parquet or
    a saved dataset): the total a bar and a time estimate count towards; None when unknown."""
    path = Path(corpus)
    if is_saved_dataset(path):
        return None
    total = 0
    for name, size, _ in corpus_fingerprint(path):
        suffix = suffix_of(name)
        if suffix in COMPRESSIONS or suffix in SHORT_TAR or suffix in {".tar", ".zip", ".parquet"}:
            return None
        total += size
    return total


class PackingProgress:
    """Counts what `document_chunks` read and the examples written; shows a bar (tqdm, which TQDM_DISABLE, set by
    --no-progress, turns off) or, when the bar is off, a line every LINE_EVERY_S seconds; `close` prints the total."""

    def __init__(self, total_bytes: int | None, show: bool, what: str = "packing examples"):
        from tqdm.auto import tqdm

        self.total, self.show, self.what = total_bytes, show, what
        self.documents = self.chars = self.made = 0
        self.start = self.last_line = time.perf_counter()
        quiet = bool(os.environ.get("TQDM_DISABLE"))  # --no-progress; an explicit `disable` would override it
        self.bar = tqdm(
            total=total_bytes, unit="B", unit_scale=True, desc=what.capitalize(), disable=not show or quiet
        )
        self.lines = show and quiet
        if self.lines:
            size = f" of {total_bytes / 1e6:,.0f} MB" if total_bytes else ""
            print(f"{what}{size}: started", file=sys.stderr, flush=True)

    def read(self, documents: int, chars: int) -> None:
        self.documents += documents
        self.chars += chars
        self.bar.update(chars)
        self.bar.set_postfix_str(f"{self.documents:,} docs, {self.made:,} examples", refresh=False)
        now = time.perf_counter()
        if self.lines and now - self.last_line >= LINE_EVERY_S:
            self.last_line = now
            print(self.line(now), file=sys.stderr, flush=True)

    def examples(self, count: int) -> None:
        self.made += count

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.chars / elapsed
        text = f"{self.what}: {self.chars / 1e6:,.0f} MB read, {self.documents:,} documents, {self.made:,} examples, "
        text += f"{rate / 1e6:.1f} MB/s"
        if self.total and rate > 0:
            text += f", about {max(0.0, (self.total - self.chars) / rate):,.0f} s left"
        return text

    def close(self) -> None:
        self.bar.close()
        if self.show:
            elapsed = time.perf_counter() - self.start
            print(
                f"{self.what}: {self.made:,} examples from {self.documents:,} documents "
                f"({self.chars / 1e6:,.1f} MB of text) in {elapsed:,.1f} s, {self.chars / 1e6 / max(elapsed, 1e-9):.1f} MB/s",
                file=sys.stderr,
                flush=True,
            )
