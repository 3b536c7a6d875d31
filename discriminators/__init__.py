"""The discriminators and scoring heads pretraining trains (replaced-token, energy, masked LM)."""
