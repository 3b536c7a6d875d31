"""Text in, batches out: corpus readers, WordPiece tokenizers, sentence-aware packing, and the embedded corpus."""
