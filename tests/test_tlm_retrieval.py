"""TLM retrieval: BM25 ranks the planted passage first, the union is deduplicated, the index reloads; a failed,
interrupted or damaged build and an edited corpus never leave an index that answers wrongly or crashes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from electra.core.errors import UserError
from electra.tlm.indexing import BUILD_LOCK, build_index, load_or_build_index, split_passages
from electra.tlm.keywords import candidate_phrases, keyword_query, rake_keywords
from electra.tlm.retrieval import (
    CORPUS_FILE,
    CORPUS_SUBDIR,
    make_query,
    read_retrieved,
    retrieve_corpus,
    union_top_k,
)
from electra.tlm.saved_index import DOCS_FILE, META_FILE, BM25Index

FILLER = [
    "The committee met on Tuesday to discuss the budget for the coming year and the new roads.",
    "Farmers in the valley reported a good harvest of wheat and barley after the spring rains.",
    "The orchestra played a long programme of symphonies to a full hall on Saturday evening.",
    "Children at the village school learned to read and write with patient teachers every day.",
    "The river flooded the lower streets after a week of storms, and the mayor asked for help.",
    "A new bridge across the harbour opened to traffic, cutting the journey to the city by an hour.",
]
PLANTED = (
    "The quarterback threw a touchdown pass in overtime and the football team won the championship game."
)
QUERY = "football quarterback touchdown in the championship game"


def _corpus() -> list[str]:
    # Documents of several lines each; the planted passage sits in the middle of the third document.
    return ["\n".join(FILLER[:2]), "\n".join(FILLER[2:4]), f"{FILLER[4]}\n\n{PLANTED}\n\n{FILLER[5]}"]


@pytest.fixture()
def index(tmp_path):
    with build_index(_corpus(), tmp_path / "index", max_words=20, min_words=5, progress=False) as built:
        yield built


@pytest.mark.parametrize("no_progress", [True, False])
def test_no_progress_silences_every_bar_of_indexing(no_progress, tmp_path, monkeypatch, capfd):
    """--no-progress (TQDM_DISABLE, set by the CLI) reaches bm25s's own bars, which set `disable` themselves."""
    if no_progress:
        monkeypatch.setenv("TQDM_DISABLE", "1")
    else:
        monkeypatch.delenv("TQDM_DISABLE", raising=False)
    with build_index(_corpus(), tmp_path / "index", max_words=20, min_words=5, progress=True):
        pass
    err = capfd.readouterr().err
    assert ("BM25S" in err) is not no_progress and ("indexing corpus" in err) is not no_progress


def test_split_passages_packs_lines_and_cuts_long_ones():
    doc = "one two three\nfour five six\n\n" + " ".join(f"w{i}" for i in range(25)) + "\nshort"
    assert split_passages(doc, max_words=10, min_words=1) == [
        "one two three four five six",
        "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9",
        "w10 w11 w12 w13 w14 w15 w16 w17 w18 w19",
        "w20 w21 w22 w23 w24 short",
    ]
    assert split_passages("a b\n\nc", max_words=10, min_words=4) == []  # packed to 3 words: too short


def test_planted_document_ranks_first(index):
    assert index.num_docs == 7  # every sentence is its own passage at 20 words
    hits = index.search([QUERY], k=3)[0]
    assert index.get(hits[0][0]) == PLANTED
    assert hits[0][1] > hits[1][1] if len(hits) > 1 else True
    # A query sharing no word with the corpus retrieves nothing rather than arbitrary zero-score passages.
    assert index.search(["zzyzx qwerty"], k=3) == [[]]


def test_index_reloads_with_identical_results(index, tmp_path):
    before = index.search([QUERY, "wheat harvest rains"], k=4)
    with BM25Index(tmp_path / "index") as reloaded:
        assert reloaded.num_docs == index.num_docs
        assert reloaded.search([QUERY, "wheat harvest rains"], k=4) == before
        assert [reloaded.get(i) for i in range(reloaded.num_docs)] == [
            index.get(i) for i in range(index.num_docs)
        ]


def test_duplicate_passages_are_stored_once(tmp_path):
    with build_index(
        [PLANTED, PLANTED.upper(), FILLER[0]], tmp_path / "i", max_words=40, progress=False
    ) as idx:
        assert idx.num_docs == 2


def _passages(index_dir: Path) -> list[str]:
    with BM25Index(index_dir) as index:
        return [index.get(i) for i in range(index.num_docs)]


def test_a_build_that_fails_leaves_the_previous_index_whole(index, tmp_path):
    """An empty corpus used to truncate the old index's passages while its metadata stayed: every later run
    reused the empty store and crashed with a JSONDecodeError."""
    before = _passages(tmp_path / "index")
    with pytest.raises(UserError, match="no passage of 5 words"):
        build_index(["too short", ""], tmp_path / "index", max_words=20, progress=False)
    assert _passages(tmp_path / "index") == before
    assert [p.name for p in tmp_path.iterdir()] == ["index"]  # the staging folder is gone


def test_an_interrupted_rebuild_leaves_the_previous_index_whole(index, tmp_path):
    before = _passages(tmp_path / "index")

    def documents():  # another corpus, cut off by a Ctrl-C once some of its passages are written
        yield "alpha beta gamma delta epsilon zeta eta theta"
        yield "iota kappa lambda mu nu xi omicron pi rho"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_index(documents(), tmp_path / "index", max_words=20, chunk_size=1, progress=False)
    assert _passages(tmp_path / "index") == before
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


def test_a_killed_build_leaves_a_folder_the_next_build_removes(tmp_path):
    """SIGKILL runs no `finally`: the killed build's staging folder (a copy of the corpus's passages) stays, and
    the next build of that index deletes it, but never the folder of a build that is still writing."""
    fcntl = pytest.importorskip("fcntl")
    script = (
        "import os, signal\n"
        "from electra.tlm.indexing import build_index\n"
        "def documents():\n"
        "    yield 'alpha beta gamma delta epsilon zeta eta theta'\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        f"build_index(documents(), {str(tmp_path / 'index')!r}, max_words=20, chunk_size=1, progress=False)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[1], check=False)
    assert killed.returncode == -signal.SIGKILL
    (abandoned,) = tmp_path.glob(".index.building-*")
    live = tmp_path / ".index.building-live"
    live.mkdir()
    for folder in (abandoned, live):
        os.utime(folder, (time.time() - 120, time.time() - 120))
    with open(live / BUILD_LOCK, "w") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        build_index(_corpus(), tmp_path / "index", max_words=20, min_words=5, progress=False).close()
    assert not abandoned.exists() and live.is_dir()
    assert PLANTED in _passages(tmp_path / "index")


def test_a_corpus_edited_in_place_is_indexed_again(tmp_path, capsys):
    corpus, index_dir = tmp_path / "corpus.txt", tmp_path / "index"
    corpus.write_text("\n\n".join(FILLER) + "\n")
    with load_or_build_index(corpus, index_dir, max_words=20, progress=False) as first:
        assert first.search([QUERY], k=3) == [[]]
    (index_dir / "notes.txt").write_text("mine")  # a user's file in the index folder
    with load_or_build_index(corpus, index_dir, max_words=20, progress=False):
        pass
    assert capsys.readouterr().out == ""  # unchanged: reused, silently

    corpus.write_text("\n\n".join([*FILLER[:3], PLANTED]) + "\n")  # same path, other text
    with load_or_build_index(corpus, index_dir, max_words=20, progress=False) as second:
        hits = second.search([QUERY], k=3)[0]
        assert hits and second.get(hits[0][0]) == PLANTED
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "corpus changed" in out[0] and "rebuilding" in out[0]
    assert (index_dir / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "index"]


@pytest.mark.parametrize("damage", ["passages emptied", "passages deleted", "metadata cut short"])
def test_a_damaged_index_is_rebuilt_or_refused_in_one_line(damage, tmp_path, capsys):
    corpus, index_dir = tmp_path / "corpus.txt", tmp_path / "index"
    corpus.write_text("\n\n".join([*FILLER, PLANTED]) + "\n")
    load_or_build_index(corpus, index_dir, max_words=20, progress=False).close()
    whole = _passages(index_dir)
    if damage == "passages emptied":  # what a failed build used to leave
        (index_dir / DOCS_FILE).write_bytes(b"")
    elif damage == "passages deleted":
        (index_dir / DOCS_FILE).unlink()
    else:
        meta = (index_dir / META_FILE).read_text()
        (index_dir / META_FILE).write_text(meta[: len(meta) // 2])
    with pytest.raises(UserError, match="index is damaged"):
        BM25Index(index_dir)
    capsys.readouterr()
    with load_or_build_index(corpus, index_dir, max_words=20, progress=False) as rebuilt:
        assert [rebuilt.get(i) for i in range(rebuilt.num_docs)] == whole
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "damaged" in out[0] and "rebuilding" in out[0]


def test_retrieve_cli_after_a_failed_build_on_the_same_index(tmp_path, capsys):
    """The reported sequence: a retrieve, one with an empty corpus on its index (a one-line error), then the
    first again with --overwrite, which crashed with a traceback from then on."""
    from electra.app.cli import main

    corpus, empty, task = tmp_path / "corpus.txt", tmp_path / "empty.tsv", tmp_path / "train.tsv"
    corpus.write_text("\n\n".join([*FILLER, PLANTED]) + "\n")
    empty.write_text("")
    task.write_text(f"{QUERY}\tsport\nwheat and barley harvest\tfarm\n")
    out, index_dir = tmp_path / "rx", tmp_path / "rx" / "index"
    common = ["--task-train", str(task), "--top-k", "2", "--passage-words", "20", "--no-progress"]
    assert main(["tlm", "retrieve", "--corpus", str(corpus), *common, "--out", str(out)]) == 0
    failed = ["--corpus", str(empty), "--index", str(index_dir), "--out", str(tmp_path / "ry")]
    assert main(["tlm", "retrieve", *failed, *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no passage" in err[0]
    assert main(["tlm", "retrieve", "--corpus", str(corpus), *common, "--out", str(out), "--overwrite"]) == 0
    assert (out / CORPUS_SUBDIR / CORPUS_FILE).read_text().startswith(PLANTED)


def test_union_is_deduplicated_with_provenance():
    result = union_top_k([[(3, 2.0), (1, 1.0)], [], [(1, 5.0), (4, 0.5)]])
    assert result.doc_ids == [3, 1, 4]
    assert result.queries == {3: [0], 1: [0, 2], 4: [2]}
    assert result.best_score[1] == 5.0
    assert result.empty_queries == 1


def test_retrieve_corpus_writes_a_deduplicated_text_corpus(index, tmp_path):
    out = tmp_path / "out"
    texts = [QUERY, "the football championship game", "wheat and barley harvest"]
    result = retrieve_corpus(index, texts, top_k=2, out_dir=out, progress=False)
    blocks = [b for b in (out / CORPUS_SUBDIR / CORPUS_FILE).read_text().split("\n\n") if b.strip()]
    assert len(blocks) == len(set(blocks)) == len(result.doc_ids)
    assert blocks[0] == PLANTED
    records = list(read_retrieved(out))
    assert records[0]["queries"] == [0, 1]  # both football queries retrieved the planted passage
    assert json.loads((out / "summary.json").read_text())["retrieved_passages"] == len(blocks)


def test_empty_retrieval_is_a_clear_error(index, tmp_path):
    with pytest.raises(UserError, match="retrieved nothing"):
        retrieve_corpus(index, ["zzyzx qwerty"], top_k=5, out_dir=tmp_path / "o", progress=False)


def test_rake_scores_phrases_by_degree_over_frequency():
    text = "Compatibility of systems of linear constraints over the set of natural numbers."
    assert candidate_phrases(text) == [
        ("compatibility",),
        ("systems",),
        ("linear", "constraints"),
        ("set",),
        ("natural", "numbers"),
    ]
    # Each word occurs once, so a phrase of n words scores n * n; single words score 1.
    assert rake_keywords(text, top_n=2) == ["linear constraints", "natural numbers"]
    assert keyword_query(text, max_words=3) == "linear constraints compatibility"


def test_make_query_uses_keywords_only_for_long_inputs():
    short = "stock markets fell sharply"
    assert make_query(short, long_query_words=10) == short
    long_text = "The central bank raised rates. Markets fell. " * 5
    # "central bank raised rates" scores 4 * 4 = 16 and fills the 4-word budget; "markets fell" (4) is left out.
    assert make_query(long_text, long_query_words=10, keyword_words=4) == "central bank raised rates"
    assert (
        make_query(long_text, long_query_words=10, keyword_words=6)
        == "central bank raised rates markets fell"
    )


def _retrieve_argv(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    corpus, task = tmp_path / "corpus.txt", tmp_path / "train.tsv"
    corpus.write_text("\n\n".join([*FILLER, PLANTED]) + "\n")
    task.write_text(f"{QUERY}\tsport\nwheat and barley harvest\tfarm\nthe river flooded the streets\tcity\n")
    common = ["--task-train", str(task), "--top-k", "2", "--passage-words", "20", "--no-progress"]
    return ["tlm", "retrieve", "--corpus", str(corpus), *common, "--out", str(out), *extra]


def test_a_selection_interrupted_while_written_leaves_no_half_corpus(tmp_path, monkeypatch):
    """Before: OUT/corpus/retrieved.txt was written in place, so Ctrl-C (or SIGTERM) half way left a cut-short
    corpus that `tlm train` trained on without a word, and the same command again was refused ("already
    exists; pass --overwrite"). Now nothing is left but hidden staging names, and the rerun writes it whole."""
    from electra.app.cli import main

    assert main(_retrieve_argv(tmp_path, tmp_path / "straight")) == 0
    straight = (tmp_path / "straight" / CORPUS_SUBDIR / CORPUS_FILE).read_text()
    assert len([b for b in straight.split("\n\n") if b.strip()]) >= 3
    real_get, calls = BM25Index.get, []

    def get_then_die(self, doc_id):
        calls.append(doc_id)
        if len(calls) == 2:  # the first passage is written, the second is not
            raise KeyboardInterrupt
        return real_get(self, doc_id)

    monkeypatch.setattr(BM25Index, "get", get_then_die)
    out = tmp_path / "killed"
    assert main(_retrieve_argv(tmp_path, out)) == 130
    assert not (out / CORPUS_SUBDIR / CORPUS_FILE).exists() and not (out / "summary.json").exists()
    assert sorted(p.name for p in out.iterdir()) == ["index"]  # no staging file stays behind
    monkeypatch.setattr(BM25Index, "get", real_get)
    assert main(_retrieve_argv(tmp_path, out)) == 0  # no --overwrite needed: nothing was written
    assert (out / CORPUS_SUBDIR / CORPUS_FILE).read_text() == straight


def test_training_refuses_a_cut_short_or_unfinished_selection(tmp_path):
    """Before: a retrieved.txt cut short (a copy, a full disk) or left by a run that did not finish was read as
    the corpus it should have been; now `tlm train` (through `corpus_of`) names the file and the fix, and the
    corpus folder itself is still taken as it is."""
    from electra.app.cli import main
    from electra.tlm.task_data import corpus_of

    out = tmp_path / "ret"
    assert main(_retrieve_argv(tmp_path, out)) == 0
    corpus = out / CORPUS_SUBDIR / CORPUS_FILE
    assert json.loads((out / "summary.json").read_text())["corpus_bytes"] == corpus.stat().st_size
    assert corpus_of(out) == out / CORPUS_SUBDIR
    text = corpus.read_text()
    corpus.write_text(text[: len(text) // 2])
    with pytest.raises(UserError, match=r"retrieved.txt: holds \d+ bytes, not the \d+ .*--overwrite") as cut:
        corpus_of(out)
    assert len(str(cut.value).splitlines()) == 1 and str(out / CORPUS_SUBDIR) in str(cut.value)
    assert corpus_of(out / CORPUS_SUBDIR) == out / CORPUS_SUBDIR  # the user's choice to train on it as it is
    (out / "summary.json").unlink()
    with pytest.raises(UserError, match="no readable summary.json beside it"):
        corpus_of(out)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--top-k", "0"], "--top-k must be at least 1"),
        (["--passage-words", "0"], "--passage-words must be at least 1"),
        (["--select-size", "-3"], "--select-size must be at least 1"),
        (["--select-size", "1000"], "--select-size 1000 is more than the"),
    ],
)
def test_retrieve_numbers_are_refused_in_one_line(flags, message, tmp_path, capsys):
    """Before: `--top-k 0` was refused only once the whole corpus was indexed, `--passage-words 0` never returned
    (empty windows cut forever), and a BM25 `--select-size` above the pool silently wrote fewer passages, which
    is no equal-size comparison (ISS refuses it)."""
    from electra.app.cli import main

    out = tmp_path / "o"
    argv = _retrieve_argv(tmp_path, out)
    for flag, value in zip(flags[::2], flags[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (out / CORPUS_SUBDIR).exists()
    if "--select-size" not in flags:
        assert not out.exists()  # refused before the index was built


def test_split_passages_refuses_an_empty_window(tmp_path):
    with pytest.raises(UserError, match="--passage-words must be at least 1"):
        build_index(_corpus(), tmp_path / "index", max_words=0, progress=False)
