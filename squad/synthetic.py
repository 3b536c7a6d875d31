"""Deterministic splits of a SQuAD file and a constructed SQuAD 2.0-format file, for tests and smoke runs.

Only SQuAD 1.1 dev is available offline, so the 2.0 path is exercised on CONSTRUCTED data: questions moved to a
paragraph of another article, where they are (almost surely) unanswerable, and marked `is_impossible`. This is not
SQuAD 2.0 (whose unanswerable questions were written adversarially against their own paragraph); numbers on it only
show that the pipeline works.
"""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any

from electra.squad.data import load_squad_json


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


_WORD = re.compile(r"\b[^\W\d_]{4,}\b")  # whole words of four or more letters, any alphabet


def construct_lookup(payload: dict[str, Any], per_paragraph: int = 4, seed: int = 0) -> dict[str, Any]:
    """A 1.1-format copy whose questions can only be answered by reading them: each asks where a span of one to three
    words of the paragraph is ("Where is 'lower Rhine'?"), and the answer is that span at its place.

    Why: a tiny random-init model fine-tuned for minutes learns little of real SQuAD, and what it learns comes from
    answer position and type alone (with another article's questions swapped in, its F1 was unchanged: README,
    "Tests"). On these questions a model that ignores the question scores near zero, so a fine-tune that beats the
    same model on swapped questions (`swap_questions`) shows the whole pipeline (features across question and
    context, the span head, post-processing back to text) learns from the question. Spans are chosen among words of
    four or more letters whose lower-cased text occurs once in the paragraph, so every answer is unambiguous."""
    rng = random.Random(seed)
    data = copy.deepcopy(payload["data"])
    for a_index, article in enumerate(data):
        for p_index, paragraph in enumerate(article["paragraphs"]):
            context = paragraph["context"]
            lowered = context.lower()
            words = list(_WORD.finditer(context))
            candidates = []
            for i in range(len(words)):
                for length in (1, 2, 3):
                    span = words[i : i + length]
                    if len(span) < length or not _only_spaces_between(context, span):
                        continue
                    start, end = span[0].start(), span[-1].end()
                    text = context[start:end]
                    if lowered.count(text.lower()) == 1:
                        candidates.append((start, text))
            chosen = rng.sample(candidates, min(per_paragraph, len(candidates)))
            paragraph["qas"] = [
                {
                    "id": f"lookup-{a_index}-{p_index}-{q_index}",
                    "question": f"Where is '{text}'?",
                    "answers": [{"text": text, "answer_start": start}],
                }
                for q_index, (start, text) in enumerate(sorted(chosen))
            ]
    return {"version": "1.1", "data": data}


def _only_spaces_between(context: str, span: list[re.Match]) -> bool:
    return all(context[a.end() : b.start()] == " " for a, b in zip(span, span[1:]))


def swap_questions(payload: dict[str, Any]) -> dict[str, Any]:
    """The same file with every question's text taken from the next paragraph's question of the same rank (ids and
    answers kept): the control that tells a model reading the question from one that guesses from the context."""
    data = copy.deepcopy(payload["data"])
    paragraphs = [p for article in data for p in article["paragraphs"] if p["qas"]]
    texts = [[qa["question"] for qa in p["qas"]] for p in paragraphs]
    for index, paragraph in enumerate(paragraphs):
        donor = texts[(index + 1) % len(paragraphs)]
        for rank, qa in enumerate(paragraph["qas"]):
            qa["question"] = donor[rank % len(donor)]
    return {"version": payload.get("version", "1.1"), "data": data}
