"""Linear probes of a frozen pretrained encoder (`electra probe`): cheap, low-noise scores that tell pretraining
objectives apart at CPU budgets where GLUE fine-tuning on a few thousand examples is within noise of chance.

`electra.probes.data` reads the labelled text (SST-2 sentences, Brown part-of-speech tags), `electra.probes.linear` extracts frozen
features and fits a multinomial logistic regression on them, `electra.probes.run` is the registry of probes and runs one
probe over seeds, `electra.probes.cli` is `electra probe`.
"""
