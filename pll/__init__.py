"""Pseudo-log-likelihood scoring and n-best rescoring with Electric, ELECTRA-TT and masked LMs.

`electra score` prints sentence (and token or word) PLLs; `electra rescore` re-ranks ASR n-best lists by
acoustic score + λ·PLL with λ tuned on dev; `electra nbest` makes n-best lists from wav files with pocketsphinx.
"""
