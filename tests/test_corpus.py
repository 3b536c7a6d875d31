import builtins
import gzip
import json
import os
import tarfile
import zipfile

import pytest

from electra.core.errors import UserError
from electra.data.corpus import (
    corpus_files,
    looks_pos_tagged,
    read_documents,
    split_sentences,
    strip_pos_tags,
)


def test_single_text_file_splits_documents_on_blank_lines(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("First doc line one.\nline two.\n\n\nSecond doc.\n")
    assert list(read_documents(f)) == ["First doc line one. line two.", "Second doc."]


def test_directory_gives_one_document_per_file(tmp_path):
    (tmp_path / "b.txt").write_text("Para one.\n\nPara two.")
    (tmp_path / "a.txt").write_text("Alpha.")
    assert list(read_documents(tmp_path)) == ["Alpha.", "Para one.\nPara two."]
    assert len(list(read_documents(tmp_path, doc_boundary="blank"))) == 3


def test_jsonl_and_archives(tmp_path):
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"text": "One."}) + "\n\n" + json.dumps({"text": "Two."}) + "\n")
    assert list(read_documents(jsonl)) == ["One.", "Two."]
    separated = (
        tmp_path / "s.jsonl"
    )  # a raw U+2028 inside a string is JSON, not a line break (it had split it)
    separated.write_text(json.dumps({"text": "Line\u2028sep."}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert list(read_documents(separated)) == ["Line\u2028sep."]
    gz = tmp_path / "d.txt.gz"
    gz.write_bytes(gzip.compress(b"Zipped text.\n"))
    assert list(read_documents(gz)) == ["Zipped text."]
    gz_lines = tmp_path / "g.jsonl.gz"  # JSON lines inside gzip; an error names the file as it is on disk
    gz_lines.write_bytes(gzip.compress(b'{"text": "Packed."}\n{"text": \n'))
    with pytest.raises(UserError, match=r"g\.jsonl\.gz:2: not valid JSON"):
        list(read_documents(gz_lines))
    gz_lines.write_bytes(gzip.compress(b'{"text": "Packed."}\n'))
    assert list(read_documents(gz_lines)) == ["Packed."]
    zpath = tmp_path / "e.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("x/a.txt", "From zip.")
        z.writestr("x/image.png", b"\x89PNG")
    assert list(read_documents(zpath)) == ["From zip."]
    tpath = tmp_path / "f.tar.gz"
    member = tmp_path / "m.txt"
    member.write_text("From tar.")
    with tarfile.open(tpath, "w:gz") as t:
        t.add(member, arcname="dir/m.txt")
    assert list(read_documents(tpath)) == ["From tar."]


def test_saved_dataset(tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"text": ["Saved one.", "", "Saved two."]}).save_to_disk(str(tmp_path / "ds"))
    assert list(read_documents(tmp_path / "ds")) == ["Saved one.", "Saved two."]


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        list(read_documents(tmp_path / "missing"))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.warns(UserWarning, match="latin.txt is not UTF-8"):
        assert list(read_documents(latin)) == ["caf\xe9 au lait"]
    with pytest.raises(UserError, match="latin.txt.*not UTF-8"):
        list(read_documents(latin, strict_utf8=True))
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\x00\x01\xff\xfe" * 100)
    with pytest.raises(UserError, match="blob.txt: undecodable bytes"):
        list(read_documents(binary))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "ok"}\n{not json}\n')
    with pytest.raises(UserError, match="broken.jsonl:2"):
        list(read_documents(broken))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no readable text"):
        list(read_documents(tmp_path / "empty"))


def test_pos_tags_are_detected_and_stripped_on_real_brown(shared_data):
    text = (shared_data / "corpus" / "brown" / "ca01").read_text()
    assert looks_pos_tagged(text)
    assert not looks_pos_tagged("The jury said on Friday that the election was fair, and/or honest. " * 10)
    docs = list(read_documents(shared_data / "corpus" / "brown" / "ca01"))
    assert docs[0].startswith("The Fulton County Grand Jury said Friday an investigation of Atlanta's")
    assert "/at" not in " ".join(docs)
    assert strip_pos_tags("``/`` no/at ''/''") == '" no "'


def test_sentence_splitter():
    assert split_sentences('He left. "Why?" she asked. It was 3 p.m. Then rain.') == [
        "He left.",
        '"Why?" she asked.',
        "It was 3 p.m.",
        "Then rain.",
    ]


def test_the_cli_prints_the_latin1_warning_as_one_line(tmp_path):
    """Before: Python's two-line UserWarning, naming electra/data/corpus.py and a line of its source. The CLI prints it
    as its other warnings (`warning: ...`); in Python it stays a catchable UserWarning (above)."""
    import subprocess
    import sys

    from tests.conftest import MICRO

    latin = tmp_path / "latin.txt"
    latin.write_bytes(("caf\xe9 au lait, na\xefve words in a document.\n\n" * 40).encode("latin-1"))
    flags = [f"--set={k}={v}" for k, v in {**MICRO, "max_steps": 1, "save_every": 1}.items()]
    argv = [
        "pretrain",
        "--corpus",
        str(latin),
        "--output",
        str(tmp_path / "run"),
        "--no-plot",
        "--no-progress",
    ]
    argv += ["--cache-dir", str(tmp_path / "cache"), *flags]
    done = subprocess.run(
        [sys.executable, "-m", "electra", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "Latin-1" in line or "warnings.warn" in line]
    assert lines == [
        f"warning: {latin} is not UTF-8; reading it as Latin-1 (--strict-utf8 refuses it instead)"
    ]


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_named_with_its_fix(tmp_path, encoding):
    """Before: plain-ASCII UTF-16 without its mark is valid UTF-8, so it trained silently on "T\0h\0e\0" (and with
    an accent in it was called "not UTF-8" with a Latin-1 fix that mangles it). Now it is named, with the iconv
    that converts it; a stray NUL in real text still reads, and a file of NULs is not text."""
    text = "The committee met on Tuesday. Members asked about repairs.\n\nA storm crossed the coast."
    for name, body in (("ascii.txt", text), ("accent.txt", "Café, naïve. " + text)):
        path = tmp_path / name
        path.write_bytes(body.encode(encoding))
        fix = encoding.replace("-le", "le").replace("-be", "be")
        with pytest.raises(
            UserError, match=rf"{name}: UTF-16 text without a byte-order mark.*iconv -f {fix}"
        ):
            list(read_documents(path))
    stray = tmp_path / "stray.txt"
    stray.write_text(text * 50 + "\0 end.")
    assert list(read_documents(stray))[-1].endswith("coast.\0 end.")
    zeros = tmp_path / "zeros.txt"
    zeros.write_bytes(bytes(4096))
    with pytest.raises(UserError, match="zeros.txt: holds NUL bytes .*not text"):
        list(read_documents(zeros))


def test_a_file_or_folder_this_user_cannot_read_is_one_line(tmp_path, monkeypatch):
    """Before: a corpus file without read permission ended in PermissionError's traceback, and a subfolder that
    could not be listed was skipped in silence (Path.rglob ignores it): the run trained on part of the corpus.
    (Permissions are simulated: the suite may run as root, who reads everything.)"""
    corpus = tmp_path / "corpus"
    (corpus / "locked").mkdir(parents=True)
    (corpus / "a.txt").write_text("Some text here.")
    (corpus / "locked" / "b.txt").write_text("More text.")
    assert len(list(read_documents(corpus))) == 2
    real_open, real_scandir = builtins.open, os.scandir

    def no_read(file, *args, **kwargs):
        if str(file).endswith("a.txt"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_read)
    with pytest.raises(
        UserError, match=r"a.txt: cannot be read \(Permission denied\); give this user access"
    ):
        list(read_documents(corpus / "a.txt"))
    monkeypatch.setattr(builtins, "open", real_open)

    def no_listing(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", no_listing)
    with pytest.raises(UserError, match=r"corpus folder .*locked cannot be read \(Permission denied\)"):
        list(read_documents(corpus))


def test_linked_folders_are_read_once_each_and_a_link_up_the_tree_ends(tmp_path):
    """Before: a corpus folder of links to datasets kept elsewhere (`ln -s /data/books corpus/books`) was read
    without them, silently. Now each linked folder is read, a real folder reached by two links once, and a link
    back up the tree does not loop."""
    data, corpus = tmp_path / "data", tmp_path / "corpus"
    (data / "books").mkdir(parents=True)
    corpus.mkdir()
    (data / "books" / "a.txt").write_text("A linked book.")
    (corpus / "own.txt").write_text("The corpus's own file.")
    (corpus / "books").symlink_to(data / "books")
    (corpus / "again").symlink_to(data / "books")
    (data / "books" / "up").symlink_to(corpus)
    assert corpus_files(corpus) == [corpus / "again" / "a.txt", corpus / "own.txt"]
    assert sorted(read_documents(corpus)) == ["A linked book.", "The corpus's own file."]
