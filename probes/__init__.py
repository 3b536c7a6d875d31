"""Linear probes of a frozen pretrained encoder (`electra probe`): cheap, low-noise scores that tell pretraining
objectives apart at CPU budgets where GLUE fine-tuning on a few thousand examples is within noise of chance.

`probes.data` reads the labelled text (SST-2 sentences, Brown part-of-speech tags), `probes.linear` extracts frozen
features and fits a multinomial logistic regression on them, `probes.run` is the registry of probes and runs one
probe over seeds, `probes.cli` is `electra probe`.
"""

__electra_package__ = (
    True  # electra.siblings tells this copy from another distribution's package of the same name
)
