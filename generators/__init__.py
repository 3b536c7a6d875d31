"""The corrupting side of pretraining: masked-LM, two-tower cloze, unigram and frozen-LM generators."""

__electra_package__ = (
    True  # electra.siblings tells this copy from another distribution's package of the same name
)
