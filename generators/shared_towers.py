"""Cloze log-probabilities of many similar sentences (an n-best list) with each tower run once per distinct context.

The left-to-right tower's state at position t has read x_≤t and nothing else, so sentences that begin with the same
t+1 pieces have the same state there; the right-to-left tower's state at t has read x_≥t at absolute positions, so
sentences of one length that end alike share it too. Hypotheses of one utterance differ in a few words: on the
pocketsphinx 50-best lists of `asr_tts_wiki` the left tower runs on about 40% of the pieces and the right one on
about 60%.

The distinct states form trees (a trie of prefixes; one of suffixes per length). Sentences are inserted in sorted
order, so every subtree is a contiguous run of nodes, and "node j is an ancestor of node i" is
`j <= i < end(j)`. A tree is packed into one row whose attention mask lets each node see its ancestors only, with
its own position id, so one forward of the row computes what a causal forward of every sentence would, up to the
order of floating-point sums. What cannot be shared is the head: position t of a sentence reads the state before
it and the state after it, a pair that two different hypotheses seldom share (2% of the pairs on those lists: only
hypotheses that differ at that one position do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from electra.generators.two_tower import TwoTowerGenerator, as_attention_mask

NODE_BUDGET = 128  # nodes per packed row: attention costs N per node, so rows stay short
NODES_PER_FORWARD = 2048  # rows are stacked up to about this many nodes per tower forward
SENTENCES_PER_CHUNK = 2048  # bounds the memory of the stored states (and is the progress step)


@dataclass
class PackedTrees:
    """Distinct tower contexts of a set of sentences, packed into rows of at most `width` nodes."""

    tokens: torch.Tensor  # [rows, width] token of each node (padding: 0)
    positions: torch.Tensor  # [rows, width] the node's position in its sentences
    depths: torch.Tensor  # [rows, width] distance from its tree's root (padding: -1)
    used: list[int]  # real nodes per row
    node_of: list[list[int]]  # per sentence, the flat node (row * width + column) of each of its positions

    @property
    def width(self) -> int:
        return self.tokens.shape[1]

    def ancestor_mask(self, rows: slice) -> torch.Tensor:
        """[r, width, width] bool: node i may attend to node j iff j is i or an ancestor of i.

        In preorder a subtree ends at the first later node no deeper than its root, so ancestry is a range test."""
        depths = self.depths[rows]
        width = self.width
        idx = torch.arange(width)
        later_not_deeper = (idx[None, :, None] > idx[None, None, :]) & (
            depths[:, :, None] <= depths[:, None, :]
        )
        end = torch.where(later_not_deeper, idx[None, :, None], width).amin(dim=1)  # [r, width] subtree ends
        mask = (idx[None, None, :] <= idx[None, :, None]) & (idx[None, :, None] < end[:, None, :])
        return mask | torch.eye(width, dtype=torch.bool)[None]  # padding rows see themselves (no NaN rows)


def pack_trees(
    sequences: Sequence[Sequence[int]], reverse: bool, node_budget: int = NODE_BUDGET
) -> PackedTrees:
    """Prefix trees (`reverse=False`: what the left tower reads) or suffix trees per length (`reverse=True`)."""
    sequences = [tuple(s) for s in sequences]
    width = max([node_budget, *(len(s) for s in sequences)])
    if reverse:
        order = sorted(range(len(sequences)), key=lambda i: (len(sequences[i]), sequences[i][::-1]))
    else:
        order = sorted(range(len(sequences)), key=sequences.__getitem__)
    rows: list[tuple[list[int], list[int], list[int]]] = []
    node_of: list[list[int]] = [[] for _ in sequences]
    children: dict[tuple, int] = {}  # (parent node or root key, token) -> node, within the current row
    tokens: list[int] = []
    positions: list[int] = []
    depths: list[int] = []

    def flush() -> None:
        if tokens:
            rows.append((tokens.copy(), positions.copy(), depths.copy()))
        children.clear()
        tokens.clear()
        positions.clear()
        depths.clear()

    for i in order:
        sequence = sequences[i]
        length = len(sequence)
        walk = sequence[::-1] if reverse else sequence
        root: tuple = ("root", length) if reverse else ("root",)
        nodes: list[int] = []
        parent = root
        for token in walk:  # the part of this sentence the row already holds
            node = children.get((parent, token))
            if node is None:
                break
            nodes.append(node)
            parent = node
        if len(tokens) + length - len(nodes) > width:
            flush()
            nodes, parent = [], root
        for depth in range(len(nodes), length):  # past the first new node, every node is new
            node = len(tokens)
            children[(parent, walk[depth])] = node
            tokens.append(walk[depth])
            positions.append(length - 1 - depth if reverse else depth)
            depths.append(depth)
            nodes.append(node)
            parent = node
        base = len(rows) * width
        flat = [base + node for node in nodes]
        node_of[i] = flat[::-1] if reverse else flat
    flush()
    packed = torch.zeros((len(rows), width), dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    dep = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, (row_tokens, row_positions, row_depths) in enumerate(rows):
        n = len(row_tokens)
        packed[r, :n] = torch.tensor(row_tokens)
        pos[r, :n] = torch.tensor(row_positions)
        dep[r, :n] = torch.tensor(row_depths)
    return PackedTrees(packed, pos, dep, [len(r[0]) for r in rows], node_of)


def tower_states(
    generator: TwoTowerGenerator,
    trees: PackedTrees,
    reverse: bool,
    nodes_per_forward: int = NODES_PER_FORWARD,
) -> torch.Tensor:
    """[rows * width + 1, hidden]: every node's tower state, then a zero row (the missing side at an end)."""
    tower = generator.rtl if reverse else generator.ltr
    device = generator.word_embeddings.weight.device
    per_forward = max(1, nodes_per_forward // trees.width)
    states = []
    for start in range(0, trees.tokens.shape[0], per_forward):
        rows = slice(start, start + per_forward)
        tokens = trees.tokens[rows].to(device)
        hidden = generator.embeddings(
            input_ids=tokens,
            token_type_ids=torch.zeros_like(tokens),
            position_ids=trees.positions[rows].to(device),
        )
        if hasattr(generator, "embeddings_project"):
            hidden = generator.embeddings_project(hidden)
        mask = as_attention_mask(
            trees.ancestor_mask(rows)[:, None].to(device),
            generator.hf_config._attn_implementation,
            hidden.dtype,
        )
        states.append(tower(hidden, attention_mask=mask).last_hidden_state.reshape(-1, hidden.shape[-1]))
    width = generator.hf_config.hidden_size
    states.append(torch.zeros((1, width), dtype=states[0].dtype if states else torch.float32, device=device))
    return torch.cat(states)


def cloze_log_q(
    generator: TwoTowerGenerator,
    sequences: Sequence[Sequence[int]],
    positions: Sequence[Sequence[int]],
    node_budget: int = NODE_BUDGET,
    rows_per_head: int = 2048,
    disable_progress: bool | None = True,
) -> list[torch.Tensor]:
    """log q(x_t | x_\\t) at `positions[i]` of every sentence `sequences[i]` (ids with their special tokens).

    Equal, up to float summation order, to running `generator.contexts` on each sentence alone.
    `disable_progress` is tqdm's `disable` (None: a bar on terminals only)."""
    out: list[torch.Tensor] = [torch.zeros(0) for _ in sequences]
    order = sorted(range(len(sequences)), key=lambda i: tuple(sequences[i]))
    bar = tqdm(total=len(order), desc="cloze", unit="sentence", disable=disable_progress, leave=False)
    for start in range(0, len(order), SENTENCES_PER_CHUNK):
        chunk = order[start : start + SENTENCES_PER_CHUNK]
        rows = [sequences[i] for i in chunk]
        left_trees, right_trees = pack_trees(rows, False, node_budget), pack_trees(rows, True, node_budget)
        left = tower_states(generator, left_trees, reverse=False)
        right = tower_states(generator, right_trees, reverse=True)
        none_left, none_right = left.shape[0] - 1, right.shape[0] - 1
        left_index, right_index, targets, owner = [], [], [], []
        for k, i in enumerate(chunk):
            sequence, lefts, rights = sequences[i], left_trees.node_of[k], right_trees.node_of[k]
            sources = right_sources_of(generator, sequence)
            for t in positions[i]:
                left_index.append(lefts[t - 1] if t > 0 else none_left)
                right_index.append(rights[sources[t]] if sources[t] < len(sequence) else none_right)
                targets.append(sequence[t])
            owner.append(len(positions[i]))
        device = left.device
        left_index_t, right_index_t = (
            torch.tensor(left_index, device=device),
            torch.tensor(right_index, device=device),
        )
        targets_t = torch.tensor(targets, dtype=torch.long, device=device)
        values = []
        for begin in range(0, len(targets), rows_per_head):
            part = slice(begin, begin + rows_per_head)
            contexts = generator.predictions(
                torch.cat([left[left_index_t[part]], right[right_index_t[part]]], -1)
            )
            values.append(generator.log_q(contexts, targets_t[part]))
        flat = torch.cat(values).cpu() if values else torch.zeros(0)
        for i, piece in zip(chunk, torch.split(flat, owner)):
            out[i] = piece
        bar.update(len(chunk))
    bar.close()
    return out


def right_sources_of(generator: TwoTowerGenerator, sequence: Sequence[int]) -> list[int]:
    """Per position, the position whose right-tower state its prediction reads (`TwoTowerGenerator.right_sources`)."""
    if generator.cloze_span == "piece":
        return list(range(1, len(sequence) + 1))
    ids = torch.tensor(sequence, dtype=torch.long, device=generator.word_starts.device)
    return generator.right_sources(ids).tolist()


def shared_fraction(
    sequences: Sequence[Sequence[int]], node_budget: int = NODE_BUDGET
) -> tuple[float, float]:
    """Nodes each tower runs on per piece (1.0: nothing shared): what the sharing saves on a given list."""
    total = max(1, sum(len(s) for s in sequences))
    return tuple(sum(pack_trees(sequences, r, node_budget).used) / total for r in (False, True))  # type: ignore[return-value]
