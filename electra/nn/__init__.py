"""Building blocks the models are made of: dynamic masking, cheap CPU dropout, lane attention, step metrics, and the
translation of a PretrainConfig into transformers configs."""
