"""Question + context windows from the fast tokenizer's offsets, with answers mapped to token positions.

The recipe is BERT/ELECTRA's: `[CLS] question [SEP] context-window [SEP]`, questions cut to `max_query_length`
tokens, and windows of the context that start `doc_stride` tokens apart (the reference's meaning of doc stride; a
fast tokenizer's own `stride` is the overlap, so it is derived per question length). A training window that does not
contain the whole answer, and every window of an unanswerable question, points at [CLS] (position 0). Evaluation
windows keep each token's character offsets and whether the window is the token's "max context" window (the one
where it has the most context on its shorter side), so each answer is scored only where the model saw it best.

Features are `datasets.Dataset`s; with a `cache_dir` they are saved with `save_to_disk` under a key that hashes
the examples, the tokenizer and the settings, and loaded from there next time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from electra.core.errors import UserError, first_line
from electra.core.files import read_json_record, write_json_atomically
from electra.core.settings import spelled
from electra.finetune.settings import RecipeSettings
from electra.squad.data import Answer, SquadExample

logger = logging.getLogger(__name__)

# bump when the feature layout changes, so old caches are not reused (2: CACHE_MANIFEST; 3: an answer's span
# without the whitespace at its edges, `answer_characters`)
CACHE_FORMAT = 3
CACHE_MANIFEST = "electra-manifest.json"  # beside the saved dataset: what a damaged copy is found by


@dataclass(frozen=True)
class FeatureSettings:
    """How questions and contexts are cut into windows. Each count's range is declared (and checked) in
    `electra.squad.settings.SquadSettings`; the rule between them, room for context after the longest question,
    is checked here once, when the settings are made (and again for the model's own length, which
    `electra.squad.inputs.check_model_fits` makes them with)."""

    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64

    def __post_init__(self) -> None:
        if self.max_seq_length - self.max_query_length - 3 < 1:
            raise UserError(
                f"{spelled(RecipeSettings, 'max_seq_length')} {self.max_seq_length} leaves no room for context after a question of up to "
                f"{self.max_query_length} tokens; raise it."
            )


def examples_to_columns(examples: Sequence[SquadExample]) -> dict[str, list]:
    """The columns preprocessing needs: training uses the first gold answer, as the reference does."""
    spans = [
        answer_characters(e.answers[0]) if e.answers and not e.is_impossible else (-1, -1) for e in examples
    ]
    return {
        "example_index": list(range(len(examples))),
        "question": [e.question for e in examples],
        "context": [e.context for e in examples],
        "answer_start": [start for start, _ in spans],
        "answer_end": [end for _, end in spans],
        "is_impossible": [int(e.is_impossible) for e in examples],
    }


def answer_characters(answer: Answer) -> tuple[int, int]:
    """The answer's [start, end) characters without the whitespace at its edges, which belongs to no token: an
    answer " Denver " (it matches its context, so it is read) had been labelled from the token before it to the
    token after it."""
    text = answer.text
    start = answer.start + len(text) - len(text.lstrip())
    return start, start + len(text.strip())


def build_features(
    examples: Sequence[SquadExample],
    tokenizer: Any,
    settings: FeatureSettings,
    train: bool,
    cache_dir: str | Path | None = None,
) -> Any:
    """Training features (labels) or evaluation features (offsets, max-context flags) as a `datasets.Dataset`."""
    import datasets

    if not getattr(tokenizer, "is_fast", False):
        raise UserError(
            "SQuAD preprocessing needs a fast tokenizer (character offsets); save one with the model."
        )
    cache_path = None
    if cache_dir is not None:
        cache_path = (
            Path(cache_dir)
            / f"squad-{'train' if train else 'eval'}-{_cache_key(examples, tokenizer, settings, train)}"
        )
        if cache_path.is_dir():
            logger.info("loading cached SQuAD features from %s", cache_path)
            cached = _load_cache(cache_path)
            if cached is not None:
                return cached
    source = datasets.Dataset.from_dict(examples_to_columns(examples))
    features = source.map(
        _prepare,
        batched=True,
        batch_size=256,
        remove_columns=source.column_names,
        fn_kwargs={"tokenizer": tokenizer, "settings": settings, "train": train},
        desc="SQuAD features",
        keep_in_memory=True,
    )
    if cache_path is not None:
        tmp = cache_path.with_name(cache_path.name + ".tmp")
        features.save_to_disk(str(tmp))
        _write_manifest(tmp, len(features))
        if cache_path.is_dir():  # the damaged copy found above
            shutil.rmtree(cache_path)
        tmp.rename(cache_path)
        features = datasets.load_from_disk(str(cache_path))
    return features


def _write_manifest(directory: Path, rows: int) -> None:
    """What `_load_cache` checks a cached copy against: its row count and every file's size."""
    sizes = {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.name != CACHE_MANIFEST}
    write_json_atomically(directory / CACHE_MANIFEST, {"rows": rows, "files": sizes})


def _load_cache(cache_path: Path) -> Any:
    """The cached features, or None (with a warning) when the copy is damaged: a file cut short or removed.

    The cache is derived data, keyed on everything that made it, so a damaged copy is built again rather than
    ending every later run (a `--resume` included) in a pyarrow traceback; and an arrow file cut short at a record
    boundary loads without error as fewer rows (a training set of none), which only the manifest's count and sizes
    reveal."""
    import datasets

    manifest = read_json_record(cache_path / CACHE_MANIFEST)
    problem = None
    if manifest is None or not isinstance(manifest.get("files"), dict):
        problem = f"{CACHE_MANIFEST} is missing or unreadable"
    else:
        for name, size in manifest["files"].items():
            file = cache_path / name
            if not file.is_file() or file.stat().st_size != size:
                problem = f"{name} is missing or not the size it was written with"
                break
    if problem is None:
        try:
            features = datasets.load_from_disk(str(cache_path))
        except (OSError, ValueError) as exc:  # pyarrow's errors are one or the other
            problem = first_line(exc)
        else:
            if len(features) == manifest.get("rows"):
                return features
            problem = f"{len(features)} rows, not the {manifest.get('rows')} written"
    logger.warning("the feature cache %s is damaged (%s); building the features again", cache_path, problem)
    return None


def _cache_key(
    examples: Sequence[SquadExample], tokenizer: Any, settings: FeatureSettings, train: bool
) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps({"format": CACHE_FORMAT, "train": train, **asdict(settings)}).encode())
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    for call_state in ("truncation", "padding"):  # set per call, not part of the tokenizer's identity
        backend.pop(call_state, None)
    digest.update(json.dumps(backend, sort_keys=True).encode())
    for e in examples:
        first = (e.answers[0].start, e.answers[0].text) if e.answers else None
        digest.update(json.dumps([e.qid, e.question, e.context, first, e.is_impossible]).encode())
    return digest.hexdigest()[:20]


def _prepare(
    batch: dict[str, list], tokenizer: Any, settings: FeatureSettings, train: bool
) -> dict[str, list]:
    questions = [q.lstrip() for q in batch["question"]]
    questions, query_lengths = _truncate_questions(questions, tokenizer, settings.max_query_length)
    # One tokenizer call per question length, so every window starts exactly `doc_stride` tokens after the last.
    by_length: dict[int, list[int]] = {}
    for i, length in enumerate(query_lengths):
        by_length.setdefault(length, []).append(i)
    windows: dict[int, list[dict]] = {i: [] for i in range(len(questions))}
    for length, rows in by_length.items():
        room = settings.max_seq_length - length - 3
        overlap = max(0, room - settings.doc_stride)
        encoded = tokenizer(
            [questions[i] for i in rows],
            [batch["context"][i] for i in rows],
            truncation="only_second",
            max_length=settings.max_seq_length,
            stride=overlap,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            return_token_type_ids=True,
        )
        for j, local in enumerate(encoded["overflow_to_sample_mapping"]):
            sequence_ids = encoded.sequence_ids(j)
            windows[rows[local]].append(
                {
                    "input_ids": encoded["input_ids"][j],
                    "token_type_ids": encoded["token_type_ids"][j],
                    "offsets": [
                        list(off) if sid == 1 else [-1, -1]
                        for off, sid in zip(encoded["offset_mapping"][j], sequence_ids)
                    ],
                }
            )
    out: dict[str, list] = {"input_ids": [], "token_type_ids": [], "example_index": []}
    if train:
        out.update(start_positions=[], end_positions=[], is_impossible=[])
    else:
        out.update(offsets=[], max_context=[])
    for i in range(len(questions)):
        example_windows = windows[i]
        flags = (
            [None] * len(example_windows)
            if train
            else _max_context_flags([w["offsets"] for w in example_windows])
        )
        for window, max_context in zip(example_windows, flags):
            out["input_ids"].append(window["input_ids"])
            out["token_type_ids"].append(window["token_type_ids"])
            out["example_index"].append(batch["example_index"][i])
            if train:
                impossible = bool(batch["is_impossible"][i])
                start, end = (0, 0)
                if not impossible:
                    start, end = answer_token_span(
                        window["offsets"], batch["answer_start"][i], batch["answer_end"][i]
                    )
                out["start_positions"].append(start)
                out["end_positions"].append(end)
                out["is_impossible"].append(int(impossible))
            else:
                out["offsets"].append(window["offsets"])
                out["max_context"].append(max_context)
    return out


def _truncate_questions(questions: list[str], tokenizer: Any, max_tokens: int) -> tuple[list[str], list[int]]:
    """Questions cut to at most `max_tokens` tokens (at a token's end), with their token counts."""
    # verbose=False: a question longer than the model is what this function cuts, not an "indexing error" to warn of
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    lengths = [len(ids) for ids in encoded["input_ids"]]
    long_rows = [i for i, n in enumerate(lengths) if n > max_tokens]
    for i in long_rows:
        questions[i] = questions[i][: encoded["offset_mapping"][i][max_tokens - 1][1]]
    if long_rows:  # re-count: a word cut mid-way can split into a different number of pieces
        again = tokenizer([questions[i] for i in long_rows], add_special_tokens=False)["input_ids"]
        for i, ids in zip(long_rows, again):
            if len(ids) > max_tokens:
                raise UserError(
                    f"question {questions[i]!r} cannot be cut to {max_tokens} tokens; raise "
                    f"{spelled(None, 'max_query_length', '--max-query-length')}."
                )
            lengths[i] = len(ids)
    return questions, lengths


def answer_token_span(offsets: list[list[int]], start_char: int, end_char: int) -> tuple[int, int]:
    """Token (start, end) inclusive covering characters [start_char, end_char); (0, 0) if not all in the window."""
    context = [t for t, (s, _) in enumerate(offsets) if s >= 0]
    if not context:
        return 0, 0
    first, last = context[0], context[-1]
    if offsets[first][0] > start_char or offsets[last][1] < end_char:
        return 0, 0
    start = first
    while start <= last and offsets[start][0] <= start_char:
        start += 1
    end = last
    while end >= first and offsets[end][1] >= end_char:
        end -= 1
    return start - 1, end + 1


def _max_context_flags(windows: list[list[list[int]]]) -> list[list[int]]:
    """Per window, 1 at each context token whose best-context window it is (the reference's rule and ties)."""
    positions: dict[tuple[int, int], int] = {}
    for offsets in windows:
        for s, e in offsets:
            if s >= 0:
                positions.setdefault((s, e), 0)
    for rank, key in enumerate(sorted(positions)):
        positions[key] = rank
    spans = []
    for offsets in windows:
        ranks = [positions[(s, e)] for s, e in offsets if s >= 0]
        spans.append((ranks[0], ranks[-1]) if ranks else (0, -1))
    best: dict[int, tuple[float, int]] = {}
    for w, (first, last) in enumerate(spans):
        for pos in range(first, last + 1):
            score = min(pos - first, last - pos) + 0.01 * (last - first + 1)
            if pos not in best or score > best[pos][0]:
                best[pos] = (score, w)
    flags = []
    for w, offsets in enumerate(windows):
        flags.append([int(s >= 0 and best[positions[(s, e)]][1] == w) for s, e in offsets])
    return flags
