"""`cloze_span=word`: the prediction of a piece reads nothing of its own word to its right, everywhere it is computed."""

from __future__ import annotations

import pytest
import torch

from electra.core.errors import UserError
from electra.data.tokenization import word_start_flags
from electra.generators.shared_towers import cloze_log_q
from electra.generators.two_tower import TwoTowerGenerator
from electra.objectives import build_config
from tests.test_two_tower import _config

CLS, SEP = 2, 3
FIRST_CONTINUATION = 30  # ids 30..49 continue a word ("##" pieces); 0..29 begin one


def _starts() -> torch.Tensor:
    return torch.arange(50) < FIRST_CONTINUATION


def _model(**overrides) -> TwoTowerGenerator:
    torch.manual_seed(0)
    config = _config(objective="cloze", cloze_span="word", **overrides)
    return TwoTowerGenerator(config, word_starts=_starts()).eval()


def _word_end(row: list[int], t: int) -> int:
    """The last position of the word that position t belongs to."""
    end = t
    while end + 1 < len(row) and row[end + 1] >= FIRST_CONTINUATION:
        end += 1
    return end


ROW = [CLS, 10, 35, 36, 11, 37, 12, SEP]  # words: [10 35 36] [11 37] [12]


def test_right_sources_point_at_the_next_word_start():
    model = _model()
    assert model.right_sources(torch.tensor(ROW)).tolist() == [1, 4, 4, 4, 6, 6, 7, 8]
    batch = torch.tensor([ROW, [CLS, 40, 41, 10, SEP, 0, 0, 0]])  # a word of continuations only, then padding
    assert model.right_sources(batch)[1].tolist() == [3, 3, 3, 4, 5, 6, 7, 8]
    piece = TwoTowerGenerator(_config()).eval()
    assert piece.right_sources(torch.tensor(ROW)).tolist() == list(range(1, 9))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_prediction_at_t_reads_nothing_of_its_word_to_its_right(impl):
    model = _model(attn_implementation=impl)
    ids = torch.tensor([ROW])
    with torch.no_grad():
        base = model(ids)[0]
        for t in range(1, len(ROW) - 1):
            for hidden in range(t, _word_end(ROW, t) + 1):  # x_t and the rest of its word: invisible
                changed = ids.clone()
                changed[0, hidden] = changed[0, hidden] + 1  # stays a start or a continuation as it was
                assert torch.allclose(model(changed)[0, t], base[t], atol=1e-5), (t, hidden)
            for seen in (t - 1, _word_end(ROW, t) + 1):  # the piece before it and the next word: read
                if 0 < seen < len(ROW) - 1:
                    changed = ids.clone()
                    changed[0, seen] = changed[0, seen] + 1
                    assert not torch.allclose(model(changed)[0, t], base[t], atol=1e-5), (t, seen)


def test_padding_does_not_change_real_positions():
    model = _model()
    ids = torch.tensor([ROW])
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, len(ROW)), torch.zeros(1, 4)], dim=1).long()
    with torch.no_grad():
        assert torch.allclose(model(ids), model(padded, attention_mask=mask)[:, : len(ROW)], atol=1e-5)


def test_shared_tower_scoring_equals_each_sentence_alone():
    model = _model()
    rows = [ROW, [CLS, 10, 35, 11, 37, 12, SEP], [CLS, 10, 35, 36, 11, 12, SEP], [CLS, 13, 12, SEP], ROW]
    with torch.no_grad():
        got = cloze_log_q(model, rows, [range(1, len(r) - 1) for r in rows], node_budget=6)
        for row, values in zip(rows, got):
            log_q = torch.log_softmax(model(torch.tensor([row]))[0], -1)
            alone = [log_q[t, row[t]].item() for t in range(1, len(row) - 1)]
            assert values.tolist() == pytest.approx(alone, abs=1e-5)


def test_round_trip_keeps_the_span_and_the_word_starts(tmp_path):
    model = _model()
    model.save_pretrained(tmp_path)
    again = TwoTowerGenerator.from_pretrained(tmp_path).eval()
    assert again.cloze_span == "word" and torch.equal(again.word_starts, _starts())
    ids = torch.tensor([ROW])
    with torch.no_grad():
        assert torch.allclose(model(ids), again(ids), atol=1e-6)


def test_word_starts_come_from_the_wordpiece_prefix(sample_tokenizer):
    flags = word_start_flags(sample_tokenizer)
    pieces = sample_tokenizer.convert_ids_to_tokens(list(range(len(sample_tokenizer))))
    assert flags.shape == (len(sample_tokenizer),)
    assert any(p.startswith("##") for p in pieces) and any(not p.startswith("##") for p in pieces)
    assert all(flag == (not piece.startswith("##")) for flag, piece in zip(flags.tolist(), pieces))
    assert all(flags[i] for i in sample_tokenizer.all_special_ids)


def test_a_tokenizer_without_continuation_pieces_is_refused():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    with pytest.raises(UserError, match="cloze_span=word needs a WordPiece vocabulary"):
        word_start_flags(PreTrainedTokenizerFast(tokenizer_object=backend))


def test_config_refuses_word_spans_outside_the_cloze_objective():
    with pytest.raises(UserError, match="use it with objective=cloze only"):
        build_config("tiny", overrides={"objective": "electric", "cloze_span": "word"})
    with pytest.raises(UserError, match="cloze_span='letter' is not one of piece, word"):
        build_config("tiny", overrides={"objective": "cloze", "cloze_span": "letter"})
