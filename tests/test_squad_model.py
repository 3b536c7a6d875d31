"""Span heads, post-processing and the shared layer-wise optimizer on the SQuAD model (small, hand-built inputs)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from electra.squad.data import SquadExample
from electra.squad.heads import HeadConfig, SpanHead
from electra.squad.postprocess import WindowResult, postprocess


def _head_inputs(length: int = 7, hidden: int = 8, batch: int = 2):
    torch.manual_seed(0)
    states = torch.randn(batch, length, hidden)
    mask = torch.ones(batch, length)
    mask[:, 1:3] = 0  # question tokens: never a start or an end
    return states, mask


def test_beam_search_with_full_beam_finds_the_best_joint_span() -> None:
    """Inference's beam (k = sequence length) agrees with the training loss: the training loss for (s, e) is
    -(log p(s) + log p(e | s)) / 2, so the best span by brute force over the loss is the beam's top entry."""
    states, mask = _head_inputs()
    head = SpanHead(8, HeadConfig("xlnet", answerable=False, beam_size=7, inner_size=16)).eval()
    out = head(states, mask)
    joint = out.start_top_scores.unsqueeze(-1) + out.end_top_scores  # (B, k, k)
    for b in range(states.size(0)):
        best = max(
            (
                -2
                * head(states[b : b + 1], mask[b : b + 1], torch.tensor([s]), torch.tensor([e])).loss.item(),
                s,
                e,
            )
            for s in range(7)
            for e in range(7)
            if mask[b, s] and mask[b, e]
        )
        flat = joint[b].flatten().argmax()
        i, j = divmod(flat.item(), 7)
        assert joint[b, i, j].item() == pytest.approx(best[0], abs=1e-4)
        assert (out.start_top_index[b, i].item(), out.end_top_index[b, i, j].item()) == best[1:]


def test_masked_positions_are_never_in_the_beam() -> None:
    states, mask = _head_inputs()
    out = SpanHead(8, HeadConfig("xlnet", beam_size=4, inner_size=16)).eval()(states, mask)
    assert not set(out.start_top_index.flatten().tolist()) & {1, 2}
    assert not set(out.end_top_index.flatten().tolist()) & {1, 2}


def test_answerability_loss_weight_and_classifier_output() -> None:
    states, mask = _head_inputs()
    starts, ends, impossible = torch.tensor([3, 0]), torch.tensor([4, 0]), torch.tensor([0, 1])
    torch.manual_seed(1)
    with_cls = SpanHead(8, HeadConfig("xlnet", answerable=True, answerable_weight=0.5, inner_size=16))
    out = with_cls(states, mask, starts, ends, impossible)
    span_loss = (out.metrics["start_loss"] + out.metrics["end_loss"]) / 2
    assert out.loss.item() == pytest.approx(
        (span_loss + 0.5 * out.metrics["answerable_loss"]).item(), rel=1e-5
    )
    inference = with_cls.eval()(states, mask)
    assert inference.has_classifier and inference.null_score.shape == (2,)


def test_plain_head_trains_and_infers() -> None:
    states, mask = _head_inputs()
    head = SpanHead(8, HeadConfig("plain", beam_size=3))
    loss = head(states, mask, torch.tensor([3, 4]), torch.tensor([5, 4])).loss
    loss.backward()
    assert head.start.weight.grad is not None and head.end.weight.grad is not None
    out = head.eval()(states, mask)
    assert out.end_top_index.shape == (2, 3, 3) and not out.has_classifier


CONTEXT = "Denver Broncos beat Carolina Panthers in 2016."
# [CLS] q [SEP] Denver Broncos beat Carolina Panthers in 2016 . [SEP]
OFFSETS = [
    [-1, -1],
    [-1, -1],
    [-1, -1],
    [0, 6],
    [7, 14],
    [15, 19],
    [20, 28],
    [29, 37],
    [38, 40],
    [41, 45],
    [45, 46],
    [-1, -1],
]


def _window(starts, start_scores, ends, end_scores, null):
    return WindowResult(np.array(start_scores), np.array(starts), np.array(end_scores), np.array(ends), null)


def test_postprocess_by_hand() -> None:
    example = SquadExample("q1", "t", CONTEXT, "Who won?")
    flags = [0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0]  # token 6 ("Carolina") has its max context elsewhere
    first = _window(
        [4, 0, 1, 6],
        [-0.5, -1.0, -1.2, -0.1],
        [[4, 3, 9, 7], [0, 1, 2, 3], [4, 5, 6, 7], [6, 7, 8, 9]],
        [[-0.1, -0.3, -0.5, -2.0]] * 4,
        0.7,
    )
    # Second window: "Broncos" again (lower score, deduplicated) and "2016".
    second = _window([4, 9], [-1.0, -1.5], [[4, 4], [9, 9]], [[-1.0, -1.0], [-0.2, -0.2]], -0.3)
    preds = postprocess(
        [example],
        [0, 0],
        [OFFSETS, OFFSETS],
        [flags, flags],
        [first, second],
        "2.0",
        has_classifier=True,
        n_best_size=5,
        max_answer_length=5,
    )
    # Kept: (4,4) "Broncos" -0.6; (4,7) "Broncos beat Carolina Panthers" -2.5; (9,9) "2016" -1.7.
    # Dropped: (4,3) end < start; (4,9) 6 tokens > 5; start 0 ([CLS]); start 1 (question); start 6 (not max context).
    nbest = preds.nbest["q1"]
    assert [e["text"] for e in nbest] == ["Broncos", "2016", "Broncos beat Carolina Panthers"]
    assert [e["score"] for e in nbest] == pytest.approx([-0.6, -1.7, -2.5])
    norm = sum(math.exp(s) for s in (-0.6, -1.7, -2.5))
    assert nbest[0]["probability"] == pytest.approx(math.exp(-0.6) / norm)
    assert preds.best_text == {"q1": "Broncos"}
    assert preds.na_scores == {"q1": pytest.approx(-0.3)}  # classifier: the minimum over windows
    assert preds.final(-0.5) == {"q1": ""} and preds.final(0.0) == {"q1": "Broncos"}

    no_cls = postprocess(
        [example],
        [0, 0],
        [OFFSETS, OFFSETS],
        [flags, flags],
        [first, second],
        "2.0",
        has_classifier=False,
        n_best_size=5,
        max_answer_length=5,
    )
    assert no_cls.na_scores["q1"] == pytest.approx(-0.3 - (-0.6))  # min null minus best span score
    v1 = postprocess(
        [example],
        [0, 0],
        [OFFSETS, OFFSETS],
        [flags, flags],
        [first, second],
        "1.1",
        has_classifier=False,
        n_best_size=5,
        max_answer_length=5,
    )
    assert v1.final() == {"q1": "Broncos"} and v1.na_scores == {}


def test_layerwise_decay_treats_the_qa_head_as_head() -> None:
    from transformers import ElectraConfig, ElectraModel

    from electra.squad.model import SquadModel
    from electra.training.optim import layerwise_lr_groups

    config = ElectraConfig(
        vocab_size=50,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=32,
    )
    model = SquadModel(ElectraModel(config), HeadConfig("xlnet", answerable=True, inner_size=16))
    groups = {g["name"]: g for g in layerwise_lr_groups(model, base_lr=1.0, layer_decay=0.5)}
    head_names = set(groups["head"]["param_names"])
    assert {n for n, _ in model.named_parameters() if n.startswith("qa_head.")} == head_names
    assert groups["head"]["lr"] == 1.0 and groups["layer_2"]["lr"] == 1.0
    assert groups["layer_0"]["lr"] == 0.25 and groups["embeddings"]["lr"] == 0.125
    assert any(n.startswith("encoder.embeddings_project") for n in groups["embeddings"]["param_names"])


def _tiny_qa(kind: str, answerable: bool = False):
    from transformers import ElectraConfig, ElectraModel

    from electra.squad.model import SquadModel

    torch.manual_seed(0)
    config = ElectraConfig(
        vocab_size=40,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    head = HeadConfig(kind, answerable=answerable, inner_size=16, beam_size=3)
    model = SquadModel(ElectraModel(config), head).eval()
    for p in model.qa_head.parameters():  # not the zero/identity init: a mix-up of rows must show
        torch.nn.init.normal_(p, std=0.5)
    ids = torch.randint(5, 40, (2, 12))
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return model, (ids, torch.ones_like(ids), types)


def test_a_plain_head_saves_as_transformers_own_question_answering_model(tmp_path) -> None:
    """No code of this library is needed to load it: AutoModelForQuestionAnswering does."""
    from transformers import AutoModelForQuestionAnswering, ElectraTokenizerFast

    words = "[PAD] [UNK] [CLS] [SEP] [MASK] who wrote it ? the book was written by ada .".split()
    model, (ids, mask, types) = _tiny_qa("plain")
    tokenizer = ElectraTokenizerFast(vocab={w: i for i, w in enumerate(words)})
    model.save(tmp_path, tokenizer)
    hf = AutoModelForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == "ElectraForQuestionAnswering"
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        hidden = model.encoder(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        assert torch.allclose(theirs.start_logits, model.qa_head.start(hidden).squeeze(-1), atol=1e-6)
        assert torch.allclose(theirs.end_logits, model.qa_head.end(hidden).squeeze(-1), atol=1e-6)
    # What the model card tells a reader to run: question and context through the tokenizer, best start and end.
    from electra.squad.train import SquadSettings, write_squad_card

    settings = SquadSettings(model="base", output=str(tmp_path.parent), train="train.json", head="plain")
    write_squad_card(tmp_path, settings, {"train": {"steps": 3, "windows": 8}}, model)
    card = (tmp_path / "README.md").read_text()
    assert "pipeline_tag: question-answering" in card and "| steps | 3, batch 32" in card
    scope: dict = {}
    exec(card.split("```python\n")[1].split("```")[0].replace("print(", "len("), scope)
    assert 0 <= scope["start"] < scope["inputs"]["input_ids"].shape[1]


@pytest.mark.parametrize("answerable", [False, True])
def test_electra_span_head_loads_through_its_transformers_class_and_round_trips(tmp_path, answerable) -> None:
    from transformers import AutoModel

    from electra.squad.hf_model import ElectraForSquad
    from electra.squad.model import SquadModel

    model, batch = _tiny_qa("xlnet", answerable)
    model.save(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["ElectraForSquad"] and config["squad_head"]["answerable"] is answerable
    with torch.no_grad():
        ours = model(*batch)
        for loaded in (ElectraForSquad.from_pretrained(tmp_path).eval(), SquadModel.load(tmp_path).eval()):
            theirs = loaded(*batch)
            for name in ("start_top_scores", "end_top_scores", "end_top_index", "null_score"):
                # equal weights; a loaded copy may take another BLAS path, hence 1e-6 and not bitwise
                torch.testing.assert_close(getattr(theirs, name), getattr(ours, name), rtol=0, atol=1e-6)
        encoder = AutoModel.from_pretrained(tmp_path)  # the fine-tuned encoder alone
        for key, value in model.encoder.state_dict().items():
            assert torch.equal(encoder.state_dict()[key], value)


def test_the_first_layout_still_loads(tmp_path) -> None:
    from safetensors.torch import save_file

    from electra.squad.model import SquadModel

    model, batch = _tiny_qa("xlnet")
    model.encoder.save_pretrained(tmp_path)  # encoder + qa_head.json + qa_head.safetensors, as first written
    save_file(
        {k: v.contiguous() for k, v in model.qa_head.state_dict().items()},
        str(tmp_path / "qa_head.safetensors"),
    )
    (tmp_path / "qa_head.json").write_text(json.dumps(model.head_config.to_dict()))
    with torch.no_grad():
        assert torch.equal(
            SquadModel.load(tmp_path).eval()(*batch).end_top_scores, model(*batch).end_top_scores
        )
