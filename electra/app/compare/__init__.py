"""`electra compare`, the ELECTRA paper's central experiment on one machine: `run` runs it and gathers its public
API; each part is a module of its own (settings, layout, arms, checks, rerun, vocab, pretrain, glue, probes,
report, plot, plan). Kept empty so that the command line reads `settings` without loading the models."""
