"""N-best lists in recognizers' layouts (ESPnet, Kaldi, NeMo, Whisper-style JSON lines, TSV): each example of
examples/nbest/ rescores to the WER of the same lists as JSON, its re-ranked 1-best is written in its own layout
and reads back to that WER, and malformed files are one line naming FILE:LINE with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from electra.app.cli import main
from electra.core.errors import UserError
from electra.pll.nbest import read_nbest
from electra.pll.nbest_formats import detect_format, read_lists, sniff_format
from electra.pll.wer import corpus_wer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "nbest"
NEMO_BEAMS = "preds_out_width10_alpha1.0_beta0.0.tsv"

# format -> (dev, test, dev reference, test reference, features the layout carries)
LAYOUTS = {
    "espnet": ("espnet/dev", "espnet/test", "espnet/data/dev/text", "espnet/data/test/text", "score"),
    "kaldi": ("kaldi/dev", "kaldi/test", "kaldi/data/dev/text", "kaldi/data/test/text", "am_score,lm_score"),
    "nemo": (
        f"nemo/dev/{NEMO_BEAMS}",
        f"nemo/test/{NEMO_BEAMS}",
        "nemo/dev_manifest.json",
        "nemo/test_manifest.json",
        "score",
    ),
    "whisper": ("whisper/dev.jsonl", "whisper/test.jsonl", None, None, "score,am_score,lm_score"),
    "tsv": ("tsv/dev.tsv", "tsv/test.tsv", None, None, "score,am_score,lm_score"),
}


def _rescore(
    out: Path, dev: str, test: str, features: str, refs: tuple[str | None, str | None] = (None, None)
):
    argv = ["rescore", "--dev", str(EXAMPLES / dev), "--test", str(EXAMPLES / test), "--output", str(out)]
    argv += ["--features", features, "--length", "words"]
    if refs[0] is not None:
        argv += ["--dev-ref", str(EXAMPLES / refs[0]), "--test-ref", str(EXAMPLES / refs[1])]
    assert main(argv) == 0
    return json.loads((out / "report.json").read_text())


def _kaldi_text(path: Path) -> dict[str, str]:
    """A Kaldi `text` file as compute-wer reads it: the first field the key, the rest the words."""
    rows = [line.split(" ", 1) for line in path.read_text(encoding="utf-8").splitlines()]
    return {row[0]: row[1] if len(row) > 1 else "" for row in rows}


@pytest.mark.parametrize("fmt", sorted(LAYOUTS))
def test_each_layout_rescores_to_the_json_lists_wer_and_writes_its_1best_back(fmt, tmp_path, capsys):
    dev, test, dev_ref, test_ref, features = LAYOUTS[fmt]
    assert detect_format(EXAMPLES / dev) == fmt and detect_format(EXAMPLES / test) == fmt
    expected = _rescore(tmp_path / "json", "json/dev.json", "json/test.json", features)
    got = _rescore(tmp_path / fmt, dev, test, features, (dev_ref, test_ref))
    capsys.readouterr()
    assert got["weights"] == pytest.approx(expected["weights"])
    for mine, theirs in zip(got["splits"], expected["splits"]):
        if (
            fmt == "kaldi"
        ):  # its `score` is am_score/12 + lm_score, not the JSON's decoder score: another first pass
            theirs["wer"].pop("first_pass"), mine["wer"].pop("first_pass")
        assert mine["wer"] == theirs["wer"] and mine["utterances"] == theirs["utterances"] == 6
        assert mine["format"] == fmt
    # every hypothesis was read (the oracle) with its scores (each feature alone picks as in the JSON)
    assert {"oracle", "fused"} <= set(got["splits"][0]["wer"])

    # The re-ranked 1-best in the recognizer's layout, read back as its toolkit would, scores the fused WER.
    split = got["splits"][1]
    best = Path(split["first_best"])
    refs = {u.id: u.ref for u in read_lists(EXAMPLES / test, fmt, test_ref and EXAMPLES / test_ref)[0]}
    if fmt == "kaldi":
        hyps = _kaldi_text(best)
        assert sorted(hyps) == sorted(_kaldi_text(EXAMPLES / test_ref))  # compute-wer pairs keys with the ref
    else:
        back, layout = read_lists(
            best.parent.parent if fmt == "espnet" else best, fmt, test_ref and EXAMPLES / test_ref
        )
        assert layout == fmt and all(len(u.hyps) == 1 for u in back)
        hyps = {u.id: u.hyps[0].text for u in back}
    assert list(hyps) == list(refs)
    assert corpus_wer([refs[k] for k in refs], [hyps[k] for k in refs]) == pytest.approx(
        split["wer"]["fused"]
    )
    # and beside it, the rescored JSON keeps the layout's fields
    written, _ = read_nbest(split["output"])
    for name in features.split(","):
        assert name == "score" or all(name in h.extra for u in written for h in u.hyps)


def test_kaldi_costs_become_log_scores_and_espnet_tensors_numbers():
    kaldi, _ = read_lists(EXAMPLES / "kaldi" / "dev")
    json_list, _ = read_nbest(EXAMPLES / "json" / "dev.json")
    first = kaldi[0].hyps[0]
    assert (
        first.extra["am_score"] == json_list[0].hyps[0].extra["am_score"] < 0
    )  # cost 94978.096 -> -94978.096
    assert first.score == pytest.approx(first.extra["am_score"] / 12 + first.extra["lm_score"])
    espnet, _ = read_lists(EXAMPLES / "espnet" / "dev")  # "tensor(-96112.3400)"
    assert [h.score for h in espnet[0].hyps] == [h.score for h in json_list[0].hyps]
    assert [h.text for h in espnet[0].hyps] == [h.text for h in json_list[0].hyps]
    assert espnet[0].ref is None  # ESPnet's folders hold no reference; data/SET/text does


def test_a_sentence_file_is_no_nbest_layout_and_a_wrong_format_is_named(tmp_path):
    sentences = tmp_path / "s.txt"
    sentences.write_text("the cat sat\t3\n")
    assert sniff_format(sentences) is None
    with pytest.raises(UserError, match=r"s.txt: not a recognised n-best layout"):
        detect_format(sentences)
    with pytest.raises(UserError, match=r"--format kaldi reads a folder"):
        detect_format(sentences, "kaldi")
    with pytest.raises(UserError, match=r"the beam width cannot be told without the manifest"):
        read_lists(sentences, "nemo")


def _copy(fmt: str, tmp_path: Path) -> Path:
    root = tmp_path / "in"
    shutil.copytree(EXAMPLES / fmt, root / fmt)
    return root


def _edit(path: Path, number: int, change) -> None:
    """Line `number` (from 1) of `path` replaced by change(line) as bytes; None deletes it."""
    lines = path.read_bytes().split(b"\n")
    new = change(lines[number - 1])
    lines[number - 1 : number] = [] if new is None else [new]
    path.write_bytes(b"\n".join(lines))


def _json_line(change):
    def edit(line: bytes) -> bytes:
        record = json.loads(line)
        change(record)
        return json.dumps(record).encode()

    return edit


def _latin1(line: bytes) -> bytes:
    return line.replace(b" ", b" caf\xe9 ", 1)  # one Latin-1 byte among UTF-8 lines


def _replace_field(index: int, value: bytes):
    def edit(line: bytes) -> bytes:
        cells = line.split(b"\t")
        cells[index] = value
        return b"\t".join(cells)

    return edit


def _extra_ref(ref: Path) -> None:
    with ref.open("ab") as handle:
        handle.write(b"wiki-9999 an utterance the lists do not hold\n")


def _extra_manifest(ref: Path) -> None:
    with ref.open("ab") as handle:
        handle.write(json.dumps({"audio_filepath": "audio/wiki-9999.wav", "text": "more"}).encode() + b"\n")


def _malformed(fmt: str, case: str, root: Path) -> tuple[list[str], str]:
    """Arguments of a `rescore` of a broken copy of the example, and the FILE:LINE its one-line error names."""
    dev, _, dev_ref, _, features = LAYOUTS[fmt]
    path = root / dev
    ref = root / dev_ref if dev_ref else None
    if ref is not None and not ref.exists():
        ref.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLES / dev_ref, ref)
    if fmt == "tsv" and case == "no_hyps":  # a TSV row is a hypothesis: a reference without rows is the case
        ref = root / "tsv" / "ref.text"
        ref.write_text("".join(f"{u.id} {u.ref}\n" for u in read_lists(path)[0]))
    if fmt == "whisper" and case == "no_hyps":
        ref = None
    edits = {
        ("espnet", "no_score"): (
            path / "3best_recog" / "score",
            2,
            lambda _: None,
            path / "3best_recog" / "text",
            2,
        ),
        ("espnet", "not_number"): (
            path / "1best_recog" / "score",
            2,
            lambda _: b"wiki-0002 tensor(n/a)",
            None,
            2,
        ),
        ("espnet", "mixed"): (path / "1best_recog" / "text", 3, _latin1, None, 3),
        ("kaldi", "no_score"): (path / "acwt", 5, lambda _: None, path / "words_text", 5),
        ("kaldi", "not_number"): (
            path / "lmwt.withlm",
            3,
            lambda line: line.split()[0] + b" twelve",
            None,
            3,
        ),
        ("kaldi", "mixed"): (path / "words_text", 2, _latin1, None, 2),
        ("nemo", "no_score"): (path, 4, lambda line: line.split(b"\t")[0], None, 4),
        ("nemo", "not_number"): (path, 5, _replace_field(1, b"abc"), None, 5),
        ("nemo", "mixed"): (path, 2, _latin1, None, 2),
        ("whisper", "no_score"): (path, 2, _json_line(lambda r: r["sequences_scores"].pop()), None, 2),
        ("whisper", "not_number"): (
            path,
            1,
            _json_line(lambda r: r["am_score"].__setitem__(0, "x")),
            None,
            1,
        ),
        ("whisper", "mixed"): (path, 2, _latin1, None, 2),
        ("whisper", "no_hyps"): (
            path,
            3,
            _json_line(
                lambda r: [
                    r.__setitem__(k, []) for k in ("sequences", "sequences_scores", "am_score", "lm_score")
                ]
            ),
            None,
            3,
        ),
        ("tsv", "no_score"): (path, 3, _replace_field(2, b""), None, 3),
        ("tsv", "not_number"): (path, 2, _replace_field(4, b"n/a"), None, 2),
        ("tsv", "mixed"): (path, 4, _latin1, None, 4),
    }
    if case == "no_hyps" and fmt != "whisper":
        (_extra_manifest if fmt == "nemo" else _extra_ref)(ref)
        named = f"{ref}:7"
    else:
        file, number, change, where, line = edits[(fmt, case)]
        _edit(file, number, change)
        named = f"{where or file}:{line}"
    argv = ["rescore", "--dev", str(path), "--features", features, "--length", "words"]
    return argv + (["--dev-ref", str(ref)] if ref is not None else []), named


@pytest.mark.parametrize("case", ["no_score", "no_hyps", "not_number", "mixed"])
@pytest.mark.parametrize("fmt", sorted(LAYOUTS))
def test_a_malformed_file_is_one_line_naming_file_and_line_and_nothing_is_written(
    fmt, case, tmp_path, capsys
):
    root = _copy(fmt, tmp_path)
    argv, named = _malformed(fmt, case, root)
    out = tmp_path / "out"
    assert main([*argv, "--output", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and named in err, err
    says = {
        "no_score": (
            "no score",
            "no cost",
            "no tab-separated score",
            "sequences_scores",
            "not a finite number",
        ),
        "no_hyps": ("no hypotheses", "no beams"),
        "not_number": ("not a finite number",),
        "mixed": ("not UTF-8 text",),
    }
    assert any(words in err for words in says[case]), err
    assert not out.exists() and captured.out == ""
    print(f"{fmt} {case}: {err}")


def test_score_writes_a_layouts_list_back_as_json_with_its_fields(tmp_path, capsys):
    from tests.test_pll_cli import _save_mlm

    model = _save_mlm(tmp_path / "mlm", seed=0)
    table = tmp_path / "dev.tsv"
    table.write_text(
        "utt\ttext\tscore\tam_score\tref\nu1\tthe cat sad\t-1.0\t-0.3\tthe cat sat\nu1\tthe cat sat\t-1.2\t-0.2\tthe cat sat\n"
    )
    scored = tmp_path / "dev.scored.json"
    assert main(["score", "--model", str(model), "--input", str(table), "--output", str(scored)]) == 0
    capsys.readouterr()
    utts, fmt = read_nbest(scored)
    assert fmt == "list" and utts[0].ref == "the cat sat"
    assert [h.extra["am_score"] for h in utts[0].hyps] == [-0.3, -0.2] and all(
        h.pll is not None for h in utts[0].hyps
    )
    out = tmp_path / "res"
    argv = [
        "rescore",
        "--scores",
        str(scored),
        "--dev",
        str(table),
        "--features",
        "score,am_score",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert (out / "dev.rescored.tsv").read_text().startswith("utt\ttext\tscore\tref\nu1\t")


def test_an_espnet_logdir_of_several_jobs_reads_as_one_list(tmp_path):
    """asr.sh runs inference in jobs, each writing logdir/output.N/Nbest_recog/: the logdir is the list."""
    logdir = tmp_path / "logdir"
    whole, _ = read_lists(EXAMPLES / "espnet" / "dev")
    for job, part in ((1, whole[:4]), (2, whole[4:])):
        for rank in range(1, 11):
            folder = logdir / f"output.{job}" / f"{rank}best_recog"
            folder.mkdir(parents=True)
            (folder / "text").write_text("".join(f"{u.id} {u.hyps[rank - 1].text}\n" for u in part))
            (folder / "score").write_text("".join(f"{u.id} {u.hyps[rank - 1].score}\n" for u in part))
    merged, layout = read_lists(logdir)
    assert layout == "espnet" and [u.id for u in merged] == [u.id for u in whole]
    assert [[h.score for h in u.hyps] for u in merged] == [[h.score for h in u.hyps] for u in whole]


def test_the_layout_copy_is_never_replaced_unasked(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "dev.rescored.text").write_text("mine\n")
    argv = [
        "rescore",
        "--dev",
        str(EXAMPLES / "kaldi" / "dev"),
        "--dev-ref",
        str(EXAMPLES / "kaldi/data/dev/text"),
    ]
    argv += ["--features", "am_score,lm_score", "--output", str(out)]
    assert main(argv) == 2
    assert "dev.rescored.text already exists" in capsys.readouterr().err
    assert (out / "dev.rescored.text").read_text() == "mine\n" and not (out / "report.json").exists()
    assert main([*argv, "--overwrite"]) == 0
    assert (out / "dev.rescored.text").read_text().startswith("wiki-0000 ")
