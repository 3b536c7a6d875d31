"""SQuAD 1.1/2.0 fine-tuning and the official evaluation (`electra squad`)."""
