"""SQuAD 1.1/2.0 fine-tuning and the official evaluation (`electra squad`)."""

__electra_package__ = (
    True  # electra.siblings tells this copy from another distribution's package of the same name
)
