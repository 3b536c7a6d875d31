"""Preprocessing: windows, answer positions and max-context flags on the real dev set with a real vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest

from electra.squad.data import read_squad
from electra.squad.features import FeatureSettings, answer_token_span, build_features

SETTINGS = FeatureSettings(max_seq_length=128, doc_stride=48, max_query_length=64)


@pytest.fixture(scope="module")
def tokenizer(shared_data):
    from transformers import ElectraTokenizerFast

    return ElectraTokenizerFast(vocab=str(shared_data / "bert_vocab" / "vocab.txt"))


@pytest.fixture(scope="module")
def examples(shared_data):
    # Questions from three articles of different lengths (about 600 questions, many multi-window contexts).
    return [
        e
        for e in read_squad(shared_data / "squad" / "dev-v1.1.json")
        if e.title in {"Super_Bowl_50", "Warsaw", "Normans"}
    ]


@pytest.fixture(scope="module")
def windows(examples, tokenizer):
    train = build_features(examples, tokenizer, SETTINGS, train=True)
    evaluation = build_features(examples, tokenizer, SETTINGS, train=False)
    assert train["example_index"] == evaluation["example_index"]  # same windows in both modes
    return train, evaluation


def test_answer_token_span_by_hand() -> None:
    # [CLS] q q [SEP] Denver won the game [SEP]; context "Denver won the game" (chars 0-19)
    offsets = [[-1, -1], [-1, -1], [-1, -1], [-1, -1], [0, 6], [7, 10], [11, 14], [15, 19], [-1, -1]]
    assert answer_token_span(offsets, 7, 14) == (5, 6)  # "won the"
    assert answer_token_span(offsets, 0, 6) == (4, 4)  # "Denver"
    assert answer_token_span(offsets, 8, 9) == (5, 5)  # "o" inside "won": the covering token
    assert answer_token_span(offsets[:1] + offsets[5:], 0, 6) == (0, 0)  # starts before the window: [CLS]


def test_every_answerable_window_maps_back_to_the_answer(examples, windows) -> None:
    train, evaluation = windows
    checked = exact = 0
    found = set()
    for start, end, ex_index, offsets in zip(
        train["start_positions"], train["end_positions"], train["example_index"], evaluation["offsets"]
    ):
        example = examples[ex_index]
        answer = example.answers[0]
        context_chars = [o for o in offsets if o[0] >= 0]
        inside = context_chars[0][0] <= answer.start and context_chars[-1][1] >= answer.end
        if start == 0:
            assert end == 0 and not inside  # a window without the whole answer points at [CLS]
            continue
        assert inside and 0 < start <= end
        span = example.context[offsets[start][0] : offsets[end][1]]
        # The span covers the answer and is minimal: its first and last tokens overlap the answer.
        assert offsets[start][0] <= answer.start and offsets[end][1] >= answer.end
        assert offsets[start][1] > answer.start and offsets[end][0] < answer.end
        token_aligned = answer.start in {o[0] for o in context_chars} and answer.end in {
            o[1] for o in context_chars
        }
        if token_aligned:
            assert span == answer.text
            exact += 1
        checked += 1
        found.add(ex_index)
    assert checked > len(examples)  # long contexts give several windows with the answer
    assert len(found) == len(examples)  # every question has at least one window holding its answer
    assert exact / checked > 0.97  # sub-word answers ("Japan" in "Japanese") are rare


def test_windows_start_doc_stride_tokens_apart(examples, windows, tokenizer) -> None:
    _, evaluation = windows
    by_example: dict[int, list[int]] = {}
    for ex_index, offsets in zip(evaluation["example_index"], evaluation["offsets"]):
        by_example.setdefault(ex_index, []).append(next(o[0] for o in offsets if o[0] >= 0))
    multi = {i: starts for i, starts in by_example.items() if len(starts) > 1}
    assert multi
    for ex_index, starts in multi.items():
        token_starts = [
            s
            for s, _ in tokenizer(
                examples[ex_index].context, return_offsets_mapping=True, add_special_tokens=False
            )["offset_mapping"]
        ]
        positions = [token_starts.index(s) for s in starts]
        assert all(b - a == SETTINGS.doc_stride for a, b in zip(positions, positions[1:]))


def test_each_context_token_has_exactly_one_max_context_window(windows) -> None:
    _, evaluation = windows
    counts: dict[tuple[int, int, int], int] = {}
    for ex_index, offsets, flags in zip(
        evaluation["example_index"], evaluation["offsets"], evaluation["max_context"]
    ):
        for (s, e), flag in zip(offsets, flags):
            if s >= 0:
                counts[(ex_index, s, e)] = counts.get((ex_index, s, e), 0) + flag
            else:
                assert flag == 0
    assert set(counts.values()) == {1}


def test_features_are_cached_through_datasets(examples, tokenizer, tmp_path: Path) -> None:
    first = build_features(examples[:50], tokenizer, SETTINGS, train=True, cache_dir=tmp_path)
    cached = list(tmp_path.iterdir())
    assert len(cached) == 1 and cached[0].is_dir()
    again = build_features(examples[:50], tokenizer, SETTINGS, train=True, cache_dir=tmp_path)
    assert again.to_dict() == first.to_dict() and len(list(tmp_path.iterdir())) == 1
    other = FeatureSettings(max_seq_length=96, doc_stride=32)
    build_features(examples[:50], tokenizer, other, train=True, cache_dir=tmp_path)
    assert len(list(tmp_path.iterdir())) == 2  # different settings never reuse a cache
