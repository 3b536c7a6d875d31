"""`electra tag --cvt`: Cross-View Training on a pretrained Transformer. Each auxiliary module sees only its view
(change what it must not see: its prediction does not move), the unlabeled loss trains only the lower layers,
embeddings and auxiliary modules, and a run trains and exports the plain tagger."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import ElectraConfig, ElectraModel

from electra.core.errors import UserError
from electra.tagging.cvt_views import TransformerCvtTagger, word_bounds
from electra.tagging.finetune import run_tag
from electra.tagging.model import TaggerModel
from electra.tagging.settings import TagSettings
from tests.test_tagging_finetune import FAST, first_piece_tags, tiny_encoder, write_corpus

CLS, SEP, PAD = 2, 3, 0


def test_word_bounds_end_each_word_before_the_next_start_or_sep():
    # [CLS] w0 w0 w1 w2 w2 w2 [SEP] [PAD]
    starts = torch.tensor([[0, 1, 0, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    sep = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 1, 0]], dtype=torch.bool)
    last, after = word_bounds(starts, sep)
    assert [last[0, p].item() for p in (1, 3, 4)] == [2, 3, 6]
    assert [after[0, p].item() for p in (1, 3, 4)] == [3, 4, 7]


def _model(view_layers: int = 2) -> TransformerCvtTagger:
    torch.manual_seed(0)
    config = ElectraConfig(
        vocab_size=40,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    return TransformerCvtTagger(
        TaggerModel(ElectraModel(config), ["O", "B-X", "I-X"]), SEP, view_layers
    ).eval()


# [CLS] w0 ##w0 w1 w2 ##w2 w3 [SEP] [PAD]: word w2 starts at piece 4, its pieces are 4-5
IDS = [CLS, 10, 11, 12, 13, 14, 15, SEP, PAD]
STARTS = [0, 1, 0, 1, 1, 0, 1, 0, 0]
W2 = 4
PIECES = {"w0": (1, 2), "w1": (3,), "w2": (4, 5), "w3": (6,)}
HIDDEN = {  # what each module must not see when it predicts w2
    "fwd": ("w3",),
    "bwd": ("w0", "w1"),
    "future": ("w2", "w3"),
    "past": ("w0", "w1", "w2"),
}


def _logits(model: TransformerCvtTagger, ids: list[int]) -> dict[str, torch.Tensor]:
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        out = model.module_logits(
            input_ids,
            (input_ids != PAD).long(),
            torch.zeros_like(input_ids),
            torch.tensor([STARTS], dtype=torch.bool),
        )
    return {name: logits[0, W2] for name, logits in out.items()}


@pytest.mark.parametrize("module", sorted(HIDDEN))
def test_an_auxiliary_module_cannot_see_what_its_view_hides(module):
    model = _model()
    base = _logits(model, IDS)[module]
    for word, pieces in PIECES.items():
        changed = list(IDS)
        for position in pieces:
            changed[position] = 30 + position  # another piece, same positions
        moved = not torch.allclose(_logits(model, changed)[module], base, atol=1e-6)
        assert moved == (word not in HIDDEN[module]), (module, word)


def test_the_unlabeled_loss_trains_only_the_views_lower_layers_and_modules():
    model = _model(view_layers=2).train()
    input_ids = torch.tensor([IDS, IDS])
    loss, parts = model.unlabeled_loss(
        input_ids,
        (input_ids != PAD).long(),
        torch.zeros_like(input_ids),
        torch.tensor([STARTS, STARTS], dtype=torch.bool),
    )
    assert set(parts) == set(HIDDEN) and torch.isfinite(loss)
    loss.backward()
    touched = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert not any(name.startswith("tagger.classifier") for name in touched)  # the primary module: none
    assert not any(".layer.2." in name for name in touched)  # above the views: none
    assert any(".layer.1." in name for name in touched) and any("embeddings" in name for name in touched)
    assert all(any(name.startswith(f"auxiliary.{m}.") for name in touched) for m in HIDDEN)


def test_cvt_is_refused_without_unlabeled_text_and_with_unknown_modules():
    with pytest.raises(UserError, match="--cvt and --unlabeled"):
        TagSettings(cvt=True)
    with pytest.raises(UserError, match="unknown: side"):
        TagSettings(cvt=True, unlabeled="x", cvt_modules="fwd,side")


def test_a_cvt_run_trains_and_exports_the_plain_tagger(tmp_path):
    train = write_corpus(tmp_path / "train.txt", 120, 0)
    dev = write_corpus(tmp_path / "dev.txt", 40, 1)
    encoder = tiny_encoder(tmp_path / "electra", "electra")
    unlabeled = tmp_path / "unlabeled.txt"
    sentences = [
        " ".join(line.split()[0] for line in block.splitlines()) for block in train.read_text().split("\n\n")
    ]
    unlabeled.write_text("\n\n".join(s for s in sentences if s and "DOCSTART" not in s))
    settings = TagSettings(**FAST, cvt=True, unlabeled=str(unlabeled))
    result = run_tag(encoder, train, dev, settings, [1], output_dir=tmp_path / "out")
    assert result["settings"]["cvt"] and result["summary"]["dev"]["f1"]["median"] > 0.5
    saved = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert saved["architectures"] == ["ElectraForTokenClassification"]  # no auxiliary module in the export
    from electra.tagging.conll import read_conll

    gold = read_conll(dev)
    written = read_conll(
        tmp_path / "out" / "dev.predictions.txt", columns="word,pos,chunk,predicted", label="predicted"
    )
    assert [s.labels for s in written] == first_piece_tags(tmp_path / "out" / "model", gold)
