"""GLUE fine-tuning of any ELECTRA or BERT checkpoint, as the ELECTRA paper does it (`electra glue`)."""
