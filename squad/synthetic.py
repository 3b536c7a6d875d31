"""Deterministic splits of a SQuAD file and a constructed SQuAD 2.0-format file, for tests and smoke runs.

Only SQuAD 1.1 dev is available offline, so the 2.0 path is exercised on CONSTRUCTED data: questions moved to a
paragraph of another article, where they are (almost surely) unanswerable, and marked `is_impossible`. This is not
SQuAD 2.0 (whose unanswerable questions were written adversarially against their own paragraph); numbers on it only
show that the pipeline works.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from squad.data import load_squad_json


def split_articles(path: str | Path, first: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the first `first` articles, the rest) as two SQuAD payloads with the file's version."""
    payload = load_squad_json(path)
    version = payload.get("version", "1.1")
    return (
        {"version": version, "data": payload["data"][:first]},
        {"version": version, "data": payload["data"][first:]},
    )


def construct_v2(payload: dict[str, Any], every: int = 3) -> dict[str, Any]:
    """A 2.0-format copy: every answerable question kept (is_impossible false), and every `every`-th question of
    article i+1 (cyclically) also attached to the same-numbered paragraph of article i as unanswerable."""
    data = copy.deepcopy(payload["data"])
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["is_impossible"] = False
    borrowed_from = copy.deepcopy(payload["data"])
    for i, article in enumerate(data):
        donor = borrowed_from[(i + 1) % len(data)]
        donor_questions = [qa for p in donor["paragraphs"] for qa in p["qas"]][::every]
        for j, qa in enumerate(donor_questions):
            paragraph = article["paragraphs"][j % len(article["paragraphs"])]
            paragraph["qas"].append(
                {
                    "id": f"{qa['id']}_moved",
                    "question": qa["question"],
                    "answers": [],
                    "is_impossible": True,
                    "plausible_answers": [],
                }
            )
    return {"version": "v2.0", "data": data}


def write_json(payload: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(payload, ensure_ascii=False))
    return path
