"""Fault paths of `electra score`, `rescore`, `ngram` and `nbest`: every bad input or option is one line naming the
file (or flag) and the fix, said before any scoring, and nothing the user wrote or asked for is lost."""

from __future__ import annotations

import io
import json
import logging
import sys
import types
import wave
from collections.abc import Callable
from pathlib import Path

import pytest

from electra.app.cli import main
from electra.core.errors import ElectraWarning
from electra.pll.nbest import Hypothesis, Utterance, read_nbest
from tests.test_pll_cli import DEV, TEST, _save_mlm, _write_list


@pytest.fixture
def mlm_dir(tmp_path):
    return _save_mlm(tmp_path / "mlm", seed=0)


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


class _ClosedPipe(io.StringIO):
    """Standard output whose reader has gone (`electra score ... | head -1`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_score_output_is_written_even_when_standard_output_closes(mlm_dir, tmp_path, monkeypatch, capsys):
    """The scores went to standard output first and to --output after: `| head` lost the whole --output file
    (hours of scoring) to the BrokenPipeError."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\na dog ran\n")
    out = tmp_path / "scores.jsonl"
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["score", "--model", str(mlm_dir), "--input", str(text), "--output", str(out)]) == 141
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == ["the cat sat", "a dog ran"]


def test_an_unwritable_output_is_refused_before_scoring(tmp_path, capsys):
    """`score --output /proc/x/s.jsonl` (or a read-only mount) scored everything, then ended in a traceback."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    argv = ["score", "--model", str(tmp_path / "no-model"), "--input", str(text)]
    assert main([*argv, "--output", "/proc/electra-test/scores.jsonl"]) == 2
    assert "--output /proc/electra-test: cannot write here" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("nbest", [False, True], ids=["sentences", "nbest"])
def test_scores_reach_standard_output_when_output_cannot_be_written(
    mlm_dir, tmp_path, monkeypatch, capsys, nbest
):
    """A disk that fills up during hours of scoring: the write of --output failed with a traceback and every score
    was lost. Now they are printed, and one line says what happened."""
    import errno

    import electra.pll.resumable
    import electra.pll.score_cli

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    # an n-best list is written whole at the end, sentences' scores as they come
    if nbest:
        monkeypatch.setattr(electra.pll.score_cli, "write_text_atomically", full)
    else:
        monkeypatch.setattr(electra.pll.resumable, "append_lines", full)
    source = tmp_path / ("dev.json" if nbest else "in.txt")
    if nbest:
        _write_list(source, DEV[:1])
    else:
        source.write_text("the cat sat\na dog ran\n")
    out = tmp_path / "scores.out"
    assert main(["score", "--model", str(mlm_dir), "--input", str(source), "--output", str(out)]) == 2
    captured = capsys.readouterr()
    assert (
        f"electra score: error: --output {out}: could not be written (No space left on device)"
        in captured.err
    )
    assert "Traceback" not in captured.err and not out.exists()
    if not nbest:  # what was written before the disk filled is kept for --resume
        assert (
            f"the first 0 are kept in {out}.unfinished: free some space and rerun with --resume"
            in captured.err
        )
    if nbest:
        assert [h["pll"] < 0 for h in json.loads(captured.out)[0]["hyps"]] == [True, True]
    else:
        assert [line.split("\t")[1] for line in captured.out.splitlines()] == ["the cat sat", "a dog ran"]


def test_output_that_is_an_input_is_never_replaced(tmp_path, capsys):
    """`score --input x --output x --overwrite` replaced the user's file with the scores (and the refusal without
    --overwrite suggested exactly that); `nbest --output` over its --refs likewise. Refused before the model."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    nbest = tmp_path / "dev.json"
    _write_list(nbest, DEV)
    before = nbest.read_text()
    for source, output in ((text, text), (nbest, nbest), (text, tmp_path / "." / "in.txt")):
        for extra in ([], ["--overwrite"]):
            argv = ["score", "--model", str(tmp_path / "no-model"), "--input", str(source)]
            assert main([*argv, "--output", str(output), *extra]) == 2
            err = _one_line(capsys.readouterr().err)
            assert "is the --input file, which this command reads; it is never replaced" in err
            assert "pass --overwrite" not in err
    link = tmp_path / "link.txt"
    link.symlink_to(text)
    argv = ["score", "--model", "m", "--input", str(text), "--output", str(link), "--overwrite"]
    assert main(argv) == 2
    assert text.read_text() == "the cat sat\n" and nbest.read_text() == before
    capsys.readouterr()
    audio = tmp_path / "audio"
    audio.mkdir()
    (audio / "u1.wav").write_bytes(b"")
    refs = audio / "transcription"
    refs.write_text("u1 the cat\n")
    assert main(["nbest", "--audio", str(audio), "--output", str(refs), "--overwrite"]) == 2
    assert "is the --refs file" in _one_line(capsys.readouterr().err)
    assert refs.read_text() == "u1 the cat\n"


def test_blank_lines_keep_each_score_tied_to_its_input_line(mlm_dir, tmp_path, capsys):
    """Blank lines were dropped silently, so the n-th score was not the n-th line's and nothing said which line a
    record came from (duplicate sentences made matching by text ambiguous)."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n\n\na dog ran\nthe cat sat\u2028on the mat\n")
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--model", str(mlm_dir), "--input", str(text), "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]
    assert [(r["line"], r["text"]) for r in records] == [
        (1, "the cat sat"),
        (4, "a dog ran"),
        (5, "the cat sat\u2028on the mat"),  # U+2028 does not end a line for sed, editors or `wc -l`
    ]
    captured = capsys.readouterr()
    assert f"{text}: 2 blank line(s) skipped" in captured.err
    assert len(captured.out.split("\n")) == 3 + 1
    # `rescore --scores` reads the records back, the one holding U+2028 included.
    dev = tmp_path / "dev.json"
    _write_list(dev, [("u1", "the cat sat", [("the cat sat", -1.0), ("a dog ran", -1.1)])])
    argv = ["rescore", "--dev", str(dev), "--scores", str(out), "--output", str(tmp_path / "r")]
    assert main(argv) == 0


def test_blank_lines_at_the_end_are_counted_and_lone_carriage_returns_refused(mlm_dir, tmp_path, capsys):
    """Blank lines after the last sentence were not counted ("1 blank line(s)" for 3); a file broken by carriage
    returns alone (old Mac) was scored as one sentence holding all of its lines. Windows line breaks, and CR CR LF
    from converting them twice, are read as before."""
    text = tmp_path / "in.txt"
    text.write_bytes(b"the cat sat\r\n\r\na dog ran\n\n\n")
    assert main(["score", "--model", str(mlm_dir), "--input", str(text)]) == 0
    captured = capsys.readouterr()
    assert f"{text}: 3 blank line(s) skipped" in captured.err
    assert [line.split("\t")[1] for line in captured.out.splitlines()] == ["the cat sat", "a dog ran"]
    text.write_bytes(b"the cat sat\r\r\na dog ran\r\r\n")
    assert main(["score", "--model", str(mlm_dir), "--input", str(text)]) == 0
    captured = capsys.readouterr()
    assert "blank line" not in captured.err
    assert [line.split("\t")[1] for line in captured.out.splitlines()] == ["the cat sat", "a dog ran"]
    text.write_bytes(b"the cat sat\na dog ran\rthe cat sat\r")
    assert (
        main(["score", "--model", str(mlm_dir), "--input", str(text), "--output", str(tmp_path / "s")]) == 2
    )
    err = _one_line(capsys.readouterr().err)
    assert f"{text}:2: a carriage return inside the line (old Mac line breaks?)" in err and "tr '\\r'" in err
    assert "scoring with" not in err and not (tmp_path / "s").exists()


def test_text_encodings_are_read_or_named(mlm_dir, tmp_path, monkeypatch, capsys):
    """UTF-16 with its mark (PowerShell's `>`) is read, as corpora are; UTF-16 without it (valid UTF-8, full of NUL
    bytes) was scored as garbage sentences; a UTF-8 mark passed `score` but failed `rescore`'s JSON parsing."""
    plain, utf16 = tmp_path / "plain.txt", tmp_path / "utf16.txt"
    plain.write_text("the cat sat\na dog ran\n")
    utf16.write_bytes("the cat sat\r\na dog ran\r\n".encode("utf-16"))
    assert main(["score", "--model", str(mlm_dir), "--input", str(plain)]) == 0
    expected = capsys.readouterr().out
    with pytest.warns(ElectraWarning, match="is UTF-16 \\(byte-order mark\\); reading it as such"):
        assert main(["score", "--model", str(mlm_dir), "--input", str(utf16)]) == 0
    assert capsys.readouterr().out == expected

    no_mark = tmp_path / "no-mark.txt"
    no_mark.write_bytes("the cat sat\n".encode("utf-16-le"))
    assert main(["score", "--model", str(mlm_dir), "--input", str(no_mark)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{no_mark}: UTF-16 text without a byte-order mark" in err and "iconv -f utf-16le -t utf-8" in err
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"the cat\x00\x00\x00\x07\x00sat\n")
    assert main(["score", "--model", str(mlm_dir), "--input", str(binary)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{binary}: holds NUL bytes (offset 7), so it is not text; expected one sentence per line" in err
    latin = tmp_path / "latin.txt"
    latin.write_bytes("the cat sat\nthe caf\u00e9 sat\n".encode("latin-1"))
    assert main(["score", "--model", str(mlm_dir), "--input", str(latin)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{latin}:2: not UTF-8 text: undecodable bytes at offset 19;" in err and "iconv" in err

    dev = tmp_path / "dev.json"
    _write_list(dev, DEV)
    marked = tmp_path / "marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + dev.read_bytes())  # Notepad's "UTF-8 with BOM"
    argv = ["rescore", "--features", "score", "--length", "words", "--dev"]
    assert main([*argv, str(dev), "--output", str(tmp_path / "a")]) == 0
    assert main([*argv, str(marked), "--output", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "report.json").read_text())
    b = json.loads((tmp_path / "b" / "report.json").read_text())
    assert a["weights"] == b["weights"] and a["splits"][0]["wer"] == b["splits"][0]["wer"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lambdas", "0.1,abc"], "--lambdas '0.1,abc': give comma-separated numbers"),
        (["--lambdas", "nan,inf"], "--lambdas 'nan,inf': every λ must be a finite number"),
        (["--lambdas", ""], "no λ values to try; pass at least one to --lambdas"),  # an unset shell variable
        (["--lambdas", "0.1", "--length", "words"], "--lambdas is the classic score + λ·PLL recipe"),
        (["--ln", "nan"], "--ln nan: the length-normalisation exponent must be a finite number"),
        (["--features", "score,pll"], "--features: 'pll' is named twice (--model/--scores add it)"),
        (["--device", "nonsense"], "--device 'nonsense' is not a device"),
        (["--device", "cuda:99"], "--device cuda:99: this machine has"),
    ],
)
def test_bad_rescore_options_are_refused_before_any_scoring(mlm_dir, tmp_path, capsys, extra, message):
    """These were read after every hypothesis was scored (a typo in --lambdas cost the whole scoring run), or not
    checked at all: `nan,inf` wrote NaN (not JSON) into report.json and every list, `--lambdas ""` ran the weight
    search instead, a named `pll` collapsed with --model's into one weight, and a bad --device was a torch
    traceback."""
    dev = tmp_path / "dev.json"
    _write_list(dev, DEV)
    out = tmp_path / "out"
    assert main(["rescore", "--model", str(mlm_dir), "--dev", str(dev), *extra, "--output", str(out)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err.startswith("electra rescore: error: ") and message in err
    assert "scoring with" not in err and not out.exists()


def test_references_missing_for_some_or_empty_for_all_are_named_before_scoring(mlm_dir, tmp_path, capsys):
    """A test list with a 'ref' on some utterances only had its WER dropped whole, said as "no references", after
    all the scoring; a dev list whose references are all "" tuned the weights on WERs of 100% or 0% (edits over
    no words); a test list of empty references reported such WERs (said now for what it is)."""
    dev, test = tmp_path / "dev.json", tmp_path / "test.json"
    _write_list(dev, DEV)
    data = [{"id": "t1", "ref": "a dog sat", "hyps": [{"text": "a dog", "score": -1}]}]
    data.append({"id": "t2", "hyps": [{"text": "the cat", "score": -1}]})
    test.write_text(json.dumps(data))
    argv = ["rescore", "--model", str(mlm_dir), "--dev", str(dev)]
    assert main([*argv, "--test", str(test), "--output", str(tmp_path / "a")]) == 2
    err = _one_line(capsys.readouterr().err)
    assert (
        f"{test}:t2: no 'ref', but 1 of its 2 utterances have one; give every utterance its reference" in err
    )
    assert "scoring with" not in err and not (tmp_path / "a").exists()

    empty = tmp_path / "empty.json"
    _write_list(empty, [(u, "", hyps) for u, _, hyps in DEV])
    assert (
        main(["rescore", "--model", str(mlm_dir), "--dev", str(empty), "--output", str(tmp_path / "b")]) == 2
    )
    err = _one_line(capsys.readouterr().err)
    assert f"{empty}: every 'ref' is empty, so there are no reference words to tune the weights on" in err
    assert "scoring with" not in err and not (tmp_path / "b").exists()

    fields = ["rescore", "--features", "score", "--length", "words", "--dev", str(dev)]
    blind = tmp_path / "blind.json"  # a blind test set: no 'ref' at all, as before
    blind.write_text(json.dumps([{k: v for k, v in u.items() if k != "ref"} for u in data]))
    out = tmp_path / "c"
    assert main([*fields, "--test", str(empty), str(blind), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "test: empty.json: its references are all empty, WER not computed" in printed
    assert "test: blind.json: no references, WER not computed" in printed
    report = json.loads((out / "report.json").read_text())
    assert ["wer" in split for split in report["splits"]] == [True, False, False]


def test_score_refuses_a_bad_device_in_one_line(mlm_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    assert main(["score", "--model", str(mlm_dir), "--input", str(text), "--device", "gpu0"]) == 2
    assert "--device 'gpu0' is not a device" in _one_line(capsys.readouterr().err)


def test_a_feature_named_twice_is_refused(tmp_path, capsys):
    """`--features score,score` kept one dict entry for two weights: the anchor's weight became the second's, 0,
    and every list was "re-ranked" by a constant."""
    dev = tmp_path / "dev.json"
    _write_list(dev, DEV)
    for features, length in (("score,score", "words"), ("score,words", "words"), ("score,pieces", "pieces")):
        argv = ["rescore", "--dev", str(dev), "--features", features, "--length", length]
        assert main([*argv, "--output", str(tmp_path / "out")]) == 2
        assert "is named twice" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_feature_missing_from_a_test_list_is_named_before_scoring(mlm_dir, tmp_path, capsys):
    """A field present in dev but missing from one test hypothesis failed after all the scoring and after dev's
    rescored list was written, naming neither the file nor the utterance."""
    dev, test = tmp_path / "dev.json", tmp_path / "test.json"
    data = [
        {"id": u, "ref": r, "hyps": [{"text": t, "score": s, "am": s / 2} for t, s in h]} for u, r, h in DEV
    ]
    dev.write_text(json.dumps(data))
    data = [{"id": u, "ref": r, "hyps": [{"text": t, "score": s} for t, s in h]} for u, r, h in TEST]
    data[0]["hyps"][1]["am"] = "-1.0"  # a string, and the other hypothesis has none
    test.write_text(json.dumps(data))
    out = tmp_path / "out"
    argv = [
        "rescore",
        "--model",
        str(mlm_dir),
        "--dev",
        str(dev),
        "--test",
        str(test),
        "--features",
        "score,am",
    ]
    assert main([*argv, "--output", str(out)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{test}:t1: hypothesis 'the dog sat' has no finite number in field 'am'" in err
    assert "scoring with" not in err and not out.exists()


@pytest.mark.parametrize(
    "record, message",
    [
        ('{"text": "the cat sad", "pll": NaN, "pieces": 3}', "'pll' is NaN, not a finite number"),
        ('{"text": "the cat sad", "pll": Infinity, "pieces": 3}', "'pll' is Infinity, not a finite number"),
        ('{"text": "the cat sad", "pll": true, "pieces": 3}', "'pll' is true, not a finite number"),
        ('{"text": "the cat sad", "pll": -2.0, "pieces": "3"}', "'pieces' is \"3\", not a count"),
        ('{"text": "the cat sad", "pll": -2.0, "pieces": -5}', "'pieces' is -5, not a count"),
    ],
)
def test_saved_scores_that_are_not_numbers_are_refused(tmp_path, capsys, record, message):
    """Python's JSON reads NaN and Infinity: they became NaN weights and `"combined": NaN` in the lists written; a
    piece count of "3" or -5 stopped --ln with a TypeError or ZeroDivisionError traceback."""
    dev = tmp_path / "dev.json"
    _write_list(dev, DEV[:1])
    scores = tmp_path / "scores.jsonl"
    scores.write_text(record + '\n{"text": "the cat sat", "pll": -3.0, "pieces": 3}\n')
    argv = [
        "rescore",
        "--dev",
        str(dev),
        "--scores",
        str(scores),
        "--ln",
        "1",
        "--output",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{scores}:1: {message}" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("field", ["score", "text", "pll", "combined", "words", "pll:other"])
def test_ngram_refuses_a_field_name_that_is_taken(tmp_path, capsys, field):
    """`ngram --field score` replaced every recognizer score with the n-gram's in the lists written, and `--field
    text` every hypothesis's words with a number."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n")
    nbest = tmp_path / "dev.json"
    _write_list(nbest, DEV)
    out = tmp_path / "out"
    assert (
        main(
            ["ngram", "--corpus", str(corpus), "--nbest", str(nbest), "--field", field, "--output", str(out)]
        )
        == 2
    )
    assert f"--field {field!r}: that name is taken" in _one_line(capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("content", ["", "1914 - 1918 !!!\n"])
def test_ngram_on_a_corpus_without_words_is_one_line(tmp_path, capsys, content):
    """An empty corpus, or one of digits and punctuation, was the counting's `ValueError: no training sentences`
    traceback."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(content)
    nbest = tmp_path / "dev.json"
    _write_list(nbest, DEV)
    assert (
        main(["ngram", "--corpus", str(corpus), "--nbest", str(nbest), "--output", str(tmp_path / "o")]) == 2
    )
    assert f"{corpus}: holds no words to count" in _one_line(capsys.readouterr().err)


def test_ngram_refuses_two_lists_of_one_file_name(tmp_path, capsys):
    """a/dev.json and b/dev.json were both written to OUTPUT/dev.json, the first list lost; so was a list given
    twice."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat. a dog ran.\n")
    first, second = tmp_path / "a" / "dev.json", tmp_path / "b" / "dev.json"
    _write_list(first, DEV)
    _write_list(second, TEST)
    out = tmp_path / "out"
    argv = ["ngram", "--corpus", str(corpus), "--order", "2", "--output", str(out)]
    for lists in ([first, second], [first, first]):
        assert main([*argv, "--nbest", *map(str, lists)]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"--nbest {lists[0]} and {lists[1]} would both be written as {out / 'dev.json'}" in err
        assert not out.exists()
    assert main([*argv, "--nbest", str(first)]) == 0
    assert [u.id for u in read_nbest(out / "dev.json")[0]] == ["d1", "d2"]


def test_a_truncated_sentence_is_named_by_its_words_not_its_batch_index(mlm_dir, caplog):
    """The warning said "sentence 1" for the third input line (its index in the batch, blank lines and chunks
    aside), and for an n-best list the index of a sorted distinct text. A line without spaces is one "word", and
    only its first characters are quoted."""
    from electra.pll.scoring import load_scorer

    scorer = load_scorer(mlm_dir, "auto", "cpu", 8)
    long = " ".join(["a dog ran"] * 20)
    glued = "the." * 40  # 80 pieces, no space
    with caplog.at_level(logging.WARNING, logger="electra.pll.scoring"):
        results = scorer.score(["the cat sat", long, glued])
    assert [r.truncated for r in results] == [False, True, True]
    messages = [r.getMessage() for r in caplog.records if r.name == "electra.pll.scoring"]
    assert len(messages) == 2 and not any("sentence 1" in m for m in messages)
    assert messages[0].endswith(": 'a dog ran a dog ran a dog ...'")
    assert messages[1].endswith(f": {glued[:60] + ' ...'!r}")


def test_nbest_writes_a_list_it_can_read_back_for_a_clip_without_hypotheses(tmp_path, monkeypatch):
    """A clip the decoder found no path in (silence) was written with "hyps": [], which `score` and `rescore` then
    refused as an empty hypothesis list: `electra nbest`'s own output could not be read back. Now it gets the
    empty text; the recognizer's single best text, where it has one, is spaced as the n-best texts are."""
    answers = {"loud": types.SimpleNamespace(hypstr=" the  cat "), "quiet": None}
    decoded: list[str] = []

    class Decoder:  # pocketsphinx's, with no n-best path for any clip
        def __init__(self, **kwargs):
            pass

        def start_utt(self):
            pass

        def process_raw(self, data, full_utt=False):
            decoded.append("loud" if data.strip(b"\0") else "quiet")

        def end_utt(self):
            pass

        def nbest(self):
            return iter(())

        def hyp(self):
            return answers[decoded[-1]]

    monkeypatch.setitem(sys.modules, "pocketsphinx", types.SimpleNamespace(Decoder=Decoder))
    audio = tmp_path / "audio"
    audio.mkdir()
    for stem, frame in (("loud", b"\1\0"), ("quiet", b"\0\0")):
        with wave.open(str(audio / f"{stem}.wav"), "wb") as clip:
            clip.setnchannels(1)
            clip.setsampwidth(2)
            clip.setframerate(16000)
            clip.writeframes(frame * 1600)
    (audio / "transcription").write_text("<s> the cat </s> (loud)\n<s> </s> (quiet)\n")
    out = tmp_path / "nbest.json"
    assert main(["nbest", "--audio", str(audio), "--output", str(out)]) == 0
    utts, _ = read_nbest(out)
    assert [(u.id, u.ref, [h.text for h in u.hyps]) for u in utts] == [
        ("loud", "the cat", ["the cat"]),
        ("quiet", "", [""]),
    ]


def test_nbest_references_that_match_no_audio_file_are_refused_before_decoding(tmp_path, monkeypatch, capsys):
    """References are found by the wav file's name; a file of other ids was used silently: lists without a single
    'ref' and no WER, after the whole decoding. A file that is not UTF-8 was a UnicodeDecodeError traceback."""
    import electra.pll.asr

    decoded = []

    def fake_decode(audio, nbest, refs):
        decoded.append(refs)
        stems = sorted(p.stem for p in Path(audio).glob("*.wav"))
        return [Utterance(s, (refs or {}).get(s), [Hypothesis("the cat", -1.0)]) for s in stems]

    monkeypatch.setattr(electra.pll.asr, "decode_nbest", fake_decode)
    audio = tmp_path / "audio"
    audio.mkdir()
    for stem in ("a", "b"):
        (audio / f"{stem}.wav").write_bytes(b"")
    other = tmp_path / "other.txt"
    other.write_text("<s> the cat </s> (spk1-a)\n<s> a dog </s> (spk1-b)\n")
    out = tmp_path / "nbest.json"
    assert main(["nbest", "--audio", str(audio), "--output", str(out), "--refs", str(other)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{other}: none of its utterance ids (its first is 'spk1-a')" in err and "'a'" in err
    assert decoded == [] and not out.exists()

    latin = tmp_path / "latin.txt"
    latin.write_bytes("a the caf\u00e9\n".encode("latin-1"))
    assert main(["nbest", "--audio", str(audio), "--output", str(out), "--refs", str(latin)]) == 2
    assert f"{latin}:1: not UTF-8 text" in _one_line(capsys.readouterr().err)

    some = tmp_path / "some.txt"
    some.write_text("a the cat\n")
    assert main(["nbest", "--audio", str(audio), "--output", str(out), "--refs", str(some)]) == 0
    captured = capsys.readouterr()
    assert f"warning: {some}: 1 of 2 .wav files have no reference (first: 'b')" in captured.err
    assert decoded == [{"a": "the cat"}] and "WER over 1 referenced utterances" in captured.out


def _scoring_that_dies(monkeypatch) -> tuple[list[list[str]], Callable[[], None]]:
    """`electra score` in chunks of 2, killed (Ctrl-C) on its second chunk; returns the texts each chunk scored
    and a function that lets the next run score to the end, still recording them."""
    import electra.pll.resumable
    from electra.pll.scoring import MaskedLMScorer

    monkeypatch.setattr(electra.pll.resumable, "SCORE_CHUNK", 2)
    real_score, calls = MaskedLMScorer.score, []

    def score_then_die(self, texts):
        calls.append(list(texts))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_score(self, texts)

    def recover() -> None:
        calls.clear()
        monkeypatch.setattr(
            MaskedLMScorer, "score", lambda self, t: calls.append(list(t)) or real_score(self, t)
        )

    monkeypatch.setattr(MaskedLMScorer, "score", score_then_die)
    return calls, recover


def test_a_killed_score_run_resumes_from_the_scores_it_saved(mlm_dir, tmp_path, monkeypatch, capsys):
    """Before: `score --output` wrote its file once every sentence was scored, so a run stopped after hours (a
    scheduler's time limit, Ctrl-C) kept nothing and could only start over."""
    import electra.pll.resumable

    monkeypatch.setattr(electra.pll.resumable, "SCORE_CHUNK", 2)
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\n\na dog ran\nthe dog sat\na cat ran\nthe end\n")
    argv = ["score", "--model", str(mlm_dir), "--input", str(source), "--method", "mlm"]
    straight = tmp_path / "straight.jsonl"
    assert main([*argv, "--output", str(straight)]) == 0
    calls, recover = _scoring_that_dies(monkeypatch)
    out = tmp_path / "killed.jsonl"
    assert main([*argv, "--output", str(out)]) == 130
    unfinished = tmp_path / "killed.jsonl.unfinished"
    assert not out.exists() and len(unfinished.read_text().splitlines()) == 2
    with open(unfinished, "a") as handle:  # the kill cut a line short
        handle.write('{"text": "a dog r')
    capsys.readouterr()
    assert main([*argv, "--output", str(out)]) == 2  # neither appended to nor discarded unasked
    assert "holds the scores of an interrupted run; pass --resume" in _one_line(capsys.readouterr().err)
    recover()
    assert main([*argv, "--output", str(out), "--resume"]) == 0
    assert calls == [["the dog sat", "a cat ran"], ["the end"]]  # only what was not saved
    assert out.read_text() == straight.read_text() and not unfinished.exists()
    # another input at the same name is refused, not mixed with the saved scores
    unfinished.write_text(straight.read_text().splitlines(keepends=True)[0])
    source.write_text("other words\n")
    capsys.readouterr()
    assert main([*argv, "--output", str(tmp_path / "killed.jsonl"), "--resume", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "holds the score of another input" in err.splitlines()[-1]


def test_a_killed_nbest_scoring_resumes_from_the_texts_it_saved(mlm_dir, tmp_path, monkeypatch, capsys):
    """Before: `score --input list.json --output scored.json` wrote the list once every hypothesis was scored, so
    a kill after hours kept nothing, and `--resume` was refused for n-best input."""
    import electra.pll.resumable

    monkeypatch.setattr(electra.pll.resumable, "SCORE_CHUNK", 2)
    source = tmp_path / "dev.json"
    _write_list(source, DEV)  # four distinct texts
    argv = ["score", "--model", str(mlm_dir), "--input", str(source), "--method", "mlm"]
    straight = tmp_path / "straight.json"
    assert main([*argv, "--output", str(straight)]) == 0
    assert not (tmp_path / "straight.json.unfinished").exists()
    calls, recover = _scoring_that_dies(monkeypatch)
    out = tmp_path / "killed.json"
    assert main([*argv, "--output", str(out)]) == 130
    unfinished = tmp_path / "killed.json.unfinished"
    assert not out.exists() and len(unfinished.read_text().splitlines()) == 2
    capsys.readouterr()
    assert main([*argv, "--output", str(out)]) == 2  # neither appended to nor discarded unasked
    assert "holds the scores of an interrupted run; pass --resume" in _one_line(capsys.readouterr().err)
    recover()
    assert main([*argv, "--output", str(out), "--resume"]) == 0
    assert [len(texts) for texts in calls] == [2]  # only the two texts not saved
    assert json.loads(out.read_text()) == json.loads(straight.read_text()) and not unfinished.exists()


def test_a_killed_rescore_resumes_and_keeps_its_plls_for_scores(mlm_dir, tmp_path, monkeypatch, capsys):
    """Before: `rescore --model` held its PLLs in memory, so a kill after hours of scoring kept nothing, and each
    other fusion setting scored every hypothesis again. Now each model's PLLs fill OUT/pll*.jsonl as they come,
    `--resume` continues them, and the whole file is what `--scores` reads."""
    import electra.pll.resumable

    dev, test = tmp_path / "dev.json", tmp_path / "test.json"
    _write_list(dev, DEV)  # four distinct texts
    _write_list(test, TEST)  # two more
    other = _save_mlm(tmp_path / "other", seed=1)
    models = ["--model", str(mlm_dir), str(other), "--method", "mlm"]
    argv = ["rescore", *models, "--dev", str(dev), "--test", str(test)]
    monkeypatch.setattr(
        electra.pll.resumable, "SCORE_CHUNK", 2
    )  # batched as the killed run will be: the same floats
    straight = tmp_path / "straight"
    assert main([*argv, "--output-dir", str(straight)]) == 0
    assert sorted(p.name for p in straight.iterdir()) == [
        "dev.rescored.json",
        "pll-other.jsonl",
        "pll.jsonl",
        "report.json",
        "test.rescored.json",
    ]
    kept = [json.loads(line) for line in (straight / "pll.jsonl").read_text().splitlines()]
    written, _ = read_nbest(straight / "dev.rescored.json")
    by_text = {h.text: h.pll for u in written for h in u.hyps}
    assert len(kept) == 6 and {r["text"]: r["pll"] for r in kept if r["text"] in by_text} == by_text
    assert {h.extra["pll:other"] for u in written for h in u.hyps} <= {
        json.loads(line)["pll"] for line in (straight / "pll-other.jsonl").read_text().splitlines()
    }
    calls, recover = _scoring_that_dies(monkeypatch)  # chunks of 2 texts; the second chunk is killed
    out = tmp_path / "killed"
    assert main([*argv, "--output-dir", str(out)]) == 130
    assert [p.name for p in out.iterdir()] == ["pll.jsonl.unfinished"]
    assert len((out / "pll.jsonl.unfinished").read_text().splitlines()) == 2
    capsys.readouterr()
    assert main([*argv, "--output-dir", str(out)]) == 2  # neither appended to nor discarded unasked
    assert "pll.jsonl.unfinished holds the scores of an interrupted run; pass --resume" in _one_line(
        capsys.readouterr().err
    )
    recover()
    assert main([*argv, "--output-dir", str(out), "--resume"]) == 0
    assert [len(texts) for texts in calls] == [2] * 5  # the first model's last 4 texts, then the other's 6
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in straight.iterdir())
    for name in ("pll.jsonl", "pll-other.jsonl", "dev.rescored.json", "test.rescored.json"):
        assert (out / name).read_text() == (straight / name).read_text(), name
    report, straight_report = (json.loads((d / "report.json").read_text()) for d in (out, straight))
    assert report["weights"] == straight_report["weights"] and report["search"] == straight_report["search"]
    # The kept PLLs fuse again without the model: every hypothesis gets the PLL the model gave it.
    again = tmp_path / "again"
    scores = ["--scores", str(straight / "pll.jsonl")]
    assert main(["rescore", *scores, "--dev", str(dev), "--test", str(test), "--output-dir", str(again)]) == 0
    reused, _ = read_nbest(again / "dev.rescored.json")
    assert {h.text: h.pll for u in reused for h in u.hyps} == by_text
    assert json.loads((again / "report.json").read_text())["scorer"] == straight_report["scorer"]


def test_a_rescore_overwrite_stopped_between_files_leaves_no_old_report_beside_new_lists(
    tmp_path, monkeypatch, capsys
):
    """Before: `rescore --overwrite` replaced the lists one by one and report.json last, so a run stopped after the
    dev list left it beside the previous run's test list and report, which described other weights."""
    import electra.pll.report

    dev, test = tmp_path / "dev.json", tmp_path / "test.json"
    _write_list(dev, DEV)
    _write_list(test, TEST)
    out = tmp_path / "out"
    argv = ["rescore", "--features", "score", "--length", "words", "--dev", str(dev), "--test", str(test)]
    assert main([*argv, "--output-dir", str(out)]) == 0
    real_write, written = electra.pll.report.write_nbest, []

    def write_then_die(target, *args, **kwargs):
        if written:
            raise KeyboardInterrupt
        written.append(target)
        return real_write(target, *args, **kwargs)

    monkeypatch.setattr(
        electra.pll.report, "write_nbest", write_then_die
    )  # where rescore's writer looks it up
    assert main([*argv, "--output-dir", str(out), "--overwrite"]) == 130
    assert [p.name for p in out.iterdir()] == ["dev.rescored.json"]  # the new dev list alone, no stale report
