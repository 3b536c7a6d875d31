"""The text-scoring methods, and what each reads (kept free of heavy imports: the CLI lists them)."""

from __future__ import annotations

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
