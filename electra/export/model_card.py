"""Model cards: the README.md a Hugging Face model directory carries, saying how the weights were made and loaded.

Every export gets one at its root and one in each part's directory (the directory a user loads or uploads), with
the facts a reader needs to trust or reproduce a checkpoint: objective, corpus fingerprint, vocabulary, shape, steps,
compute in the paper's FLOP accounting, final metrics, and working code to load it. The fine-tuners write theirs
with the same renderer.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CARD = "README.md"

# How each part kind loads; `{dir}` is the part's directory as the reader would type it.
LOADERS = {
    "ElectraForPreTraining": (
        "from transformers import AutoTokenizer, ElectraForPreTraining, ElectraForSequenceClassification\n\n"
        'tokenizer = AutoTokenizer.from_pretrained("{dir}")\n'
        'discriminator = ElectraForPreTraining.from_pretrained("{dir}")  # replaced-token (or energy) head\n'
        'classifier = ElectraForSequenceClassification.from_pretrained("{dir}", num_labels=2)  # to fine-tune'
    ),
    "ElectraForMaskedLM": (
        "from transformers import pipeline\n\n"
        'fill = pipeline("fill-mask", model="{dir}")\n'
        'print(fill("the capital of france is " + fill.tokenizer.mask_token + "."))'
    ),
    "BertForMaskedLM": (
        "from transformers import pipeline\n\n"
        'fill = pipeline("fill-mask", model="{dir}")\n'
        'print(fill("the capital of france is " + fill.tokenizer.mask_token + "."))'
    ),
    "two-tower": (
        "from electra.generators.two_tower import TwoTowerGenerator  # installed with electra\n\n"
        'cloze = TwoTowerGenerator.from_pretrained("{dir}")  # the cloze model: every position scored in one pass'
    ),
}


@dataclass
class CardFacts:
    """What a card states; every field comes from the run, none is typed by hand."""

    title: str
    summary: str  # one line: what was trained, and how
    facts: list[tuple[str, str]]  # (what, value) rows of the "How it was trained" table
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Sequence[str] = ()
    notes: Sequence[str] = ()  # paragraphs after the tables (custom heads, caveats)


def render_card(facts: CardFacts, loads: Sequence[tuple[str, str]], pipeline_tag: str | None = None) -> str:
    """Markdown with Hugging Face's YAML header; `loads` are (heading, Python code) pairs."""
    header = ["---", "library_name: transformers", "tags:"]
    header += [f"- {tag}" for tag in dict.fromkeys(("electra", *facts.tags))]
    if pipeline_tag:
        header.append(f"pipeline_tag: {pipeline_tag}")
    header.append("---")
    lines = [*header, "", f"# {facts.title}", "", facts.summary, "", "## How it was trained", ""]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {what} | {value} |" for what, value in facts.facts]
    if facts.metrics:
        lines += ["", "## Final metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {_number(value)} |" for name, value in sorted(facts.metrics.items())]
    for heading, code in loads:
        lines += ["", f"## {heading}", "", "```python", code, "```"]
    for note in facts.notes:
        lines += ["", note]
    written = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    lines += ["", f"*Card written by electra on {written}.*", ""]
    return "\n".join(lines)


def write_export_cards(
    root: str | Path, parts: Mapping[str, Path], kinds: Mapping[str, str], facts: CardFacts
) -> list[Path]:
    """One card at the export's root (every part, by relative path) and one in each part's directory."""
    root = Path(root)
    written = []
    root_loads = []
    for name, directory in parts.items():
        kind = kinds.get(name, "")
        code = LOADERS.get(kind)
        if code is None:
            continue
        root_loads.append((f"Load `{name}/` ({kind})", code.format(dir=str(root / directory.name))))
        tag = "fill-mask" if kind.endswith("ForMaskedLM") else None
        card = render_card(facts, [(f"How to load ({kind})", code.format(dir=str(directory)))], tag)
        (directory / CARD).write_text(card, encoding="utf-8")
        written.append(directory / CARD)
    (root / CARD).write_text(render_card(facts, root_loads), encoding="utf-8")
    written.append(root / CARD)
    return written


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.4g}"
