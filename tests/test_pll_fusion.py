"""Score fusion for n-best rescoring: weights found on dev whatever each feature's scale, the first pass recovered
when a feature gets weight 0, and the command on lists that carry a recognizer's own fields."""

from __future__ import annotations

import json

import numpy as np
import pytest

from electra.app.cli import main
from electra.pll.fusion import FeatureMatrix, fuse, fused_choices, split_table
from electra.pll.nbest import Hypothesis, Utterance, read_nbest
from electra.pll.rescore import EditTable, first_best

PLANTED = {"score": 1.0, "am": 0.5e-3, "tiny": 80.0}  # raw weights; in spread units: 1, 0.5, 0.8
SCALES = {"score": 1.0, "am": 1e3, "tiny": 1e-2}


def _lists(n_utts: int, seed: int, n_hyps: int = 12) -> list[Utterance]:
    """Each list's reference is its best hypothesis under the planted weights; every other hypothesis is the
    reference with 1-3 words changed, so the planted fusion has WER 0 and any other ranking pays."""
    rng = np.random.default_rng(seed)
    utts = []
    for u in range(n_utts):
        feats = {name: rng.normal(size=n_hyps) * scale for name, scale in SCALES.items()}
        combined = sum(PLANTED[n] * feats[n] for n in PLANTED)
        best = int(combined.argmax())
        ref = [f"w{u}_{k}" for k in range(10)]
        hyps = []
        for j in range(n_hyps):
            words = list(ref)
            if j != best:
                for k in rng.choice(10, size=rng.integers(1, 4), replace=False):
                    words[k] = f"x{j}_{k}"
            extra = {"am": float(feats["am"][j]), "tiny": float(feats["tiny"][j])}
            hyps.append(Hypothesis(" ".join(words), float(feats["score"][j]), extra=extra))
        utts.append(Utterance(f"u{u}", " ".join(ref), hyps))
    return utts


def test_the_search_recovers_planted_weights_across_scales_1_1e3_and_1e_2():
    dev, test = _lists(200, seed=0), _lists(200, seed=1)
    result = fuse(dev, ["score", "am", "tiny"])
    assert result.spreads["am"] == pytest.approx(1e3, rel=0.1) and result.spreads["tiny"] == pytest.approx(
        1e-2, rel=0.1
    )
    for name in ("am", "tiny"):  # the direction of the planted weight vector, within 25%
        assert result.weights[name] == pytest.approx(PLANTED[name], rel=0.25), result.weights
    table = split_table(test, result.weights)
    assert table["fused"] < 0.02 and table["oracle"] == 0.0
    assert min(table["first_pass"], table["am_alone"], table["tiny_alone"]) > 0.05
    assert result.dev_wer <= 0.005  # the planted weights reach 0: a grid gets close, not exact
    assert EditTable.of(dev).wer(fused_choices(dev, PLANTED)) == 0.0


def test_a_zero_weight_pll_reproduces_the_first_pass():
    utts = _lists(50, seed=2)
    for utt in utts:
        for hyp in utt.hyps:
            hyp.pll = float(np.sin(len(hyp.text) + hyp.score))  # any values: weight 0 must ignore them
    choices = fused_choices(utts, {"score": 1.0, "pll": 0.0})
    assert [utts[i].hyps[c].text for i, c in enumerate(choices)] == [first_best(u) for u in utts]
    assert (
        split_table(utts, {"score": 1.0, "pll": 0.0})["fused"]
        == split_table(utts, {"score": 1.0})["first_pass"]
    )


def test_padding_never_wins_and_ties_go_to_the_earlier_hypothesis():
    utts = [
        Utterance("a", "x", [Hypothesis("x", -5.0), Hypothesis("y", -5.0)]),
        Utterance("b", "y", [Hypothesis("x", -9.0), Hypothesis("y", -1.0), Hypothesis("z", -1.0)]),
    ]
    matrix = FeatureMatrix.of(utts, ["score"])
    assert matrix.choices(np.array([1.0])).tolist() == [0, 1]


def test_rescore_fuses_the_lists_own_fields_without_a_model(tmp_path, capsys):
    def as_list(utts):
        return [
            {
                "id": u.id,
                "ref": u.ref,
                "speaker": "s1",
                "hyps": [{"text": h.text, "score": h.score, **h.extra} for h in u.hyps],
            }
            for u in utts
        ]

    dev, test = tmp_path / "dev.json", tmp_path / "test.json"
    dev.write_text(json.dumps(as_list(_lists(120, seed=3))))
    test.write_text(json.dumps(as_list(_lists(60, seed=4))))
    out = tmp_path / "out"
    argv = [
        "rescore",
        "--dev",
        str(dev),
        "--test",
        str(test),
        "--features",
        "score,am,tiny",
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "first_pass" in printed and "am_alone" in printed and "oracle" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["features"] == ["score", "am", "tiny"] and report["method"] is None
    test_wer = report["splits"][1]["wer"]
    assert test_wer["fused"] < test_wer["first_pass"] and test_wer["fused"] < test_wer["am_alone"]
    assert report["search"]["settings_evaluated"] > 30 and report["search"]["ties"] >= 1
    raw = json.loads((out / "test.rescored.json").read_text())
    assert raw[0]["speaker"] == "s1" and "am" in raw[0]["hyps"][0] and "combined" in raw[0]["hyps"][0]
    assert raw[0]["hyps"][0]["combined"] >= raw[0]["hyps"][-1]["combined"]  # best first
    written, _ = read_nbest(out / "test.rescored.json")  # and the written list reads back
    assert written[0].hyps[0].extra["am"] == raw[0]["hyps"][0]["am"]
    assert main(["rescore", "--dev", str(dev), "--output", str(tmp_path / "x")]) == 2
    assert "nothing to fuse" in capsys.readouterr().err


def test_fusion_on_real_pocketsphinx_lists_beats_the_first_pass_on_dev(shared_data, tmp_path):
    """asr_tts_wiki (pocketsphinx 50-best lists of Wikipedia sentences): the recognizer's own acoustic and LM scores
    and a word count, fused with weights searched on dev, never lose to the first pass on dev (it is among the
    settings tried), and the test WER is what README reports.

    The figures are pinned (measured 2026-11-28 on a 2-core AMD EPYC host, torch 2.13; no model runs, so they are the
    same on every host): word errors over word counts, exact up to float rounding. A search that never left the
    first pass (dev 32.10%) or lost a feature lands elsewhere."""
    dev, _ = read_nbest(shared_data / "asr_tts_wiki" / "dev.json")
    test, _ = read_nbest(shared_data / "asr_tts_wiki" / "test.json")
    result = fuse(dev, ["score", "am_score", "lm_score", "words"])
    dev_table, test_table = split_table(dev, result.weights), split_table(test, result.weights)
    assert dev_table["fused"] == pytest.approx(result.dev_wer)
    assert dev_table["first_pass"] == pytest.approx(0.32103658536585367, abs=1e-9)
    assert dev_table["fused"] == pytest.approx(0.2942073170731707, abs=1e-9)
    assert dev_table["oracle"] == pytest.approx(0.23353658536585367, abs=1e-9)
    assert test_table["first_pass"] == pytest.approx(0.30503899220155967, abs=1e-9)
    assert test_table["fused"] == pytest.approx(0.28854229154169164, abs=1e-9)


@pytest.mark.slow
def test_a_briefly_trained_scorer_fused_on_real_lists(shared_data, tmp_path, capsys):
    """End to end as README shows it: pretrain a tiny Electric model briefly, score a slice of asr_tts_wiki with it
    (n-best JSON in, scored n-best out), and rescore with the PLL fused into the list's score. The fusion is tuned
    on that dev slice, so it is never worse there than the first pass; the test slice's figures are reported."""
    dev = json.loads((shared_data / "asr_tts_wiki" / "dev.json").read_text())[:30]
    test = json.loads((shared_data / "asr_tts_wiki" / "test.json").read_text())[:30]
    lists = {}
    for name, data in (("dev", dev), ("test", test)):
        lists[name] = tmp_path / f"{name}.json"
        lists[name].write_text(json.dumps(data))
    run = tmp_path / "run"
    corpus = shared_data / "corpus" / "wikitext-2-raw" / "valid.txt"
    settings = ["--set=max_steps=40", "--set=warmup_steps=5", "--set=max_seq_length=64", "--set=eval_every=0"]
    pretrain = [
        "pretrain",
        "--size",
        "tiny",
        "--objective",
        "electric",
        "--corpus",
        str(corpus),
        "--output",
        str(run),
    ]
    assert main([*pretrain, *settings, "--no-plot", "--no-progress", "--cache-dir", str(tmp_path / "c")]) == 0
    for name in ("dev", "test"):
        argv = [
            "score",
            "--model",
            str(run),
            "--input",
            str(lists[name]),
            "--output",
            str(tmp_path / f"{name}.pll.json"),
        ]
        assert main(argv) == 0
    out = tmp_path / "res"
    argv = ["rescore", "--scores", str(tmp_path / "dev.pll.json"), str(tmp_path / "test.pll.json")]
    argv += ["--dev", str(lists["dev"]), "--test", str(lists["test"]), "--output", str(out)]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    dev_wer, test_wer = report["splits"][0]["wer"], report["splits"][1]["wer"]
    assert report["method"] == "saved scores" and report["features"] == ["score", "pll"]
    # The dev WER of the weights reported, recomputed here from the scored list (combined = sum of weight x value,
    # the first best on ties), and no worse than the classic score + lambda * PLL at three lambdas of its grid: a
    # fusion that reported one setting and ranked by another, flipped a sign or lost the PLL shows.
    weights = report["weights"]
    assert set(weights) == {"score", "pll"}
    scored, _ = read_nbest(tmp_path / "dev.pll.json")
    table = EditTable.of(scored)

    def wer_of(w: dict[str, float]) -> float:
        choices = []
        for utt in scored:
            combined = [w["score"] * h.score + w["pll"] * h.pll for h in utt.hyps]
            choices.append(combined.index(max(combined)))
        return table.wer(choices)

    assert dev_wer["fused"] == pytest.approx(wer_of(weights), abs=1e-12)
    assert dev_wer["first_pass"] == pytest.approx(wer_of({"score": 1.0, "pll": 0.0}), abs=1e-12)
    assert dev_wer["fused"] <= min(wer_of({"score": 1.0, "pll": lam}) for lam in (0.25, 0.5, 1.0)) + 1e-12
    assert {"first_pass", "pll_alone", "fused", "oracle"} <= set(test_wer)
    print(f"30-utterance slices, 40-step tiny Electric: dev {dev_wer}, test {test_wer}")
