"""Files made from task data for other commands to read: a task's texts as a pretraining corpus
(`electra tlm texts`, for TAPT with `electra pretrain`) and DSP's sciie splits built from SciERC
(`electra tlm sciie`). Each file is written whole (`write_text_atomically`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.tlm.tasks import TaskExample, build_sciie, jsonl_text


def write_task_texts(examples: Sequence[TaskExample], source: str | Path, out: Path) -> int:
    """The examples' non-blank texts in `out`, one document per example; returns how many. A task with no text in
    its chosen columns is refused in one line (`source`: the task file)."""
    texts = [e.text for e in examples if e.text.strip()]
    if not texts:
        raise UserError(f"{source}: no text in the chosen column(s); pass --text-column NAME.")
    # one document per example, written whole: a cut-short corpus would pass for the task's texts
    write_text_atomically(out, "".join(text + "\n\n" for text in texts))
    return len(texts)


def write_sciie_splits(
    source: Path, out: Path, splits: Sequence[str], report: Callable[[str], None] = print
) -> None:
    """`out`/SPLIT.jsonl (text and label) for each of `splits`, built from `source`/SPLIT.json: all are read before
    any is written, so a bad file leaves no split behind; `report` gets one line per split written."""
    built = {split: build_sciie(source / f"{split}.json") for split in splits}
    for split, examples in built.items():
        write_text_atomically(out / f"{split}.jsonl", jsonl_text(examples))
        report(f"{split}: {len(examples)} relations -> {out / f'{split}.jsonl'}")
