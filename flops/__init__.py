"""FLOP accounting in the ELECTRA paper's conventions: `analytic` counts, `measured` checks, `paper` reproduces."""

__electra_package__ = (
    True  # electra.siblings tells this copy from another distribution's package of the same name
)
