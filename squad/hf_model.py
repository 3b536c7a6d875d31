"""`ElectraForSquad`: the fine-tuned SQuAD model with ELECTRA's XLNet-style head, as a `transformers` model class.

`transformers` has no class with this head (the end logits depend on the start, and SQuAD 2.0 adds an answerability
classifier), so a model saved with it loads through this one:

    from electra.squad.hf_model import ElectraForSquad
    model = ElectraForSquad.from_pretrained("out/model")

It is a `PreTrainedModel` (from_pretrained, save_pretrained, device moves, dtype casts); its forward returns the
head's `QAOutput` (a loss with labels; else top-k starts, the k x k ends given each, and a null score), which
`electra.squad.postprocess` turns into answer strings. Models fine-tuned with `--head plain` need none of this:
`AutoModelForQuestionAnswering` loads them.
"""

from __future__ import annotations

import torch
from transformers import ElectraConfig, ElectraModel, ElectraPreTrainedModel

from electra.squad.heads import HeadConfig, QAOutput, SpanHead
from electra.squad.model import HEAD_KEY, span_forward


class ElectraForSquad(ElectraPreTrainedModel):
    config_class = ElectraConfig
    base_model_prefix = "electra"

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        settings = getattr(config, HEAD_KEY, None)
        if not isinstance(settings, dict):
            raise ValueError(f"config has no {HEAD_KEY!r} entry: not a fine-tuned SQuAD model's config")
        self.electra = ElectraModel(config)
        self.qa_head = SpanHead(config.hidden_size, HeadConfig(**settings))
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        is_impossible: torch.Tensor | None = None,
    ) -> QAOutput:
        return span_forward(
            self.electra,
            self.qa_head,
            input_ids,
            attention_mask,
            token_type_ids,
            start_positions,
            end_positions,
            is_impossible,
        )
