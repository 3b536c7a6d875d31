"""The corrupting side of pretraining: masked-LM, two-tower cloze, unigram and frozen-LM generators, and Electric's
noise drawn from the cloze model (`noise`)."""
