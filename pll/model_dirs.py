"""What a model directory offers for PLL scoring, and the scorer's --method and --device, checked before any model
loads: a run's export answers from its manifest (`export.json`), any other directory from what it holds (an
ELECTRA discriminator that records its scoring method, a two-tower generator, a masked LM). A path that is a file,
a directory that is not there or offers no method, a method it cannot serve, a tokenizer that is missing, or a
device this machine lacks is one `UserError` naming the path or flag and the fix. `electra.pll.scoring.load_scorer`
asks here first and builds the scorer from what passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from electra.core.errors import UserError
from electra.core.settings import spelled, spelling
from electra.data.tokenization import holds_tokenizer
from electra.export.layout import read_export, read_model_config, refuse_run_folder
from electra.generators.two_tower import is_two_tower_dir
from electra.pll.methods import METHOD_PARTS, METHODS, ScorerChoice

scorer = spelling(ScorerChoice)  # --device on the command line, device in Python


def _is_masked_lm(config: dict[str, Any] | None) -> bool:
    return bool(config) and any(a.endswith("ForMaskedLM") for a in config.get("architectures") or [])


@dataclass
class ModelLayout:
    """What a model directory offers for scoring: method -> the directories it reads (default method first)."""

    root: Path
    objective: str | None
    methods: dict[str, list[Path]]
    tokenizer_dirs: list[Path] = field(default_factory=list)  # where else a tokenizer may be saved


def inspect_model_dir(path: str | Path) -> ModelLayout:
    """An export (or one of its parts) answers from its manifest; any other directory from what it holds."""
    root = Path(path)
    # a run's export.json, a weights file: "does not exist" had sent the user looking for a typo
    if root.is_file():
        raise UserError(
            f"{root}: is a file, not a model directory; give the folder that holds it ({root.parent})."
        )
    if not root.is_dir():
        raise UserError(f"{root}: model directory does not exist.")
    export = read_export(root)
    if export is not None:
        methods = {m: [export.part(name) for name in names] for m, names in export.scoring.items()}
        if export.root != root:  # a part was named: the methods that read it, the manifest's order kept
            methods = {m: dirs for m, dirs in methods.items() if root in dirs}
        return ModelLayout(root, export.objective, methods, list(export.parts.values()))
    refuse_run_folder(
        root, spelled(None, "model_dir", "--model"), "score with it"
    )  # not "nothing here can score PLL"
    config = read_model_config(root)
    objective = None
    methods: dict[str, list[Path]] = {}
    if config and "ElectraForPreTraining" in (config.get("architectures") or []):
        objective = config.get("electra_objective", "electra")
        # the part's own record (`electra.export.layout.save_hf_model`); Electric's exports from before it existed
        # carry the objective alone
        method = config.get("electra_scoring") or ("electric" if objective == "electric" else None)
        if method is not None:  # e.g. Electric: its head's output is -E, so it scores on its own
            methods[method] = [root]
    if is_two_tower_dir(root):
        methods["cloze"] = [root]
    if _is_masked_lm(config):
        methods["mlm"] = [root]
    return ModelLayout(root, objective, methods)


def resolve_method(layout: ModelLayout, method: str) -> str:
    """`auto` -> the directory's default method; any other method must be one the directory supports."""
    if method not in METHODS:
        raise UserError(f"unknown scoring method {method!r}; choose one of {', '.join(METHODS)}.")
    offered = ", ".join(layout.methods) or "none"
    if method == "auto":
        if layout.methods:
            return next(iter(layout.methods))
        raise UserError(
            f"{layout.root}: nothing here can score PLL: it needs an Electric discriminator, an ELECTRA-TT "
            "discriminator with its two-tower generator, a two-tower generator, or a masked LM (an ...ForMaskedLM "
            "checkpoint)."
        )
    if method not in layout.methods:
        needs = " and ".join(METHOD_PARTS[method])
        hint = ""
        if method in ("electric", "electra-tt") and layout.objective not in (None, method):
            hint = f" (its discriminator was trained as {layout.objective!r}, so its output is not what {method} reads)"
        raise UserError(
            f"{layout.root}: cannot score with {scorer('method')} {method}: it needs {needs}{hint}; this "
            f"directory offers: {offered}. Try {scorer('method')} auto."
        )
    return method


def load_tokenizer(candidates: Sequence[Path]) -> Any:
    for directory in candidates:  # a tokenizer_config.json alone would load as an empty tokenizer
        if directory and holds_tokenizer(directory):
            return AutoTokenizer.from_pretrained(str(directory))
    names = ", ".join(str(d) for d in candidates if d)
    raise UserError(
        f"no tokenizer (tokenizer.json or vocab.txt) in {names}; save the tokenizer next to the model."
    )


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_device(name)
    return torch.device(name)


def check_device(name: str) -> None:
    """--device, checked before any file is read or model loaded: a misspelt or absent device was a torch
    traceback (`Expected one of cpu, cuda, ...`, `Torch not compiled with CUDA enabled`) once the model loaded."""
    if name == "auto":
        return
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(
            f"{scorer('device')} {name!r} is not a device; give auto, cpu, cuda or cuda:N."
        ) from None
    if device.type == "cpu":
        return
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            raise UserError(
                f"{scorer('device')} {name}: this machine has no CUDA GPU that torch can use; use "
                f"{scorer('device')} cpu."
            )
        if device.index is not None and device.index >= count:
            raise UserError(
                f"{scorer('device')} {name}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}."
            )
        return
    try:  # mps, xpu, ...: whether torch can place a tensor there (its own message runs to a page)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError):
        raise UserError(
            f"{scorer('device')} {name}: torch cannot use it on this machine; use {scorer('device')} cpu."
        ) from None
