"""The corpus that needs no download: English prose shipped with every CPython install.

Docstrings of the standard library's modules, classes and functions (read with `ast`, never imported, so no
module code runs) plus the `pydoc` help topics: about 2-3 MB of technical English. It lets
`python pretrain.py --size tiny` train something meaningful on a fresh machine with no data at all.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import sysconfig
from pathlib import Path

from electra.data.packing import default_cache_root

MIN_DOC_CHARS = 200


def stdlib_documents(max_chars: int = 3_000_000) -> list[str]:
    documents: list[str] = []
    total = 0
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions strip pydoc_data
        topics = {}
    for name in sorted(topics):
        text = topics[name].strip()
        if len(text) >= MIN_DOC_CHARS:
            documents.append(text)
            total += len(text)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for file in sorted(stdlib.rglob("*.py")):
        if any(part in {"test", "tests", "idle_test", "site-packages", "lib2to3"} for part in file.parts):
            continue
        if total >= max_chars:
            break
        for doc in _module_docstrings(file):
            documents.append(doc)
            total += len(doc)
    return documents


def _module_docstrings(file: Path) -> list[str]:
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    pieces = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= 40:
                pieces.append(" ".join(doc.split()))
    text = "\n".join(pieces)
    return [text] if len(text) >= MIN_DOC_CHARS else []


def ensure_embedded_corpus(cache_root: str | Path | None = None) -> Path:
    """Write the corpus once as JSONL (one document per line) and return its path."""
    root = Path(cache_root) if cache_root else default_cache_root() / "corpus"
    path = root / f"python{sys.version_info.major}.{sys.version_info.minor}-stdlib-docs.jsonl"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    with staging.open("w", encoding="utf-8") as handle:
        for document in stdlib_documents():
            handle.write(json.dumps({"text": document}) + "\n")
    os.replace(staging, path)
    return path
