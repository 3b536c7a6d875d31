"""CVT's unlabeled loss, worked by hand on tiny models: the BiLSTM tagger's `cvt_loss` and the Transformer's
`CvtTagger.unlabeled_loss`.

The encoders' states are taken from the models (they are not what is under test); everything after them is
recomputed here from the definitions: which state each view reads at each word (written out position by position),
where each module is trained (its view mask, written out as lists of positions), the prediction modules as
matrix products, the teacher as the softmax of the primary module, and the loss as the sum over modules of the mean
over their positions of -sum_c p_c log q_c.
"""

from __future__ import annotations

import pytest
import torch

from electra.tagging.cvt_model import AUXILIARY_MODULES, cvt_loss, make_batch
from tests.test_tagging_cvt import OTHER, tiny_tagger
from tests.test_tagging_cvt_transformer import CLS, IDS, PAD, SEP, STARTS
from tests.test_tagging_cvt_transformer import _model as transformer_tagger

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHORT = ["The", "cat", "sat"]
# Framed positions (0 is <start>, n+1 is <end>) where each module is trained, for the 3-word sentence and for
# OTHER's 9 words: every word, except that `future` has no word before the first and `past` none after the last.
TRAINED = {
    3: {"full": [1, 2, 3], "fwd": [1, 2, 3], "bwd": [1, 2, 3], "future": [2, 3], "past": [1, 2]},
    9: {
        "full": list(range(1, 10)),
        "fwd": list(range(1, 10)),
        "bwd": list(range(1, 10)),
        "future": list(range(2, 10)),
        "past": list(range(1, 9)),
    },
}


def _module(module: torch.nn.Module, x: torch.Tensor, relu: bool) -> torch.Tensor:
    """U act(W x + b) + c, one vector at a time."""
    hidden = module.hidden.weight.double() @ x + module.hidden.bias.double()
    if relu:
        hidden = torch.clamp(hidden, min=0)
    return module.output.weight.double() @ hidden + module.output.bias.double()


def _cross_entropy(p: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """-sum_c p_c log softmax(logits)_c."""
    return -(p * (logits - torch.logsumexp(logits, 0))).sum()


def test_the_bilstm_unlabeled_loss_is_the_one_worked_by_hand():
    model, vocab = tiny_tagger(seed=3)
    sentences = [SHORT, OTHER]
    batch = make_batch(sentences, vocab, model.config.max_word_length)
    with torch.no_grad():
        h1, h2 = (h.double() for h in model.encode(batch, 0.0))
        half = model.config.first_width
        per_module: dict[str, list[torch.Tensor]] = {name: [] for name in AUXILIARY_MODULES}
        for b, sentence in enumerate(sentences):
            for name, positions in TRAINED[len(sentence)].items():
                for t in positions:
                    both = torch.cat([h1[b, t], h2[b, t]])
                    teacher = torch.softmax(_module(model.primary, both, relu=True), 0)
                    view = {
                        "full": both,
                        "fwd": h1[b, t, :half],  # the forward LSTM after reading words 0..t
                        "bwd": h1[b, t, half:],  # the backward one after reading t..n+1
                        "future": h1[b, t - 1, :half],  # words before t only
                        "past": h1[b, t + 1, half:],  # words after t only
                    }[name]
                    student = _module(model.auxiliary[name], view, relu=name != "full")
                    per_module[name].append(_cross_entropy(teacher, student))
        expected = {name: torch.stack(values).mean().item() for name, values in per_module.items()}
        total, parts = cvt_loss(model, batch, dropout=0.0)

    assert set(parts) == set(AUXILIARY_MODULES)
    for name, value in expected.items():
        assert parts[name] == pytest.approx(value, rel=1e-5), name
    assert total.item() == pytest.approx(sum(expected.values()), rel=1e-5)
    # Each module's term is a cross-entropy to another module's distribution: above that distribution's entropy.
    assert min(expected.values()) > 0.1


# The Transformer batch: [CLS] w0 ##w0 w1 w2 ##w2 w3 [SEP] [PAD]. For the word starting at each piece, the piece
# whose state each module reads (left-to-right states for fwd/future, right-to-left for bwd/past):
READS = {
    # word start: fwd reads the word's last piece, bwd its first, future the piece before it, past the piece after
    1: {"fwd": 2, "bwd": 1, "future": 0, "past": 3},
    3: {"fwd": 3, "bwd": 3, "future": 2, "past": 4},
    4: {"fwd": 5, "bwd": 4, "future": 3, "past": 6},
    6: {"fwd": 6, "bwd": 6, "future": 5, "past": 7},
}


def test_the_transformer_unlabeled_loss_is_the_one_worked_by_hand():
    model = transformer_tagger(view_layers=2)
    assert [p for p, start in enumerate(STARTS) if start] == sorted(READS)
    assert IDS[0] == CLS and IDS[7] == SEP
    input_ids = torch.tensor([IDS])
    attention = (input_ids != PAD).long()
    types = torch.zeros_like(input_ids)
    with torch.no_grad():
        left, right = (s.double()[0] for s in model.view_states(input_ids, attention, types))
        _, tagger_logits = model.tagger(input_ids=input_ids, attention_mask=attention, token_type_ids=types)
        per_module: dict[str, list[torch.Tensor]] = {name: [] for name in model.auxiliary}
        for start, reads in READS.items():
            teacher = torch.softmax(tagger_logits[0, start].double(), 0)
            for name, piece in reads.items():
                states = left if name in ("fwd", "future") else right
                first, _, last = model.auxiliary[name]
                hidden = torch.clamp(first.weight.double() @ states[piece] + first.bias.double(), min=0)
                student = last.weight.double() @ hidden + last.bias.double()
                per_module[name].append(_cross_entropy(teacher, student))
        expected = {name: torch.stack(values).mean().item() for name, values in per_module.items()}
        total, parts = model.unlabeled_loss(
            input_ids, attention, types, torch.tensor([STARTS], dtype=torch.bool)
        )

    assert set(parts) == set(READS[1])
    for name, value in expected.items():
        assert parts[name].item() == pytest.approx(value, rel=1e-5), name
    assert total.item() == pytest.approx(sum(expected.values()), rel=1e-5)
