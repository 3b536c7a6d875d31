"""`checkpoints/latest` that names no complete checkpoint (deleted by hand, a copy of the folder without it, a
file edited or emptied): a resume goes on from the newest intact checkpoint, and says so in one warning line."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

from electra.core.errors import ElectraWarning
from electra.export.checkpoint import LATEST, latest_checkpoint, latest_intact_checkpoint, save_checkpoint


@pytest.fixture
def checkpoints(tmp_path) -> Path:
    """Steps 1, 2 and 3 of a one-layer model, `latest` naming step 3."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    directory = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()
        scheduler.step()
        save_checkpoint(directory, step, model, optimizer, scheduler, {}, keep=3)
    assert (directory / LATEST).read_text().strip() == "step-00000003"
    return directory


def _resume(directory: Path) -> tuple[Path | None, list[str], list[str]]:
    """(the checkpoint a resume takes, its ElectraWarnings, its notices)."""
    notices: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = latest_intact_checkpoint(directory, notices.append)
    return found, [str(w.message) for w in caught if issubclass(w.category, ElectraWarning)], notices


def test_a_pointer_to_an_intact_checkpoint_is_followed_silently(checkpoints):
    assert _resume(checkpoints) == (checkpoints / "step-00000003", [], [])


def test_a_pointer_to_a_deleted_checkpoint_says_what_is_used_instead(checkpoints):
    """Before: the fallback to the newest complete checkpoint was silent."""
    shutil.rmtree(checkpoints / "step-00000003")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElectraWarning)
        assert (
            latest_checkpoint(checkpoints) == checkpoints / "step-00000002"
        )  # deciding, not resuming: silent
    found, said, notices = _resume(checkpoints)
    assert found == checkpoints / "step-00000002" and notices == []
    assert said == [
        f"{checkpoints / LATEST} names step-00000003, which is missing; resuming from step-00000002, the newest "
        "intact checkpoint there."
    ]


def test_a_pointer_to_a_step_never_written_names_it(checkpoints):
    (checkpoints / LATEST).write_text("step-00000009\n")
    found, said, _ = _resume(checkpoints)
    assert found == checkpoints / "step-00000003"
    assert said == [
        f"{checkpoints / LATEST} names step-00000009, which is missing; resuming from step-00000003, the newest "
        "intact checkpoint there."
    ]


def test_the_warning_names_the_checkpoint_finally_used(checkpoints):
    """The pointed-to step is gone and the newest left is damaged: the damage is noticed as before, and the
    warning names the checkpoint the run really resumes from."""
    shutil.rmtree(checkpoints / "step-00000003")
    (checkpoints / "step-00000002" / "model.safetensors").write_bytes(b"damaged")
    found, said, notices = _resume(checkpoints)
    assert found == checkpoints / "step-00000001"
    assert notices[0].startswith(f"checkpoint {checkpoints / 'step-00000002'} is damaged (model.safetensors")
    assert said == [
        f"{checkpoints / LATEST} names step-00000003, which is missing; resuming from step-00000001, the newest "
        "intact checkpoint there."
    ]


@pytest.mark.parametrize(
    ("content", "problem"),
    [("", "is empty"), (b"\xff\xfe\x00", "is unreadable"), ("step-00000002", None)],
)
def test_other_pointers(checkpoints, content, problem):
    """An emptied or undecodable pointer is said the same way; a stale one naming an older, intact checkpoint
    is followed as before."""
    pointer = checkpoints / LATEST
    if isinstance(content, bytes):
        pointer.write_bytes(content)
    else:
        pointer.write_text(content)
    found, said, _ = _resume(checkpoints)
    if problem is None:
        assert found == checkpoints / "step-00000002" and said == []
    else:
        assert found == checkpoints / "step-00000003"
        assert said == [
            f"{pointer} {problem}; resuming from step-00000003, the newest intact checkpoint there."
        ]


def test_a_pointer_to_an_incomplete_checkpoint_says_so(checkpoints):
    (checkpoints / "step-00000003" / "trainer_state.json").unlink()
    found, said, _ = _resume(checkpoints)
    assert found == checkpoints / "step-00000002"
    assert said == [
        f"{checkpoints / LATEST} names step-00000003, which is incomplete (no trainer_state.json); resuming from "
        "step-00000002, the newest intact checkpoint there."
    ]
