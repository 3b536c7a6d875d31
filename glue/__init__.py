"""GLUE fine-tuning of any ELECTRA or BERT checkpoint, as the ELECTRA paper does it (`electra glue`)."""

__electra_package__ = (
    True  # electra.siblings tells this copy from another distribution's package of the same name
)
