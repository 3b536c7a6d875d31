"""The formats corpora come in, each on a fixture made here, and reading that does not depend on block size."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile
import tracemalloc

import pytest

from electra.core.errors import UserError
from electra.data import corpus_files
from electra.data.corpus import read_documents

DOCS = [
    "Grüße aus Köln. The second sentence is here.",
    "A document with\nthree\nlines of text, and naïve accents.",
    "Short one.",
]


def jsonl_bytes(docs, field="text"):
    return "".join(
        json.dumps({field: d, "id": i}, ensure_ascii=False) + "\n" for i, d in enumerate(docs)
    ).encode()


def tar_bytes(members: dict[str, bytes], mode: str = "w") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_json_lines_plain_gzip_bzip2_xz_and_zstd(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    data = jsonl_bytes(DOCS)
    files = {
        "a.jsonl": data,
        "b.jsonl.gz": gzip.compress(data),
        "c.jsonl.bz2": bz2.compress(data),
        "d.jsonl.xz": lzma.compress(data),
        "e.jsonl.zst": zstandard.ZstdCompressor().compress(data),
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        assert list(read_documents(tmp_path / name)) == DOCS, name


def test_parquet_and_a_text_field_that_is_not_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"content": DOCS * 700, "n": list(range(2100))})
    pq.write_table(table, tmp_path / "shard.parquet", row_group_size=500)  # several row groups
    documents = list(read_documents(tmp_path / "shard.parquet", text_field="content"))
    assert documents == DOCS * 700
    with pytest.raises(
        UserError, match=r"shard.parquet has no 'text' column \(columns: content, n\).*--text-field"
    ):
        list(read_documents(tmp_path / "shard.parquet"))
    (tmp_path / "body.jsonl").write_bytes(jsonl_bytes(DOCS, field="body"))
    assert list(read_documents(tmp_path / "body.jsonl", text_field="body")) == DOCS
    with pytest.raises(
        UserError, match=r"body.jsonl:1: expected .*'text'.*\(this one has: body, id\).*--text-field"
    ):
        list(read_documents(tmp_path / "body.jsonl"))


def test_a_directory_of_shards_in_mixed_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "00.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(DOCS[:1])))
    pq.write_table(pa.table({"text": DOCS[1:2]}), shards / "01.parquet")
    (shards / "02.jsonl").write_bytes(jsonl_bytes(DOCS[2:]))
    assert list(read_documents(shards)) == DOCS


def test_openwebtext_layout_tar_xz_of_xz_tars_of_text(tmp_path):
    """OpenWebText: openwebtext.tar.xz holds urlsf_subset*.xz, each an xz'd tar of .txt files (no .tar suffix)."""
    inner = [
        tar_bytes({"0001.txt": b"First web page.\n", "0002.txt": b"Second page.\n\nIts second paragraph.\n"}),
        tar_bytes({"0003.txt": b"Third page.\n"}),
    ]
    outer = tar_bytes(
        {f"openwebtext/urlsf_subset00-{i}_data.xz": lzma.compress(data) for i, data in enumerate(inner)}
    )
    path = tmp_path / "openwebtext.tar.xz"
    path.write_bytes(lzma.compress(outer))
    assert list(read_documents(path)) == [
        "First web page.",
        "Second page.",
        "Its second paragraph.",
        "Third page.",
    ]
    (tmp_path / "plain.tar").write_bytes(tar_bytes({"a.txt": b"In a plain tar.", "skip.png": b"\x89PNG"}))
    assert list(read_documents(tmp_path / "plain.tar")) == ["In a plain tar."]


def test_saved_dataset_with_another_text_column(tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"article": DOCS}).save_to_disk(str(tmp_path / "ds"))
    assert list(read_documents(tmp_path / "ds", text_field="article")) == DOCS
    with pytest.raises(UserError, match="has no 'text' column.*--text-field"):
        list(read_documents(tmp_path / "ds"))


def test_damaged_compressed_file_is_one_line(tmp_path):
    cut = tmp_path / "cut.jsonl.xz"
    cut.write_bytes(lzma.compress(jsonl_bytes(DOCS * 50))[:-40])
    with pytest.raises(UserError, match=r"cut.jsonl.xz: cannot be read to the end .*download it again"):
        list(read_documents(cut))


@pytest.mark.parametrize("block", [16, 64, 1000])  # longer than any word here
def test_documents_and_line_numbers_do_not_depend_on_the_block_size(tmp_path, monkeypatch, block):
    """Blocks are cut at line ends, or inside a long line at a space or a character boundary: whatever the block,
    the same documents come out, and an error deep in a file names the right line."""
    text = "".join(
        f"Paragraph {i} has some words, ümlauts and a long line {'x' * (i % 13)} " * (1 + i % 5)
        + "\n"
        + ("\n" if i % 3 == 0 else "")
        for i in range(60)
    )
    (tmp_path / "t.txt").write_text(text)
    (tmp_path / "j.jsonl").write_bytes(jsonl_bytes(DOCS * 20) + b"{broken\n")
    expected_text = list(read_documents(tmp_path / "t.txt"))
    expected_file = list(read_documents(tmp_path / "t.txt", doc_boundary="file"))
    monkeypatch.setattr(corpus_files, "READ_BLOCK", block)
    assert list(read_documents(tmp_path / "t.txt")) == expected_text
    assert list(read_documents(tmp_path / "t.txt", doc_boundary="file")) == expected_file
    with pytest.raises(UserError, match=r"j.jsonl:61: not valid JSON"):
        list(read_documents(tmp_path / "j.jsonl"))


def test_a_file_not_utf8_after_its_first_block_is_read_as_latin1_from_there(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_files, "READ_BLOCK", 64)
    path = tmp_path / "late.txt"
    path.write_bytes(b"plain ascii words here\n" * 10 + "caf\xe9 au lait\n".encode("latin-1"))
    with pytest.warns(UserWarning, match="late.txt is not UTF-8"):
        documents = list(read_documents(path))
    assert documents[0].endswith("caf\xe9 au lait")
    with pytest.raises(UserError, match=r"late.txt: undecodable bytes at offset 233 "):
        list(read_documents(path, strict_utf8=True))


def test_reading_memory_does_not_grow_with_the_file(tmp_path, monkeypatch):
    """One 24 MB JSON-lines file and one 24 MB text file are read in a few blocks' worth of memory (the reader
    held each file twice before: 48 MB here, 40 GB for a 20 GB Wikipedia dump)."""
    monkeypatch.setattr(corpus_files, "READ_BLOCK", 1 << 20)
    line = json.dumps({"text": "word " * 1000}) + "\n"
    (tmp_path / "big.jsonl").write_text(line * 4800)
    (tmp_path / "big.txt").write_text(("word " * 1000 + "\n\n") * 4800)
    for name in ("big.jsonl", "big.txt"):
        tracemalloc.start()
        count = sum(1 for _ in read_documents(tmp_path / name))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert count == 4800
        assert peak < 6 * corpus_files.READ_BLOCK + 2_000_000, (name, peak)  # 24 MB file
