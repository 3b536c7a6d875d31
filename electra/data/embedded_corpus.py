"""The corpus that needs no download: U.S. State of the Union addresses, shipped inside the package.

`embedded/state_of_the_union.jsonl.gz` holds the 88 addresses and annual messages from 1950 to 2026 (3.5 MB of
English prose, 1.2 MB compressed), one address per JSON line; `embedded/SOURCE.md` says where the text came from,
how it was cut, and why it is in the public domain. It lets `python pretrain.py --size tiny` train something
meaningful on a fresh machine with no data at all, and because the text is a file of the repository (not something
derived from the running interpreter) every Python and every host trains on the same bytes: the golden trace
(`tests/golden_trace.py`) pins them by digest.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

from electra.data.packing import default_cache_root

EMBEDDED = Path(__file__).parent / "embedded" / "state_of_the_union.jsonl.gz"
NAME = "state-of-the-union"


def ensure_embedded_corpus(cache_root: str | Path | None = None) -> Path:
    """Write the corpus once, decompressed, as JSONL (one document per line) and return its path.

    The file is named by the first 12 hex digits of its content's SHA-256, so a release that changes the text
    writes a new file beside the old one instead of reusing a stale copy, and a copy a user edited by hand is never
    overwritten. The write goes through a staging file and a rename, so concurrent first runs cannot leave half a
    corpus behind.
    """
    root = Path(cache_root) if cache_root else default_cache_root() / "corpus"
    data = gzip.decompress(EMBEDDED.read_bytes())
    path = root / f"{NAME}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)
    return path
