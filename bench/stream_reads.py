"""Bytes each `--streaming` stream reads in one pass over a corpus, against the corpus's size.

For each corpus and stream count it plans the corpus's pieces (`electra.data.corpus_pieces`), then, for each
stream in turn, reads the documents of that stream's pieces (`slot_share`: what `slot_examples` reads in a pass)
and counts the bytes the process read from files while it did: the kernel's `rchar` (/proc/self/io), so
decompressed archives count their compressed bytes and nothing the page cache holds is missed. The baseline,
measured the same way in the same run, is one full read of the corpus (`read_documents`): what every stream read
before the corpus was cut into pieces. Tokenizing is left out; it does not read files.

    python bench/stream_reads.py --streams 4 CORPUS [CORPUS ...]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
from pathlib import Path

from electra.data.corpus import corpus_files, read_documents
from electra.data.corpus_pieces import piece_documents
from electra.data.packing import ExampleSettings
from electra.data.streaming import STREAM_WINDOW_CHARS, StreamSpec, slot_share


def read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar line (Linux only)")


def measured(read) -> tuple[int, int]:
    """(bytes read from files, characters of document text) while `read()` runs."""
    before = read_bytes()
    chars = sum(len(document) for document in read())
    return read_bytes() - before, chars


def corpus_bytes(corpus: str) -> int:
    return sum(file.stat().st_size for file in corpus_files(Path(corpus)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--window-chars", type=int, default=STREAM_WINDOW_CHARS)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"{datetime.date.today()}, {platform.node()}, commit {commit}, {args.streams} streams")
    print(
        "| corpus | size (MB) | pieces | whole read (MB) | per stream (MB): min / median / max | sum / size |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for corpus in args.corpora:
        spec = StreamSpec(
            corpus, "auto", False, "text", "", 0, 0, ExampleSettings(), 0, args.window_chars
        ).planned()
        whole, _ = measured(lambda: read_documents(corpus))  # noqa: B023
        per_stream = []
        for slot in range(args.streams):
            pieces, group, turn = slot_share(spec.pieces, slot, args.streams)
            got, _ = measured(
                lambda: (d for p in pieces for d in piece_documents(spec.pieces[p], False, "text"))  # noqa: B023
            )
            per_stream.append(got)
        size = corpus_bytes(corpus)
        ordered = sorted(per_stream)
        print(
            f"| {Path(corpus).name} | {size / 1e6:.1f} | {len(spec.pieces)} | {whole / 1e6:.1f} | "
            f"{ordered[0] / 1e6:.1f} / {ordered[len(ordered) // 2] / 1e6:.1f} / {ordered[-1] / 1e6:.1f} | "
            f"{sum(per_stream) / size:.3f} |"
        )


if __name__ == "__main__":
    main()
