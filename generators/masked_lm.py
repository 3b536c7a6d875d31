"""ELECTRA's generator: a small masked LM whose embeddings (and output projection) are the discriminator's."""

from __future__ import annotations

from torch import nn
from transformers import ElectraForMaskedLM
from transformers.models.electra.modeling_electra import ElectraEmbeddings, ElectraModel

from electra.generators.base import Generator, LinearHead


class MaskedLMGenerator(Generator):
    """Wraps `transformers.ElectraForMaskedLM` so the export is that class's layout, but projects only masked rows."""

    needs_masked_input = True

    def __init__(
        self,
        hf_config,
        shared_embeddings: ElectraEmbeddings | None = None,
        shared_encoder: ElectraModel | None = None,
    ):
        super().__init__()
        self.model = ElectraForMaskedLM(hf_config)
        if shared_encoder is not None:  # embedding_sharing=all: one encoder for both models
            self.model.electra = shared_encoder
        elif shared_embeddings is not None:
            self.model.electra.embeddings = shared_embeddings
        # The output projection is the (possibly shared) input embedding matrix, transposed.
        self.model.generator_lm_head.weight = self.model.electra.embeddings.word_embeddings.weight

    def logits_at(self, input_ids, attention_mask, token_type_ids, positions):
        return self.states_and_logits_at(input_ids, attention_mask, token_type_ids, positions)[1]

    def head_at(self, input_ids, attention_mask, token_type_ids, positions) -> LinearHead | None:
        head = self.model.generator_lm_head
        if type(head) is not nn.Linear:
            return None
        selected = self._encoded_rows(input_ids, attention_mask, token_type_ids, positions)
        return LinearHead(self.model.generator_predictions(selected), head.weight, head.bias)

    def states_and_logits_at(self, input_ids, attention_mask, token_type_ids, positions):
        """(encoder outputs, logits) at the picked rows: the adversarial objective's baseline reads the states."""
        selected = self._encoded_rows(input_ids, attention_mask, token_type_ids, positions)
        return selected, self.model.generator_lm_head(self.model.generator_predictions(selected))

    def _encoded_rows(self, input_ids, attention_mask, token_type_ids, positions):
        hidden = self.model.electra(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        return positions.rows(hidden)

    def hf_model(self) -> ElectraForMaskedLM:
        return self.model
