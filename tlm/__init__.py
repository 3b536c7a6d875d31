"""TLM (Yao et al., 2022): retrieve a task-relevant slice of a general corpus with BM25, then train the task and a
language-modelling objective (`mlm`, `electra` or `electric`) jointly from scratch.

`electra.tlm.indexing` builds the BM25 index and `electra.tlm.retrieval` queries it (`electra.tlm.selection` is
`tlm retrieve` below its flags), `electra.tlm.tasks` reads labelled task files (`electra.tlm.task_files` writes the
files made from them), `electra.tlm.interleave` pairs task batches with ρ1 retrieved batches,
`electra.tlm.declared` declares a run's settings and `electra.tlm.settings` holds them (checked once, as they are
built), `electra.tlm.train` runs the two training stages (`electra.tlm.stage1` and `electra.tlm.finetune`),
`electra.tlm.cli` is `electra tlm`.
"""
