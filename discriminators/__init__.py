"""The discriminators and scoring heads pretraining trains (replaced-token, energy, masked LM)."""

__electra_package__ = (
    True  # electra.siblings tells this copy from another distribution's package of the same name
)
