"""`--streaming`: examples packed as training reads them, in disjoint slots, resumable at any step without
re-tokenizing what was read before."""

from dataclasses import replace
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from electra.core.errors import UserError
from electra.data.packing import ExampleSettings, PretrainingCollator, pack_documents
from electra.data.streaming import (
    Ledger,
    StreamSpec,
    WindowPacker,
    require_windows,
    slot_examples,
    slot_share,
    stream_loader,
    stream_token_counts,
)
from electra.data.word_pieces import WordPieceEncoder
from electra.export.checkpoint import latest_checkpoint
from electra.objectives import build_config
from electra.training.pretraining import RunInputs, pretrain
from electra.training.run_log import read_metrics
from tests.conftest import SAMPLE_TEXT, killed_after_checkpoint

WINDOW = 3_000  # characters: the fixture corpus makes a dozen windows


@pytest.fixture
def varied_corpus(tmp_path):
    """Documents of the sample text's words in shuffled sentences, so no two examples are alike."""
    import random

    words = SAMPLE_TEXT.replace(".", "").split()
    folder = tmp_path / "varied"
    folder.mkdir()
    for file in range(12):
        rng = random.Random(file)
        documents = [
            " ".join(" ".join(rng.sample(words, 12)).capitalize() + "." for _ in range(12)) for _ in range(4)
        ]
        (folder / f"part{file:02d}.txt").write_text("\n\n".join(documents))
    return folder


@pytest.fixture
def spec(varied_corpus, sample_tokenizer, tmp_path):
    return StreamSpec(
        corpus=str(varied_corpus),
        doc_boundary="blank",
        strict_utf8=False,
        text_field="text",
        tokenizer_json=sample_tokenizer.backend_tokenizer.to_str(),
        cls_id=sample_tokenizer.cls_token_id,
        sep_id=sample_tokenizer.sep_token_id,
        settings=ExampleSettings(max_seq_length=32),
        seed=5,
        window_chars=WINDOW,
        ledger_dir=str(tmp_path / "ledger"),
    )


def _key(example):
    return tuple(example[0]), tuple(example[1])


def _window_examples(spec):
    """What the cached path's rule packs from the same documents, window by window, in corpus order."""
    from tokenizers import Tokenizer

    encoder = WordPieceEncoder(Tokenizer.from_str(spec.tokenizer_json))
    return {
        key: [
            _key(e)
            for e in zip(*pack_documents(first, docs, encoder, spec.settings, spec.cls_id, spec.sep_id))
        ]
        for key, first, docs in spec.windows()
    }


@pytest.mark.parametrize("slots", [3, 20])
def test_the_slots_share_out_the_corpus_examples_without_overlap_and_reshuffle_each_pass(
    spec, slots, tmp_path
):
    """3 slots read the 12 files' pieces, each its own; 20 slots share gzipped files (read whole, so 12 pieces),
    taking turns at their windows."""
    spec = replace(spec, held_out=4)
    if slots > 12:
        import gzip

        folder = tmp_path / "gzipped"
        folder.mkdir()
        for file in sorted(Path(spec.corpus).iterdir()):
            (folder / f"{file.name}.gz").write_bytes(gzip.compress(file.read_bytes()))
        spec = replace(spec, corpus=str(folder), window_chars=1_000)
    spec = spec.planned()
    windows = _window_examples(spec)
    assert len(spec.pieces) == 12 and len(windows) >= (24 if slots > 12 else 12)
    held = windows[(0, 0)][:4]
    windows[(0, 0)] = windows[(0, 0)][4:]
    one_pass = []
    for slot in range(slots):
        pieces, group, turn = slot_share(spec.pieces, slot, slots)
        own = [
            e for (p, w), examples in windows.items() if p in pieces and w % group == turn for e in examples
        ]
        stream = slot_examples(spec, slot, slots)
        first = [_key(e) for e in islice(stream, len(own))]
        second = [_key(e) for e in islice(stream, len(own))]
        assert sorted(first) == sorted(own)  # a pass is the slot's windows, each example once
        assert sorted(second) == sorted(first) and second != first  # the next pass is another order
        assert Ledger(spec.ledger_dir, slot, slots).epoch_examples(pieces, group, turn) == len(own)
        one_pass += first
    assert len(set(one_pass)) == len(one_pass)  # no two examples of this corpus are alike
    assert set(one_pass) == {
        e for examples in windows.values() for e in examples
    }  # each slot its own, none lost
    assert not set(held) & set(one_pass)  # the held-out examples are never trained on


def test_pieces_go_to_the_slot_with_the_fewest_bytes():
    from electra.data.corpus_pieces import Piece

    pieces = tuple(Piece("f", "file", size=size) for size in (5, 1, 4, 2, 3, 3))
    shares = [slot_share(pieces, slot, 2) for slot in range(2)]
    assert [share[0] for share in shares] == [[0, 1, 5], [2, 3, 4]]  # 5+3+1 bytes against 4+3+2
    assert slot_share(pieces[:2], 3, 5) == (
        [1],
        2,
        1,
    )  # slots 1 and 3 share piece 1; slot 3 takes odd windows


@pytest.mark.parametrize("with_ledger", [True, False])
def test_a_slot_restarts_at_any_example_as_if_it_had_run_on(spec, with_ledger):
    spec = replace(spec, held_out=3)
    straight = [_key(e) for e in islice(slot_examples(spec, 1, 2), 2_000)]  # a few passes: writes the ledger
    if not with_ledger:
        spec = replace(spec, ledger_dir=None)
    else:
        assert (
            Ledger(spec.ledger_dir, 1, 2).epoch_examples(slot_share(spec.planned().pieces, 1, 2)[0])
            is not None
        )
    for skip in (0, 1, 57, 400, 1_234):
        restarted = [_key(e) for e in islice(slot_examples(spec, 1, 2, skip=skip), 200)]
        assert restarted == straight[skip : skip + 200], skip


def test_a_ledger_line_cut_by_a_kill_is_ignored(tmp_path):
    ledger = Ledger(str(tmp_path), 0, 2)
    ledger.record(0, 0, 10)
    ledger.record(0, 2, 7)
    with ledger.path.open("a") as out:
        out.write("0 4 1\n0 6 ")  # a kill cut the line of window 6
    again = Ledger(str(tmp_path), 0, 2)
    assert again.counts == {(0, 0): 10, (0, 2): 7, (0, 4): 1} and again.epoch_examples([0], 2, 0) is None
    again.record_end(0, 5)
    assert Ledger(str(tmp_path), 0, 2).epoch_examples([0], 2, 0) == 18  # windows 0, 2 and 4 are this slot's


def test_loader_batches_from_a_start_equal_the_tail_of_a_run_from_zero(spec):
    collate = PretrainingCollator(0)
    straight = list(islice(stream_loader(spec, collate, 4, rank=0, world=1, workers=2, start=0), 24))
    for start in (1, 7, 16):
        resumed = list(islice(stream_loader(spec, collate, 4, rank=0, world=1, workers=2, start=start), 4))
        for a, b in zip(straight[start : start + 4], resumed, strict=True):
            assert all((a[k] == b[k]).all() for k in a), start


def test_fewer_windows_than_streams_is_refused_before_training(spec):
    require_windows(spec, 4)
    with pytest.raises(UserError, match="fewer than the 40 streams"):
        require_windows(spec, 40)


def test_stream_token_counts_count_the_first_windows(spec):
    packer = WindowPacker(spec)
    ids = [i for _, first, docs in islice(spec.windows(), 2) for i in packer.pack(first, docs)[0]]
    expected = np.bincount(np.concatenate([np.asarray(i) for i in ids]), minlength=400)
    assert (stream_token_counts(spec, 400, windows=2) == expected).all()


def _run(corpus, out, overrides, resume=False):
    config = build_config("tiny", overrides={**overrides, "streaming": True})
    inputs = RunInputs(corpus=str(corpus), output_dir=out, cache_dir=str(out.parent / "cache"), resume=resume)
    return pretrain(config, inputs)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_killed_streaming_run_resumes_exactly(
    small_corpus, tmp_path, micro_overrides, monkeypatch, workers
):
    monkeypatch.setenv("ELECTRA_STREAM_WINDOW", str(WINDOW))
    overrides = {**micro_overrides, "log_every": 1, "dataloader_workers": workers}
    _run(small_corpus, tmp_path / "straight", overrides)
    with killed_after_checkpoint(monkeypatch, 3), pytest.raises(KeyboardInterrupt):
        _run(small_corpus, tmp_path / "killed", overrides)
    assert _run(small_corpus, tmp_path / "killed", overrides, resume=True).step == 6

    weights = [
        load_file(str(latest_checkpoint(tmp_path / run / "checkpoints") / "model.safetensors"))
        for run in ("straight", "killed")
    ]
    for name in weights[0]:
        assert (weights[0][name] == weights[1][name]).all(), name
    rows = lambda d: [(r["step"], r["loss"]) for r in read_metrics(d)]  # noqa: E731
    assert rows(tmp_path / "straight") == rows(tmp_path / "killed")
    assert (tmp_path / "killed" / "stream" / f"slot-0-of-{max(1, workers)}.txt").is_file()


def test_a_streaming_resume_refuses_another_stream_layout(
    small_corpus, tmp_path, micro_overrides, monkeypatch
):
    monkeypatch.setenv("ELECTRA_STREAM_WINDOW", str(WINDOW))
    overrides = {**micro_overrides, "dataloader_workers": 0, "max_steps": 2}
    _run(small_corpus, tmp_path / "run", overrides)
    with pytest.raises(UserError, match="streamed its examples as"):
        _run(small_corpus, tmp_path / "run", {**overrides, "dataloader_workers": 2}, resume=True)
    monkeypatch.setenv("ELECTRA_STREAM_WINDOW", str(2 * WINDOW))
    with pytest.raises(UserError, match="ELECTRA_STREAM_WINDOW"):
        _run(small_corpus, tmp_path / "run", overrides, resume=True)
