"""What a CVT run measures and the options that isolate its parts: the gradient norms of each kind of update on
the shared encoder and the teacher's label shares in every evaluation row, the one-line warning of a tagger that
labels every dev word alike, `--cvt-start` (a run whose unlabeled updates never start is the supervised run) and
`--unlabeled-trains modules` (unlabeled updates leave the shared encoder as it was)."""

from __future__ import annotations

import pytest

from electra.core.files import read_safetensors
from electra.tagging.cvt_data import TaggingData
from electra.tagging.cvt_diagnostics import top_share
from electra.tagging.cvt_settings import CvtSettings
from electra.tagging.cvt_step import SHARED
from electra.tagging.cvt_task import TaggingTask
from electra.tagging.cvt_train import train_one

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = [
    (["the", "cat", "sat"], ["B-NP", "I-NP", "O"]),
    (["a", "big", "dog", "ran", "home"], ["B-NP", "I-NP", "I-NP", "O", "B-NP"]),
    (["cats", "sleep"], ["B-NP", "O"]),
] * 3
UNLABELED = [["the", "big", "cat", "ran"], ["a", "dog", "sat", "home"], ["cats", "sleep"]]
SMALL = dict(
    batch_size=3,
    warmup_steps=2,
    eval_every=2,
    word_dim=6,
    char_dim=4,
    char_filters=3,
    lstm1=6,
    lstm2=6,
    projection=6,
    min_word_count=1,
)


def _data(sentences=SENTENCES) -> TaggingData:
    return TaggingData(list(sentences), list(sentences[:3]), [], [], UNLABELED, TaggingTask(spans=True))


def _weights(folder):
    state = read_safetensors(folder / "checkpoint.safetensors")
    return {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")}


def test_rows_carry_the_gradient_norms_and_the_teachers_label_share():
    settings = CvtSettings(cvt=True, max_steps=4, **SMALL)
    record = train_one(settings, _data(), seed=1, log=lambda line: None)
    for row in record["history"]:
        assert row["grad_labeled"] > 0 and row["grad_unlabeled"] > 0
        assert 0 < row["teacher_top_share"] <= 1 and row["teacher_top"] in (
            "O",
            "B-NP",
            "I-NP",
            "E-NP",
            "S-NP",
        )
        assert 0 < row["dev_top_share"] <= 1


def test_top_share_by_hand():
    assert top_share(["O", "O", "B-PER", "O"]) == ("O", 0.75)
    assert top_share([]) == ("", 0.0)


def test_a_tagger_that_labels_every_dev_word_alike_says_so_in_one_line():
    lines: list[str] = []
    only_o = [(words, ["O"] * len(words)) for words, _ in SENTENCES]
    settings = CvtSettings(max_steps=4, **SMALL)
    train_one(settings, _data(only_o), seed=1, log=lines.append)
    warnings = [line for line in lines if "warning" in line]
    # once when first seen past the warm-up, once more because the run finished that way
    assert len(warnings) == 2 and all("every dev word 'O'" in line and "\n" not in line for line in warnings)
    assert "at labeled update 2" in warnings[0] and "finished" in warnings[1]
    lines.clear()
    learns = CvtSettings(
        max_steps=30, learning_rate=0.2, labeled_dropout=0.0, **(SMALL | dict(eval_every=10))
    )
    record = train_one(learns, _data(), seed=1, log=lines.append)  # real tags: it leaves the one label
    assert record["history"][-1]["dev_top_share"] < 1
    assert not any("finished" in line for line in lines)


def test_unlabeled_updates_that_never_start_leave_the_supervised_run(tmp_path):
    # the unlabeled text has no word the labeled text lacks, so both arms build the same vocabulary
    supervised = train_one(CvtSettings(max_steps=4, save_every=4, **SMALL), _data(), 1, tmp_path / "a", print)
    late = CvtSettings(cvt=True, cvt_start=4, max_steps=4, save_every=4, **SMALL)
    delayed = train_one(late, _data(), 1, tmp_path / "b", print)
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all((a[k] == b[k]).all() for k in a)
    assert supervised["best"]["dev_f1"] == delayed["best"]["dev_f1"]


def test_unlabeled_updates_can_leave_the_shared_encoder_alone(tmp_path):
    # one labeled update, then (or not) one unlabeled one: with `modules` only the auxiliary modules move
    runs = {}
    for name, extra in (
        ("none", dict(cvt_start=1)),
        ("modules", dict(unlabeled_trains="modules")),
        ("all", {}),
    ):
        settings = CvtSettings(cvt=True, max_steps=1, save_every=1, **SMALL, **extra)
        train_one(settings, _data(), 1, tmp_path / name, lambda line: None)
        runs[name] = _weights(tmp_path / name)
    shared = [k for k in runs["none"] if k.split(".")[0] in SHARED]
    auxiliary = [k for k in runs["none"] if k.startswith("auxiliary.")]
    assert shared and auxiliary
    assert all((runs["modules"][k] == runs["none"][k]).all() for k in shared)
    assert any((runs["modules"][k] != runs["none"][k]).any() for k in auxiliary)
    assert any((runs["all"][k] != runs["none"][k]).any() for k in shared)
