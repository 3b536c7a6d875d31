"""The text-scoring methods, and what each reads (kept free of heavy imports: the CLI lists them)."""

from __future__ import annotations

from dataclasses import dataclass

from electra.core.settings import COUNT, setting

# auto: what the model directory declares (an export's default, else what the directory holds).
METHODS = ("auto", "electric", "electra-tt", "cloze", "mlm")
# What each method reads, in the order an export's manifest lists the parts.
METHOD_PARTS = {
    "electric": ("an Electric discriminator",),
    "electra-tt": ("an ELECTRA-TT discriminator", "a two-tower generator"),
    "cloze": ("a two-tower generator",),
    "mlm": ("a masked LM (an ...ForMaskedLM checkpoint)",),
}
WITHIN_WORD = ("none", "l2r", "whole")


@dataclass
class ScorerChoice:
    """How a scorer is chosen and run, declared once: the flags of every command that scores text
    (`electra.pll.common_cli`), and the names of `electra.load_scorer`'s arguments, which messages use in Python."""

    method: str = setting(
        "auto",
        "auto: the method the run's objective declares (export.json), else what the directory holds; cloze: an "
        "Electric or ELECTRA-TT run's two-tower generator alone",
        choices=METHODS,
        flags=("--method",),
    )
    batch_size: int = setting(
        64,
        "sentences (or masked copies) per forward; cloze scoring ignores it (it packs distinct tower states, "
        "generators/shared_towers.py) and ELECTRA-TT uses it for its discriminator",
        within=COUNT,
        flags=("--batch-size",),
    )
    within_word: str = setting(
        "none",
        "masked-LM PLL: also mask the later (l2r) or all (whole) pieces of the scored word",
        choices=WITHIN_WORD,
        flags=("--within-word",),
    )
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", flags=("--device",))
