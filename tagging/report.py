"""What a finished `electra tag` run reports: the summary table (median, spread and each seed's score per eval set,
as text or Markdown) and the kept model's card."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from electra.core.files import read_json_record
from electra.export.model_card import CARD, CardFacts, render_card
from electra.tagging.data import TagData


def _pct(value: float) -> str:
    return "nan" if value is None or math.isnan(value) else f"{100 * value:.2f}"


def format_summary(results: dict[str, Any], markdown: bool = False) -> str:
    """The primary metric (and precision, recall or accuracy) per eval set: median, spread and seeds."""
    shown = ["f1", "precision", "recall", "accuracy"] if results["metric"] == "f1" else ["accuracy"]
    rows = [["set", "metric", "median", "spread", "seeds"]]
    for name, metrics in results["summary"].items():
        for metric in shown:
            entry = metrics[metric]
            seeds = " ".join(_pct(v) for v in entry["seeds"])
            rows.append([name, metric, _pct(entry["median"]), _pct(entry["spread"]), seeds])
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        lines.insert(1, "|" + "---|" * len(rows[0]))
        s = results["settings"]
        lines += [
            "",
            f"Model `{results['model']}` (lr {s['learning_rate']:g}, layer decay {s['layer_decay']:g}, batch "
            f"{s['batch_size']}), {results['train_sentences']:,} training sentences, seeds {results['seeds']} "
            f"(best: {results['best_seed']}). Scores x100; spread is max - min over seeds.",
        ]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_card(model_dir: Path, results: dict[str, Any], data: TagData) -> None:
    """The saved model's README.md: what it was fine-tuned from and on, its dev scores, and how to load it."""
    best = next(run for run in results["runs"] if run["seed"] == results["best_seed"])
    s = results["settings"]
    layout = f"columns `{s['columns'] or 'word ... label'}`, label `{s['label'] or 'last column'}`"
    rows = [
        ("base model", f"`{results['model']}`"),
        (
            "data",
            f"`{Path(results['files']['train']).name}`: {results['train_sentences']:,} sentences; {layout}",
        ),
        ("labels", ", ".join(f"`{label}`" for label in data.labels)),
        (
            "steps",
            f"{best['steps']:,}, batch {s['batch_size']}, learning rate {s['learning_rate']:g}, layer-wise decay "
            f"{s['layer_decay']:g}, max length {s['max_seq_length']}, seed {best['seed']}",
        ),
        ("evaluated on", f"`{Path(results['files']['dev']).name}`"),
    ]
    metrics = {f"dev {k}": v for k, v in best["metrics"]["dev"].items() if "/" not in k}
    code = (
        "import torch\nfrom transformers import AutoModelForTokenClassification, AutoTokenizer\n\n"
        f'tokenizer = AutoTokenizer.from_pretrained("{model_dir}")\n'
        f'model = AutoModelForTokenClassification.from_pretrained("{model_dir}").eval()\n'
        'words = ["He", "reckons", "the", "current", "account", "deficit"]\n'
        'inputs = tokenizer(words, is_split_into_words=True, return_tensors="pt")\n'
        "with torch.no_grad():\n    ids = model(**inputs).logits.argmax(-1)[0].tolist()\n"
        "seen, tags = set(), []\n"
        "for position, word in enumerate(inputs.word_ids()):\n"
        "    if word is not None and word not in seen:  # each word's first piece carries its tag\n"
        "        seen.add(word)\n        tags.append(model.config.id2label[ids[position]])\n"
        "print(list(zip(words, tags)))"
    )
    native = ((read_json_record(model_dir / "config.json") or {}).get("architectures") or [None])[0]
    facts = CardFacts(
        title=f"{model_dir.parent.name}: sequence tagging",
        summary="A token-classification model fine-tuned by `electra tag`; each word's tag is read at its first "
        f"piece. Its head is transformers' own ({native or 'a linear layer per piece'}).",
        facts=rows,
        metrics=metrics,
        tags=("token-classification",),
    )
    (model_dir / CARD).write_text(
        render_card(facts, [("How to load", code)], "token-classification"), encoding="utf-8"
    )
