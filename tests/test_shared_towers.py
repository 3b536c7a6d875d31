"""Scoring with shared tower states equals scoring every sentence alone, and shares what n-best lists share."""

from __future__ import annotations

import pytest
import torch

from electra.generators.shared_towers import cloze_log_q, pack_trees, shared_fraction
from electra.generators.two_tower import TwoTowerGenerator
from tests.test_two_tower import _config

CLS, SEP = 2, 3


def _nbest_like() -> list[list[int]]:
    """One 'utterance': a sentence, substitutions at the start, middle and end, an insertion and a deletion
    (other lengths), a duplicate, and an unrelated sentence."""
    base = [CLS, 10, 11, 12, 13, 14, 15, 16, SEP]
    rows = [base, [CLS, 20, *base[2:]], [*base[:4], 21, *base[5:]], [*base[:-2], 22, SEP]]
    rows += [[*base[:3], 23, *base[3:]], [*base[:5], *base[6:]], list(base), [CLS, 30, 31, SEP], [CLS, SEP]]
    return rows


def _alone(model: TwoTowerGenerator, row: list[int]) -> list[float]:
    ids = torch.tensor([row])
    log_q = torch.log_softmax(model(ids)[0].float(), -1)
    return [log_q[t, row[t]].item() for t in range(1, len(row) - 1)]


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("node_budget", [4, 12, 256])
def test_shared_scores_equal_each_sentence_alone(impl, node_budget):
    torch.manual_seed(0)
    model = TwoTowerGenerator(_config(attn_implementation=impl)).eval()
    rows = _nbest_like()
    with torch.no_grad():
        got = cloze_log_q(model, rows, [range(1, len(r) - 1) for r in rows], node_budget=node_budget)
        for row, values in zip(rows, got):
            assert values.tolist() == pytest.approx(_alone(model, row), abs=1e-5)


def test_trees_hold_each_distinct_context_once_and_see_only_ancestors():
    rows = _nbest_like()
    left, right = pack_trees(rows, reverse=False), pack_trees(rows, reverse=True)
    assert sum(left.used) == len({tuple(r[: t + 1]) for r in rows for t in range(len(r))})
    assert sum(right.used) == len({(t, tuple(r[t:])) for r in rows for t in range(len(r))})
    for trees, reverse in ((left, False), (right, True)):
        mask = trees.ancestor_mask(slice(None))
        for row, nodes in zip(rows, trees.node_of):
            for t, node in enumerate(nodes):
                r, column = divmod(node, trees.width)
                assert trees.tokens[r, column] == row[t] and trees.positions[r, column] == t
                # a left-tower node sees positions 0..t of its sentence, a right-tower node t..end, nothing else
                context = nodes[t:] if reverse else nodes[: t + 1]
                assert mask[r, column].nonzero().flatten().tolist() == sorted(
                    n - r * trees.width for n in context
                )


def test_nbest_lists_share_and_distinct_sentences_do_not():
    left, right = shared_fraction(_nbest_like())
    assert left < 0.6 and right < 0.8
    assert shared_fraction([[CLS, 5, 6, SEP]]) == (1.0, 1.0)
    assert cloze_log_q(TwoTowerGenerator(_config()).eval(), [], []) == []
