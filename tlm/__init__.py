"""TLM (Yao et al., 2022): retrieve a task-relevant slice of a general corpus with BM25, then train the task and a
language-modelling objective (`mlm`, `electra` or `electric`) jointly from scratch.

`tlm.retrieval` builds and queries the index, `tlm.tasks` reads labelled task files, `tlm.interleave` pairs task
batches with ρ1 retrieved batches, `tlm.train` runs the two training stages, `tlm.cli` is `electra tlm`.
"""

__electra_package__ = (
    True  # electra.siblings tells this copy from another distribution's package of the same name
)
