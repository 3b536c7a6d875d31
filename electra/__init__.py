"""electra: compute-efficient language-model pretraining (ELECTRA, Electric) and the tools that consume it."""

__version__ = "0.1.0"
