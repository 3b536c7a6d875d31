"""`--resume --elastic`: a run continues on another number of processes with its global batch and the order of its
examples; where the batch cannot be shared out so, or where streams would read other data, one line refuses."""

import json
from itertools import islice

import pytest

from electra.core.errors import UserError
from electra.data.packing import ResumableBatchOrder
from electra.objectives import build_config
from electra.training.run_folder import RunInputs, check_resume, record_elastic_resume, resumed_layout


def _updates(examples, micro, accumulation, world, updates, start_update=0):
    """The examples of each update, as the set that all processes' micro-batches of it hold."""
    orders = [ResumableBatchOrder(examples, micro, 7, rank, world, accumulation) for rank in range(world)]
    streams = [order.batches(start_update * accumulation) for order in orders]
    got = []
    for _ in range(updates):
        update = []
        for stream in streams:
            for batch in islice(stream, accumulation):
                update += batch
        got.append(sorted(update))
    return got


@pytest.mark.parametrize("layout", [(4, 1, 4), (4, 2, 2), (4, 4, 1), (2, 8, 1), (8, 1, 2)])
def test_every_layout_of_one_global_batch_reads_the_same_examples_at_every_update(layout):
    """16 examples an update, 101 examples (6 updates an epoch, 5 examples left out of each): over three epochs,
    and from a resume at any update, each layout reads what one process with one micro-batch of 16 reads."""
    reference = _updates(101, 16, 1, 1, 20)
    assert _updates(101, *layout, 20) == reference
    for start in (1, 5, 6, 13):
        assert _updates(101, *layout, 4, start_update=start) == reference[start : start + 4]
    assert all(len(set(update)) == 16 for update in reference)


def _run_folder(tmp_path, world, accumulation=None):
    record = {"world_size": world, "corpus_sample": "x", "tokenizer_sha256": "y", "corpus": "c"}
    if accumulation is not None:
        record["gradient_accumulation_steps"] = accumulation
    (tmp_path / "run.json").write_text(json.dumps(record))
    return tmp_path


def test_the_accumulation_keeps_the_micro_batch_on_the_new_processes(tmp_path):
    config = build_config("tiny", overrides={"train_batch_size": 48, "gradient_accumulation_steps": 2})
    folder = _run_folder(tmp_path, 4)  # micro-batches of 6
    assert resumed_layout(folder, config, 4) == (2, 4)
    assert resumed_layout(folder, config, 2) == (4, 4)
    assert resumed_layout(folder, config, 8) == (1, 4)
    with pytest.raises(
        UserError, match=r"cannot be shared out over 5 processes .* resume on 1, 2, 4, 8 processes"
    ):
        resumed_layout(folder, config, 5)
    with pytest.raises(UserError, match="cannot be shared out over 16 processes"):
        resumed_layout(folder, config, 16)
    record_elastic_resume(folder, 2, 4)  # the record keeps the new layout: a plain resume on 2 continues it
    assert resumed_layout(folder, config, 2) == (4, 2)
    assert resumed_layout(folder, config, 4) == (2, 2)


def test_a_resume_on_other_processes_needs_elastic_and_a_cached_run(tmp_path):
    config = build_config("tiny")
    folder = _run_folder(tmp_path, 2)
    inputs = RunInputs(corpus="c", output_dir=folder, resume=True)
    with pytest.raises(UserError, match="trained with 2 process.*add --elastic"):
        check_resume(folder, inputs, 1, config, 0)
    streaming = build_config("tiny", overrides={"streaming": True})
    with pytest.raises(UserError, match="--elastic: .* streams its examples"):
        check_resume(
            folder, RunInputs(corpus="c", output_dir=folder, resume=True, elastic=True), 1, streaming, 0
        )


def test_elastic_without_resume_is_refused_in_one_line(capsys, tmp_path):
    from electra.app.cli import main

    assert main(["pretrain", "--size", "tiny", "--elastic", "--output", str(tmp_path / "run")]) != 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "electra pretrain: error: --elastic continues a run on other processes: give it with --resume."
    ]
    assert not (tmp_path / "run").exists()
