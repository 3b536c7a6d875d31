"""`electra score`, `electra rescore` and `electra nbest` end to end, through the real CLI entry point."""

from __future__ import annotations

import io
import json
import math
import sys

import pytest
import torch
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraTokenizerFast

import electra.pll.scoring
from electra.app.cli import main
from electra.pll.nbest import read_nbest

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "sad",
    "on",
    "mat",
    "a",
    "dog",
    "ran",
    "rang",
]


@pytest.fixture
def mlm_dir(tmp_path):
    return _save_mlm(tmp_path / "mlm", seed=0)


def _save_mlm(out, seed: int):
    """A one-layer masked LM over VOCAB; another seed is another model (different weights, different PLLs)."""
    torch.manual_seed(seed)
    model = ElectraForMaskedLM(
        ElectraConfig(
            vocab_size=len(VOCAB),
            embedding_size=16,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
        )
    )
    model.save_pretrained(out)
    ElectraTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(out)
    return out


def test_score_prints_sentence_and_token_plls(mlm_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n\na dog ran on the mat\n")
    out = tmp_path / "scores.jsonl"
    assert (
        main(["score", "--model", str(mlm_dir), "--input", str(text), "--tokens", "--output", str(out)]) == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2  # the blank line is skipped
    pll, sentence, tokens = lines[0].split("\t")
    assert sentence == "the cat sat" and [t.split("=")[0] for t in tokens.split()] == ["the", "cat", "sat"]
    assert float(pll) == pytest.approx(sum(float(t.split("=")[1]) for t in tokens.split()), abs=2e-3)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[1]["text"] == "a dog ran on the mat" and len(records[1]["tokens"]) == 6
    assert float(lines[1].split("\t")[0]) == pytest.approx(records[1]["pll"], abs=1e-4)


def test_rescore_tunes_lambda_and_writes_lists(mlm_dir, tmp_path, monkeypatch, capsys):
    nbest = [
        {
            "id": "u1",
            "ref": "the cat sat",
            "hyps": [{"text": "the cat sad", "score": -1.0}, {"text": "the cat sat", "score": -1.2}],
        },
        {
            "id": "u2",
            "ref": "a dog ran",
            "hyps": [{"text": "a dog ran", "score": -2.0}, {"text": "a dog rang", "score": -2.1}],
        },
    ]
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(nbest))
    test = tmp_path / "test.json"
    mlm_scoring = {
        "x1": {
            "hyp_1": {"score": -1.0, "text": "the dog sat"},
            "hyp_2": {"score": -1.1, "text": "a dog sat"},
            "ref": "a dog sat",
        }
    }
    test.write_text(json.dumps(mlm_scoring))
    out = tmp_path / "res"
    hashed = []
    feed_file = electra.pll.scoring.feed_file
    monkeypatch.setattr(
        electra.pll.scoring, "feed_file", lambda digest, path: hashed.append(path) or feed_file(digest, path)
    )
    code = main(
        ["rescore", "--model", str(mlm_dir), "--dev", str(dev), "--test", str(test), "--output-dir", str(out)]
    )
    assert code == 0
    assert len(hashed) == len(set(hashed)) == 1  # the weights are hashed once for the scorer's identity
    printed = capsys.readouterr().out
    assert "dev" in printed and "test" in printed and "oracle" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["features"] == ["score", "pll"] and report["lambda"] == report["weights"]["pll"]
    dev_split = report["splits"][0]
    assert dev_split["wer_first_best"] == pytest.approx(1 / 6) and dev_split["wer_oracle"] == 0.0
    assert dev_split["wer_rescored"] <= dev_split["wer_first_best"]  # λ is tuned on dev, the 1-best is λ → 0
    written, _ = read_nbest(out / "test.rescored.json")
    assert written[0].id == "x1" and written[0].hyps[0].pll is not None
    # The classic recipe on request: score + λ·PLL over a given grid, every λ's dev WER reported.
    grid = ",".join(f"{0.05 * i:.2f}" for i in range(1, 21))
    classic = tmp_path / "classic"
    argv = [
        "rescore",
        "--model",
        str(mlm_dir),
        "--dev",
        str(dev),
        "--lambdas",
        grid,
        "--output",
        str(classic),
    ]
    assert main(argv) == 0
    report = json.loads((classic / "report.json").read_text())
    assert len(report["search"]["dev_wer_by_lambda"]) == 20
    assert report["lambda"] in [round(0.05 * i, 2) for i in range(1, 21)]
    assert report["splits"][0]["wer_rescored"] == min(report["search"]["dev_wer_by_lambda"].values())


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))


def test_stdin_scores_equal_file_scores_and_the_summary_is_the_corpus_pppl(
    mlm_dir, tmp_path, monkeypatch, capsys
):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\na dog ran on the mat\n")
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--model", str(mlm_dir), "--input", str(text), "--output", str(out)]) == 0
    from_file = capsys.readouterr()
    _stdin(monkeypatch, text.read_text())
    assert main(["score", "--model", str(mlm_dir), "--input", "-"]) == 0
    from_stdin = capsys.readouterr()
    assert from_stdin.out == from_file.out
    records = [json.loads(line) for line in out.read_text().splitlines()]
    total, pieces = sum(r["pll"] for r in records), sum(r["pieces"] for r in records)
    assert pieces == 3 + 6  # every word of this vocabulary is one piece
    summary = from_file.err.strip().splitlines()[-1]
    assert summary.startswith("2 sentences, 9 pieces, 9 words")
    pppl = float(summary.split("pseudo-perplexity ")[1].split()[0])
    assert pppl == pytest.approx(math.exp(-total / pieces), rel=1e-3)
    assert "scoring with --method mlm" in from_file.err  # what auto picked is said


@pytest.mark.parametrize("fmt", ["list", "mlm-scoring"])
def test_score_reads_an_nbest_json_and_rescore_reuses_its_scores(mlm_dir, tmp_path, monkeypatch, capsys, fmt):
    hyps = [
        {"text": "the cat sad", "score": -1.0, "am_score": -0.3},
        {"text": "the cat sat", "score": -1.2, "am_score": -0.2},
    ]
    if fmt == "list":
        data = [{"id": "u1", "ref": "the cat sat", "hyps": hyps}]
    else:
        data = {"u1": {"hyp_1": hyps[0], "hyp_2": hyps[1], "ref": "the cat sat"}}
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(data))
    # Sentence scoring of the same texts is the reference for what the n-best scoring writes back.
    sentences = tmp_path / "s.txt"
    sentences.write_text("the cat sad\nthe cat sat\n")
    main(["score", "--model", str(mlm_dir), "--input", str(sentences)])
    expected = [float(line.split("\t")[0]) for line in capsys.readouterr().out.splitlines()]

    _stdin(monkeypatch, dev.read_text())  # n-best JSON on standard input, scored list on standard output
    assert main(["score", "--model", str(mlm_dir), "--input", "-"]) == 0
    scored_utts, got_fmt = read_nbest("out", capsys.readouterr().out)
    assert got_fmt == fmt and [h.text for h in scored_utts[0].hyps] == ["the cat sad", "the cat sat"]
    assert [h.pll for h in scored_utts[0].hyps] == pytest.approx(expected, abs=1e-3)
    assert [h.extra["am_score"] for h in scored_utts[0].hyps] == [-0.3, -0.2]

    scored = tmp_path / "dev.scored.json"
    assert main(["score", "--model", str(mlm_dir), "--input", str(dev), "--output", str(scored)]) == 0
    capsys.readouterr()
    with_model = tmp_path / "with_model"
    assert main(["rescore", "--model", str(mlm_dir), "--dev", str(dev), "--output", str(with_model)]) == 0
    capsys.readouterr()
    reused = tmp_path / "reused"
    assert main(["rescore", "--scores", str(scored), "--dev", str(dev), "--output", str(reused)]) == 0
    streams = capsys.readouterr()
    assert "scoring with" not in streams.err  # no model was loaded
    a = json.loads((with_model / "report.json").read_text())
    b = json.loads((reused / "report.json").read_text())
    assert b["method"] == "saved scores" and b["models"] == []
    assert a["weights"] == b["weights"] and a["splits"][0]["wer"] == b["splits"][0]["wer"]
    written, _ = read_nbest(reused / "dev.rescored.json")
    assert {h.text: h.extra["am_score"] for h in written[0].hyps} == {
        "the cat sad": -0.3,
        "the cat sat": -0.2,
    }
    assert main(["rescore", "--dev", str(dev), "--output", str(tmp_path / "x")]) == 2
    assert "nothing to fuse" in capsys.readouterr().err


def test_bad_input_is_a_one_line_error(mlm_dir, tmp_path, capsys):
    bad = tmp_path / "dev.json"
    bad.write_text('[{"id": "u9", "ref": "a", "hyps": []}]')
    assert main(["rescore", "--model", str(mlm_dir), "--dev", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "u9: empty hypothesis list" in err and str(bad) in err
    assert main(["score", "--model", str(mlm_dir), "--input", str(tmp_path / "none.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    text = tmp_path / "s.txt"
    text.write_text("the cat\n")
    assert main(["score", "--model", str(mlm_dir), "--input", str(text), "--method", "electric"]) == 2
    assert "--method electric: it needs an Electric discriminator" in capsys.readouterr().err
    truncated = tmp_path / "cut.json"  # an n-best list cut short: refused, not scored as a sentence of JSON
    truncated.write_text('{"u1": {"hyp_1": {"score": -1.0, "text": "a b"}, "ref": "a b"')
    assert main(["score", "--model", str(mlm_dir), "--input", str(truncated)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"{truncated}: not valid JSON" in captured.err


def test_nbest_without_pocketsphinx_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)  # makes `import pocketsphinx` fail
    (tmp_path / "a.wav").write_bytes(b"")
    assert main(["nbest", "--audio", str(tmp_path), "--output", str(tmp_path / "o.json")]) == 2
    assert "pip install 'electra[asr]'" in capsys.readouterr().err


def test_nbest_decodes_a_real_clip(shared_data, tmp_path, capsys):
    pytest.importorskip("pocketsphinx")
    clip = "sense_and_sensibility_01_austen_64kb-0880"
    audio = tmp_path / "audio"
    audio.mkdir()
    (audio / f"{clip}.wav").symlink_to(shared_data / "asr_pocketsphinx_librivox" / f"{clip}.wav")
    refs = shared_data / "asr_pocketsphinx_librivox" / "transcription"
    out = tmp_path / "nbest.json"
    assert (
        main(["nbest", "--audio", str(audio), "--output", str(out), "--nbest", "5", "--refs", str(refs)]) == 0
    )
    data = json.loads(out.read_text())
    assert data[0]["id"] == clip and data[0]["ref"] == "he was not an ill disposed young man"
    hyps = data[0]["hyps"]
    assert 1 < len(hyps) <= 5 and len({h["text"] for h in hyps}) == len(hyps)
    assert [h["score"] for h in hyps] == sorted((h["score"] for h in hyps), reverse=True)
    assert "he was not" in hyps[0]["text"]
    assert "WER" in capsys.readouterr().out


def _write_list(path, utts) -> None:
    """An n-best list (list format) of (id, ref, [(text, score), ...])."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = [
        {"id": u, "ref": ref, "hyps": [{"text": t, "score": s} for t, s in hyps]} for u, ref, hyps in utts
    ]
    path.write_text(json.dumps(data))


DEV = [
    ("d1", "the cat sat", [("the cat sad", -1.0), ("the cat sat", -1.2)]),
    ("d2", "a dog ran", [("a dog ran", -2.0), ("a dog rang", -2.1)]),
]
TEST = [("t1", "a dog sat", [("the dog sat", -1.0), ("a dog sat", -1.1)])]


def test_rescore_keeps_both_lists_when_dev_and_test_share_a_file_name(tmp_path, capsys):
    """da/nbest.json and db/nbest.json used to be written to one OUT/nbest.rescored.json, dev's lost."""
    dev, test = tmp_path / "da" / "nbest.json", tmp_path / "db" / "nbest.json"
    _write_list(dev, DEV)
    _write_list(test, TEST)
    out = tmp_path / "rs"
    argv = ["rescore", "--features", "score", "--length", "words", "--dev", str(dev), "--test", str(test)]
    assert main([*argv, "--output", str(out)]) == 0  # fuses the lists' own fields: no model needed
    assert sorted(p.name for p in out.iterdir()) == [
        "dev.nbest.rescored.json",
        "report.json",
        "test.nbest.rescored.json",
    ]
    assert {u.id for u in read_nbest(out / "dev.nbest.rescored.json")[0]} == {"d1", "d2"}
    assert [u.id for u in read_nbest(out / "test.nbest.rescored.json")[0]] == ["t1"]
    report = json.loads((out / "report.json").read_text())
    assert [s["output"] for s in report["splits"]] == [
        str(out / "dev.nbest.rescored.json"),
        str(out / "test.nbest.rescored.json"),
    ]
    assert f"dev: {dev} -> {out / 'dev.nbest.rescored.json'}" in capsys.readouterr().out
    # The same file as dev and test, and two --test files of one name: every list gets its own output.
    other = tmp_path / "dc" / "nbest.json"
    _write_list(other, TEST)
    twice = tmp_path / "twice"
    assert main([*argv, str(other), "--output", str(twice)]) == 0
    assert sorted(p.name for p in twice.iterdir()) == [
        "dev.nbest.rescored.json",
        "report.json",
        "test1.nbest.rescored.json",
        "test2.nbest.rescored.json",
    ]
    # Distinct names keep the documented NAME.rescored.json.
    _write_list(tmp_path / "dev.json", DEV)
    plain = tmp_path / "plain"
    argv = ["rescore", "--features", "score", "--length", "words", "--dev", str(tmp_path / "dev.json")]
    assert main([*argv, "--test", str(test), "--output", str(plain)]) == 0
    assert sorted(p.name for p in plain.iterdir()) == [
        "dev.rescored.json",
        "nbest.rescored.json",
        "report.json",
    ]


def test_rescore_without_output_writes_to_rescored_and_its_help_says_so(tmp_path, monkeypatch, capsys):
    _write_list(tmp_path / "dev.json", DEV)
    monkeypatch.chdir(tmp_path)
    assert main(["rescore", "--features", "score", "--length", "words", "--dev", "dev.json"]) == 0
    assert (tmp_path / "rescored" / "report.json").is_file()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["rescore", "--help"])
    assert "rescored/ in the current directory" in " ".join(capsys.readouterr().out.split())


def test_rescore_refuses_saved_plls_of_another_model_before_scoring(mlm_dir, tmp_path, capsys):
    """dev's PLLs saved from one model, test's scored now by --model: the weight tuned on the one was applied to the
    other. Every saved PLL now names its scorer, and one that is not --model's is refused before any scoring."""
    other = _save_mlm(tmp_path / "other", seed=1)
    dev, test = tmp_path / "dev.json", tmp_path / "test.json"
    _write_list(dev, DEV)
    _write_list(test, TEST)
    scored = tmp_path / "dev.scored.json"
    assert main(["score", "--model", str(other), "--input", str(dev), "--output", str(scored)]) == 0
    lines = tmp_path / "test.scores.jsonl"
    (tmp_path / "test.txt").write_text("the dog sat\na dog sat\n")
    assert (
        main(
            ["score", "--model", str(mlm_dir), "--input", str(tmp_path / "test.txt"), "--output", str(lines)]
        )
        == 0
    )
    capsys.readouterr()
    by_other = {h["pll_scorer"] for u in json.loads(scored.read_text()) for h in u["hyps"]}
    by_mlm = {json.loads(line)["pll_scorer"] for line in lines.read_text().splitlines()}
    assert len(by_other) == len(by_mlm) == 1 and by_other != by_mlm
    assert by_mlm.pop().startswith("mlm:sha256=")

    base = ["rescore", "--dev", str(dev), "--test", str(test), "--scores"]
    assert (
        main(
            [
                "rescore",
                "--model",
                str(mlm_dir),
                "--scores",
                str(scored),
                "--dev",
                str(dev),
                "--test",
                str(test),
                "--output",
                str(tmp_path / "mixed"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--scores {scored} were scored by mlm:sha256=" in err
    assert "scoring with" not in err and not (tmp_path / "mixed").exists()  # refused before loading a model
    # Two --scores files from two models are refused even though they share no text (dev vs test).
    assert main([*base, str(scored), str(lines), "--output", str(tmp_path / "two")]) == 2
    assert "PLLs of two models (or methods) cannot share one weight" in capsys.readouterr().err
    # A saved file without the record (an older `electra score`) cannot be mixed with --model's fresh PLLs.
    legacy = tmp_path / "legacy.json"
    data = json.loads(scored.read_text())
    for utt in data:
        for hyp in utt["hyps"]:
            del hyp["pll_scorer"]
    legacy.write_text(json.dumps(data))
    argv = ["rescore", "--model", str(other), "--scores", str(legacy), "--dev", str(dev), "--test", str(test)]
    assert main([*argv, "--output", str(tmp_path / "legacy")]) == 2
    assert "do not say which model scored them" in capsys.readouterr().err

    # The same weights elsewhere (a copied run) are the same scorer: saved dev PLLs + test scored now are fused.
    import shutil

    copy = tmp_path / "copied"
    shutil.copytree(other, copy)
    out = tmp_path / "ok"
    argv = ["rescore", "--model", str(copy), "--scores", str(scored), "--dev", str(dev), "--test", str(test)]
    assert main([*argv, "--output", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["method"] == "mlm + saved scores" and report["scorer"] == by_other.pop()
    written, _ = read_nbest(out / "test.rescored.json")
    assert {h.scorer for h in written[0].hyps} == {report["scorer"]}  # the lists say whose PLLs they hold
    # --within-word is another method on the same weights: its PLLs are not mixed with plain masked-LM ones.
    assert main([*argv, "--within-word", "whole", "--output", str(tmp_path / "ww")]) == 2
    assert "scores as mlm+whole:sha256=" in capsys.readouterr().err


def test_score_refuses_a_directory_output_and_a_zero_batch_up_front(mlm_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    _write_list(tmp_path / "dev.json", DEV)
    for source in (text, tmp_path / "dev.json"):
        for extra in (["--overwrite"], []):
            argv = ["score", "--model", str(mlm_dir), "--input", str(source), "--output", str(folder), *extra]
            assert main(argv) == 2  # used to end in IsADirectoryError after all the scoring
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"--output {folder} is a directory" in err
            assert "scoring with" not in err  # refused before the model was loaded
    assert list(folder.iterdir()) == []


def test_a_batch_size_below_one_is_refused(mlm_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    _write_list(tmp_path / "dev.json", DEV)
    for command in (["score", "--input", str(text)], ["rescore", "--dev", str(tmp_path / "dev.json")]):
        for size in ("0", "-3"):
            assert main([*command, "--model", str(mlm_dir), "--batch-size", size]) == 2
            assert (
                capsys.readouterr().err == f"electra {command[0]}: error: --batch-size must be at least 1.\n"
            )


def test_nbest_refuses_to_replace_an_existing_list(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)  # refused before pocketsphinx is needed
    (tmp_path / "a.wav").write_bytes(b"")
    mine = tmp_path / "o.json"
    mine.write_text("mine")
    assert main(["nbest", "--audio", str(tmp_path), "--output", str(mine)]) == 2
    assert f"{mine} already exists; pass --overwrite" in capsys.readouterr().err
    assert mine.read_text() == "mine"
    assert main(["nbest", "--audio", str(tmp_path), "--output", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
