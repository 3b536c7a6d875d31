"""ISS data selection (Wang et al., 2023, "Farewell to Aimless Large-scale Pretraining", Algorithm 1 and §3.3).

BM25 narrows the general corpus to a candidate pool; a reference model θ̂ (the task trained briefly with the joint
task + LM loss) then scores each candidate mini-batch z by its influence on each task validation mini-batch z':

    I(z, z') = ∇θ L_task(z'; θ̂) · ∇θ L_LM(z; θ̂)

restricted to one layer's parameters θ (the last encoder layer by default): the paper's first-order influence with
the Hessian replaced by the identity, which §3.3 reports keeps the ranking while costing only gradients. A
positive I means a gradient step on z lowers the loss on z'. For every validation batch the most influential
candidate batches are added, round-robin over the validation batches (each one's best, then each one's second
best, ...), until the union holds the requested number of passages; that union is written as a corpus, exactly as
`tlm retrieve` writes BM25's.

Candidate batches keep BM25's retrieval order (passages retrieved by the same query sit together), so a batch is a
topical neighbourhood and its influence is not averaged over unrelated text. LM gradients are taken in eval mode
(no dropout) with the objective's masking seeded per batch, so a selection is reproducible.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import ElectraModel

from electra.core.errors import UserError
from electra.data.packing import PretrainingCollator
from electra.nn.hf_configs import discriminator_hf_config
from electra.tlm.retrieval import retrieve, write_selection
from electra.tlm.saved_index import BM25Index
from electra.tlm.settings import TASK_ONLY, TLMSettings, run_config
from electra.tlm.tartan import flat
from electra.tlm.task_data import encode_task
from electra.tlm.tasks import LabelVocab
from electra.tlm.train import train_joint
from electra.training.pretraining_data import run_vocabulary
from electra.training.run_log import progress_off

logger = logging.getLogger(__name__)


def layer_parameters(encoder: nn.Module, layer: int | str = -1) -> list[nn.Parameter]:
    """The parameters influence is restricted to: encoder layer `layer` (an index, negative from the end), or every
    parameter whose name starts with `layer` when it is a name prefix (e.g. "embeddings", "encoder.layer.3")."""
    named = list(encoder.named_parameters())
    if isinstance(layer, str) and not layer.lstrip("-").isdigit():
        chosen = [p for name, p in named if name.startswith(layer)]
        if not chosen:
            prefixes = sorted({".".join(n.split(".")[:3]) for n, _ in named})
            raise UserError(
                f"--iss-layer {layer!r} names no parameters; some prefixes: {', '.join(prefixes[:8])}."
            )
        return chosen
    layers = encoder.encoder.layer
    index = int(layer)
    if not -len(layers) <= index < len(layers):
        raise UserError(f"--iss-layer {index} is out of range: the encoder has {len(layers)} layers.")
    return list(layers[index].parameters())


def check_layer(settings: TLMSettings, layer: int | str) -> None:
    """Refuse a layer the reference model will not have before BM25 and the reference run (an hour on a real
    corpus), not after them: the encoder is built on the meta device, with no memory and no weights."""
    _, config = run_config(settings)
    with torch.device("meta"):
        encoder = ElectraModel(discriminator_hf_config(config))
    layer_parameters(encoder, layer)


def check_reference(settings: TLMSettings, layer: int | str) -> None:
    """Everything the reference run and the influence pass will refuse, checked before the BM25 index is built (an
    hour on a real corpus): the layer (`check_layer`, which also reads `--init-from`: missing, damaged or pickled
    weights), the task splits (readable, dev labels all seen in train) and a `--vocab` against `--init-from`'s.
    Each of these was found only after the index was built and searched (`--objective none` after the reference
    run too)."""
    if settings.objective == TASK_ONLY:
        raise UserError("ISS needs a reference model with an LM objective (not --objective none).")
    _, config = run_config(settings)
    check_layer(settings, layer)
    train = settings.read_split(settings.task_train)
    dev = settings.read_split(settings.task_dev)
    LabelVocab.from_examples(train, settings.task_train).encode(dev, settings.task_dev)
    run_vocabulary(config, settings.vocab)


def flat_gradient(loss: torch.Tensor, parameters: Sequence[nn.Parameter]) -> torch.Tensor:
    """∇loss over `parameters` as one fp32 vector (zeros where the loss does not reach a parameter)."""
    return flat(torch.autograd.grad(loss, list(parameters), allow_unused=True), parameters)


def influence_scores(task_gradients: torch.Tensor, lm_gradients: torch.Tensor) -> torch.Tensor:
    """[validation batches, candidate batches] dot products of the two gradient sets ([V, P] and [B, P])."""
    return task_gradients @ lm_gradients.T


def select_batches(scores: torch.Tensor, batch_sizes: Sequence[int], target: int) -> list[int]:
    """Candidate batches in the order they join the selection: round r adds each validation batch's r-th most
    influential batch not taken yet, until the chosen batches hold `target` passages (or all are taken)."""
    order = torch.argsort(scores, dim=1, descending=True).tolist()
    chosen: list[int] = []
    taken: set[int] = set()
    passages = 0
    for rank in range(scores.shape[1]):
        for row in order:
            batch = row[rank]
            if batch in taken:
                continue
            taken.add(batch)
            chosen.append(batch)
            passages += batch_sizes[batch]
            if passages >= target:
                return chosen
    return chosen


@dataclass
class ISSSelection:
    passages: list[int]  # indices into the candidate list, in selection order (cut to the target)
    scores: torch.Tensor  # [validation batches, candidate batches]
    batches: list[list[int]]  # candidate indices of every candidate batch
    best_influence: dict[int, float] = field(default_factory=dict)  # candidate -> its batch's highest score
    seconds: float = 0.0


def _batches(count: int, size: int) -> list[list[int]]:
    return [list(range(start, min(start + size, count))) for start in range(0, count, size)]


def iss_select(
    model: nn.Module,
    candidate_rows: Sequence[dict],
    validation_rows: Sequence[dict],
    target: int,
    pad_token_id: int,
    batch_size: int = 16,
    layer: int | str = -1,
    seed: int = 0,
    progress: bool = True,
) -> ISSSelection:
    """Score every candidate batch against every validation batch with `model` (a `electra.tlm.model.TLMModel` with an LM
    objective) and pick `target` passages. Rows are encoded: candidates `input_ids`/`token_type_ids`, validation
    rows also `label`.

    Checked before: the LM objective (`check_reference`, before the index is built), a pool that is not empty
    (`electra.tlm.retrieval.retrieve` refuses a search that found nothing) and `target` from 1 (the command
    line's --select-size) to the pool's size (`select_with_reference`)."""
    from tqdm.auto import tqdm

    start = time.perf_counter()
    device = next(model.parameters()).device
    collate = PretrainingCollator(pad_token_id)
    parameters = layer_parameters(model.classifier.electra, layer)
    was_training = model.training
    model.eval()
    to_device = lambda batch: {k: v.to(device) for k, v in batch.items()}  # noqa: E731

    task_grads = []
    for indices in _batches(len(validation_rows), batch_size):
        rows = [validation_rows[i] for i in indices]
        batch = to_device(collate(rows))
        batch["labels"] = torch.tensor([row["label"] for row in rows], device=device)
        loss, _ = model.task_loss(batch)
        task_grads.append(flat_gradient(loss, parameters))

    candidate_batches = _batches(len(candidate_rows), batch_size)
    lm_grads = []
    for number, indices in enumerate(
        tqdm(candidate_batches, desc="ISS influence", unit="batch", disable=not progress or progress_off())
    ):
        batch = to_device(collate([candidate_rows[i] for i in indices]))
        torch.manual_seed(seed + number)  # the objective's masking (and sampling): the same on every run
        loss = model.lm(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).loss
        lm_grads.append(flat_gradient(loss, parameters))
    model.train(was_training)

    scores = influence_scores(torch.stack(task_grads), torch.stack(lm_grads))
    chosen = select_batches(scores, [len(b) for b in candidate_batches], target)
    passages = [i for batch in chosen for i in candidate_batches[batch]][:target]
    best = scores.max(dim=0).values.tolist()
    best_influence = {i: best[b] for b, batch in enumerate(candidate_batches) for i in batch}
    seconds = time.perf_counter() - start
    logger.info(
        "ISS: %d of %d candidate passages chosen (%d validation x %d candidate batches) in %.1f s",
        len(passages),
        len(candidate_rows),
        len(task_grads),
        len(lm_grads),
        seconds,
    )
    return ISSSelection(passages, scores, candidate_batches, best_influence, seconds)


def select_with_reference(
    index: BM25Index,
    settings: TLMSettings,
    candidates_top_k: int,
    select_size: int,
    out_dir: str | Path,
    layer: int | str = -1,
    batch_size: int = 16,
    long_query_words: int = 64,
    keyword_words: int = 32,
    progress: bool = True,
) -> dict:
    """Algorithm 1 end to end: BM25 pool, reference model (`settings`: a `electra.tlm.settings.TLMSettings` for the brief joint
    run, whose task-dev split is the validation set), influence, and the selected corpus written to `out_dir`.
    Returns the summary written beside it. The caller has run `check_reference(settings, layer)` first, as
    `electra tlm retrieve --select iss` does before the index is built."""
    train_examples = settings.read_split(settings.task_train)
    dev_examples = settings.read_split(settings.task_dev)
    started = time.perf_counter()
    pool = retrieve(
        index,
        [e.text for e in train_examples],
        candidates_top_k,
        long_query_words,
        keyword_words,
        progress,
        settings.task_train,
    )
    bm25_seconds = time.perf_counter() - started
    if select_size > len(pool.doc_ids):
        raise UserError(
            f"--select-size {select_size} is more than the {len(pool.doc_ids)} passages BM25's top-{candidates_top_k} "
            "pool holds; raise --top-k or lower --select-size."
        )
    started = time.perf_counter()
    trained = train_joint(settings)
    reference_seconds = time.perf_counter() - started
    tokenizer, config = trained.tokenizer, trained.config
    labels = LabelVocab(trained.results["labels"])
    encoded = tokenizer(
        [index.get(d) for d in pool.doc_ids], truncation=True, max_length=config.max_seq_length
    )
    candidate_rows = [{"input_ids": ids, "token_type_ids": [0] * len(ids)} for ids in encoded["input_ids"]]
    validation_rows = encode_task(
        dev_examples, labels.encode(dev_examples, settings.task_dev), tokenizer, config.max_seq_length
    )
    selection = iss_select(
        trained.model,
        candidate_rows,
        validation_rows,
        select_size,
        tokenizer.pad_token_id,
        batch_size=batch_size,
        layer=layer,
        seed=settings.seed,
        progress=progress,
    )
    doc_ids = [pool.doc_ids[i] for i in selection.passages]
    summary = {
        "select": "iss",
        "queries": len(train_examples),
        "queries_without_hits": pool.empty_queries,
        "top_k": candidates_top_k,
        "candidates": len(pool.doc_ids),
        "select_size": select_size,
        "validation_batches": int(selection.scores.shape[0]),
        "candidate_batches": int(selection.scores.shape[1]),
        "iss_layer": layer,
        "reference": str(Path(settings.out)),
        "bm25_seconds": round(bm25_seconds, 3),
        "reference_seconds": round(reference_seconds, 3),
        "influence_seconds": round(selection.seconds, 3),
        "selection_seconds": round(bm25_seconds + reference_seconds + selection.seconds, 3),
    }
    extra = {pool.doc_ids[i]: {"influence": selection.best_influence[i]} for i in selection.passages}
    return write_selection(index, pool, doc_ids, out_dir, summary, extra)
