"""FLOP accounting in the ELECTRA paper's conventions: `analytic` counts, `measured` checks, `paper` reproduces."""
