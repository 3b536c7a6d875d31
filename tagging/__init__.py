"""Sequence tagging (chunking, named entities, part of speech) on CoNLL-style column files: the reader and writer
(`conll`), span and token scores (`spans`), and `electra tag`, fine-tuning a transformer encoder to tag."""
