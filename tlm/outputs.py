"""What `tlm train` and `tartan` write in their output folder, and the refusal of a resume that finds nothing
there. Light (no torch): the command line makes its checks with it before the models are imported, and
`electra.tlm.train.train_tlm` makes the same check for a caller from Python."""

from __future__ import annotations

from pathlib import Path

from electra.core.errors import UserError

# what `tlm train` and `tartan` write in --out: all of it, so that a user's own config.json, run.json or tokenizer/
# there is never replaced by a run
TLM_OUTPUTS = ("results.json", "model", "stage1", "stage2", "config.json", "tokenizer", "run.json")


def refuse_missing_resume(out: str | Path, resume: bool) -> None:
    """Refuse `resume` where `out` holds no run (no such folder, or none of a run's files), from the command line
    and from `train_tlm`: a mistyped --out would otherwise start a fresh run that looks like a resumed one."""
    out = Path(out)
    if resume and not any((out / name).exists() for name in TLM_OUTPUTS):
        where = "does not exist" if not out.exists() else "holds no run"
        raise UserError(
            f"--resume: {out} {where}, so there is nothing to resume; check --out, or drop --resume to start a "
            "new run."
        )
