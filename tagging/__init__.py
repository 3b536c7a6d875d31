"""Sequence tagging and dependency parsing on CoNLL-style column files: the reader and writer (`conll`), span and
token scores (`spans`), trees and attachment scores (`dependencies`); `electra tag`, fine-tuning a transformer
encoder to tag (with CVT views: `cvt_views`); and Cross-View Training's CNN-BiLSTM models trained from scratch,
the tagger (`cvt_model`, `electra tag-bilstm`) and the parser (`cvt_parser`, `electra parse-bilstm`), by one loop
(`cvt_train`: its task, data, step and diagnostics in `cvt_task`, `cvt_data`, `cvt_step`, `cvt_diagnostics`) with
checkpoints (`cvt_checkpoint`), over seeds (`cvt_seeds`)."""
