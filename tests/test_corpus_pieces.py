"""A corpus cut into pieces that streams read on their own: read one after another, the pieces give exactly the
documents `read_documents` gives, whatever the packaging, and the cuts do not depend on the number of streams."""

import gzip
import json
import random

import pytest

from electra.data import corpus_pieces
from electra.data.corpus import read_documents
from electra.data.corpus_pieces import piece_documents, plan_pieces


def _paragraphs(count, seed=0):
    rng = random.Random(seed)
    words = "the of and a to in is was for on that with as by at from his it an were".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) + "." for _ in range(count)]


def _pieced(corpus, window, doc_boundary="auto"):
    pieces = plan_pieces(corpus, doc_boundary, window)
    return pieces, [d for piece in pieces for d in piece_documents(piece, False, "text")]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    # blank lines of several kinds (CRLF, spaces) and a paragraph over two lines
    paragraphs = _paragraphs(300)
    seps = ["\n\n", "\r\n\r\n", "\n   \n", "\n\t\n\n"]
    text = "".join(
        p + seps[i % 4] if i % 7 else p[:20] + "\n" + p[20:] + "\n\n" for i, p in enumerate(paragraphs)
    )
    path.write_bytes(text.encode())
    return path


def test_a_text_file_cut_into_byte_ranges_gives_the_same_documents(text_file):
    pieces, documents = _pieced(text_file, 1_000)
    assert len(pieces) > 10 and {p.kind for p in pieces} == {"bytes"}
    assert [(p.start, p.end) for p in pieces] == list(
        zip([0] + [p.end for p in pieces[:-1]], [p.end for p in pieces])
    )  # the ranges tile the file
    assert pieces[-1].end == text_file.stat().st_size
    assert documents == list(read_documents(text_file))


def test_a_blank_line_split_between_two_reads_is_found(text_file, monkeypatch):
    monkeypatch.setattr(corpus_pieces, "SEARCH_STEP", 3)  # most blank lines straddle two reads
    pieces, documents = _pieced(text_file, 1_000)
    assert len(pieces) > 10
    assert documents == list(read_documents(text_file))


def test_a_cut_with_no_boundary_in_reach_is_dropped(tmp_path, monkeypatch):
    path = tmp_path / "one-paragraph.txt"
    path.write_text(" ".join(_paragraphs(40)) + "\n\n" + "\n\n".join(_paragraphs(40, seed=1)))
    monkeypatch.setattr(corpus_pieces, "BOUNDARY_SEARCH", 500)
    pieces, documents = _pieced(path, 300)
    assert pieces[0].end > path.read_text().index("\n\n")  # the long first paragraph stays in one piece
    assert documents == list(read_documents(path))


def test_json_lines_cut_at_line_ends(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": p, "id": i}) + "\n" for i, p in enumerate(_paragraphs(300))))
    pieces, documents = _pieced(path, 1_000)
    assert len(pieces) > 10
    assert documents == list(read_documents(path))


def test_a_bad_json_line_in_a_later_piece_names_the_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"text": p}) for p in _paragraphs(300)]
    lines[250] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    pieces = plan_pieces(path, "auto", 1_000)
    with pytest.raises(Exception, match=r"corpus\.jsonl \(from byte \d+\):\d+: not valid JSON"):
        for piece in pieces:
            list(piece_documents(piece, False, "text"))


def test_folders_compressed_files_and_tagged_text(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("\n\n".join(_paragraphs(200, seed=2)))
    (folder / "b.txt.gz").write_bytes(gzip.compress("\n\n".join(_paragraphs(200, seed=3)).encode()))
    tagged = "\n\n".join(" ".join(f"{w}/nn" for w in p.split()) for p in _paragraphs(200, seed=4))
    (folder / "c.txt").write_text(tagged)
    for boundary in ("auto", "blank"):  # auto: a document per file, so nothing is cut
        pieces, documents = _pieced(folder, 1_000, boundary)
        assert documents == list(read_documents(folder, boundary)), boundary
        kinds = [p.kind for p in pieces if p.path.endswith(".gz")]
        assert kinds == ["file"]  # a compressed file is read whole
    assert len(pieces) > 10 and "/nn" not in " ".join(documents)


def test_a_saved_dataset_is_cut_into_row_ranges(tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"text": _paragraphs(500)}).save_to_disk(str(tmp_path / "saved"))
    pieces, documents = _pieced(tmp_path / "saved", 500)
    assert len(pieces) > 5 and {p.kind for p in pieces} == {"rows"}
    assert documents == list(read_documents(tmp_path / "saved"))


def test_the_cuts_depend_on_the_corpus_alone(text_file):
    """The plan takes no stream count: the same pieces for any number of processes (checked by planning twice,
    and by the size rule's inputs)."""
    assert plan_pieces(text_file, "auto", 1_000) == plan_pieces(text_file, "auto", 1_000)
    assert corpus_pieces.piece_bytes(2 << 30, 4_000_000) == 32 << 20  # 1/64 of the corpus
    assert corpus_pieces.piece_bytes(100 << 30, 4_000_000) == corpus_pieces.PIECE_BYTES_MAX
    assert corpus_pieces.piece_bytes(1 << 20, 4_000_000) == 4_000_000  # never under a window
