"""The export layout: written here and read here, by every command that consumes a pretraining run.

An export is a directory with one Hugging Face-style subdirectory per saved part and a manifest, `export.json`:

    RUN/
      export.json        {"format": 1, "objective": ..., "finetune": "discriminator",
                          "parts": {"discriminator": {"dir": "discriminator", "kind": "ElectraForPreTraining"},
                                    "generator": {"dir": "generator", "kind": "ElectraForMaskedLM"}},
                          "scoring": {"mlm": ["generator"]}}
      discriminator/     config.json, model.safetensors, tokenizer files
      generator/         ...

`finetune` names the part a fine-tuner loads (the discriminator, or the masked LM of the MLM baseline); `scoring`
maps each text-scoring method the run supports to the parts it reads, the default method first. Objectives
declare their parts and scoring methods; consumers ask `read_export` and never probe for directories.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers.utils import logging as hf_logging

from electra.core.errors import UserError
from electra.core.files import read_json_record, read_safetensors, write_json_atomically
from electra.core.run_records import RUN_RECORD
from electra.generators.two_tower import CONFIG_NAME as TWO_TOWER_CONFIG

MANIFEST = "export.json"
FORMAT = 1


@dataclass
class ExportPart:
    """One part an objective saves: its directory name, what it is, and how to write its weights there."""

    name: str
    kind: str  # a transformers class name (ElectraForPreTraining, ElectraForMaskedLM) or "two-tower"
    save: Callable[[Path], None]


@dataclass
class Export:
    """A read manifest: where each part lives and what it is for."""

    root: Path
    objective: str | None
    finetune: str | None
    parts: dict[str, Path]
    kinds: dict[str, str] = field(default_factory=dict)
    scoring: dict[str, list[str]] = field(default_factory=dict)

    def part(self, name: str) -> Path:
        if name not in self.parts:
            raise UserError(
                f"{self.root / MANIFEST}: this export has no {name!r} part (it has {', '.join(self.parts)})."
            )
        return self.parts[name]

    @property
    def finetune_dir(self) -> Path:
        if self.finetune is None:
            raise UserError(
                f"{self.root / MANIFEST}: names no part to fine-tune (objective {self.objective!r} exports "
                f"{', '.join(self.parts)} for scoring: use `electra score` or `rescore`)."
            )
        return self.part(self.finetune)

    @property
    def default_scoring(self) -> str | None:
        return next(iter(self.scoring), None)

    def damaged_parts(self) -> list[str]:
        """The parts that lost their config or weights since they were written (a folder deleted, a copy cut
        short): a consumer that reuses an export it made earlier redoes it, rather than meet the loss later as a
        load error that names no cause."""
        return [
            name
            for name, path in self.parts.items()
            if not ((path / "config.json").is_file() or (path / TWO_TOWER_CONFIG).is_file())
            or not any(path.glob("*.safetensors"))
        ]


def write_export(
    output_dir: str | Path,
    parts: Sequence[ExportPart],
    tokenizer: Any,
    objective: str,
    finetune: str | None,
    scoring: Mapping[str, Sequence[str]],
) -> dict[str, Path]:
    """Write every part (weights, config and the tokenizer) and then the manifest that names them. The caller sets
    the tokenizer's `model_max_length` (the model's positions)."""
    output_dir = Path(output_dir)
    written: dict[str, Path] = {}
    for part in parts:
        directory = output_dir / part.name
        part.save(directory)
        tokenizer.save_pretrained(str(directory))
        written[part.name] = directory
    unknown = [name for names in scoring.values() for name in names if name not in written]
    if (finetune is not None and finetune not in written) or unknown:
        raise ValueError(f"objective {objective!r} names parts it did not save: {[finetune, *unknown]}")
    manifest = {
        "format": FORMAT,
        "objective": objective,
        "finetune": finetune,
        "parts": {part.name: {"dir": part.name, "kind": part.kind} for part in parts},
        "scoring": {method: list(names) for method, names in scoring.items()},
    }
    write_json_atomically(output_dir / MANIFEST, manifest)
    return written


def save_hf_model(model: Any, objective: str, scoring: str | None = None) -> Callable[[Path], None]:
    """A part writer for a `transformers` model: safetensors weights, and in its config the objective and, where
    the part scores text on its own (Electric's discriminator), its `pll` method: a part copied out of its run
    still says how to score with it, without export.json."""

    def save(directory: Path) -> None:
        model.config.electra_objective = objective
        if scoring is not None:
            model.config.electra_scoring = scoring
        with plain_modules(model):
            model.save_pretrained(str(directory), safe_serialization=True)

    return save


@contextlib.contextmanager
def plain_modules(model: Any) -> Iterator[None]:
    """Swap every training-only module that offers `as_plain_module()` (e.g. GDES embeddings) for the plain
    `transformers` module it stands for, for the duration of a save; the training model is restored after."""
    swapped = []
    for name, module in list(model.named_modules()):
        if name and hasattr(module, "as_plain_module"):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            swapped.append((parent, child, module))
            setattr(parent, child, module.as_plain_module())
    try:
        yield
    finally:
        for parent, child, module in swapped:
            setattr(parent, child, module)


def read_export(path: str | Path) -> Export | None:
    """The manifest of `path` when it is an export, or one of an export's parts; None for any other directory."""
    path = Path(path)
    for root in (path, path.parent):
        manifest = root / MANIFEST
        if manifest.is_file():
            return _parse(root, manifest)
    return None


def read_model_config(directory: str | Path) -> dict[str, Any] | None:
    """A checkpoint's config.json as a dict (None where it has none), or one line naming the file when it is
    damaged: not JSON, or not a JSON object. Every command that loads a checkpoint reads it here first, before any
    other work: `transformers` answers a damaged one with an OSError traceback once the data are read."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        config = exc
    if not isinstance(config, dict):
        reason = f"not valid JSON ({config})" if isinstance(config, Exception) else "not a JSON object"
        raise UserError(
            f"{path}: {reason}; it is damaged: copy the checkpoint again, or save it again with "
            "model.save_pretrained(dir)."
        )
    return config


def require_safetensors(directory: str | Path) -> Path:
    """`directory`, when it holds safetensors weights; otherwise one line naming what it holds and the fix.

    Every command that loads a checkpoint's weights asks this first (and, where it can, before any other work):
    pickled weights (`pytorch_model.bin`) are never loaded, since unpickling can run code."""
    directory = Path(directory)
    if not any(directory.glob("*.safetensors")):
        entries = directory.iterdir() if directory.is_dir() else ()
        pickles = sorted(p.name for p in entries if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        held = f"it holds {pickles[0]}, a pickle; " if pickles else ""
        raise UserError(
            f"{directory}: no .safetensors weights ({held}only safetensors are loaded, since unpickling can run "
            "code); convert it where you trust it: model.save_pretrained(dir, safe_serialization=True)."
        )
    return directory


def load_pretrained(model_class: Any, directory: str | Path, complete: bool = False) -> Any:
    """`model_class.from_pretrained(directory)` for a local checkpoint, safetensors only, with one-line errors.

    Pickled weights (`pytorch_model.bin`) are refused rather than loaded: unpickling can run code. Transformers'
    notes about unused pretraining-head weights are silenced (dropping them is the point of loading an encoder).
    `complete` refuses a checkpoint that lacks some of the model's weights, which transformers would initialise at
    random: a model used as it is (a frozen generator) must not run with a random head.
    """
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise UserError(
            f"{directory}/config.json: not found; give a Hugging Face checkpoint directory (e.g. RUN/discriminator) "
            "or a pretraining run directory."
        )
    require_safetensors(directory)
    from safetensors import SafetensorError

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model, info = model_class.from_pretrained(
            str(directory), use_safetensors=True, output_loading_info=True
        )
    except SafetensorError as exc:  # names neither the file nor a cause: a copy cut short, a full disk
        raise UserError(
            f"{directory}: its safetensors weights cannot be read ({exc}); they were cut short or damaged: copy "
            "them again, or export the run again."
        ) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{directory}: could not be loaded as {model_class.__name__} ({exc}).") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = sorted(info.get("missing_keys") or [])
    encoder = [key for key in missing if _is_encoder_weight(model, key)]
    if (
        encoder
    ):  # transformers would start them at random, and a fine-tune would report a random encoder's score
        raise UserError(
            f"{directory}: {len(encoder)} of the encoder's weights are not in its safetensors "
            f"({_some(encoder)}), so {type(model).__name__} would start them at random; give a checkpoint saved "
            "from this architecture (model.save_pretrained(dir)), e.g. RUN/discriminator."
        )
    if complete and missing:
        held = ", ".join(getattr(model.config, "architectures", None) or ["another model"])
        raise UserError(
            f"{directory}: holds {held}, not a complete {type(model).__name__}: {len(missing)} of its weights are "
            f"missing ({_some(missing)}) and would be random; give a checkpoint that holds them (for a masked LM: "
            "a run, RUN/generator, or a transformers ...ForMaskedLM directory)."
        )
    return model


def _is_encoder_weight(model: Any, key: str) -> bool:
    """Whether a parameter name belongs to the pretrained encoder (not a task head, and not BERT's pooler, which
    pretraining checkpoints such as ELECTRA's do not have)."""
    if ".pooler." in f".{key}" or key.startswith("pooler."):
        return False
    if getattr(model, "base_model", model) is model:  # the encoder itself (AutoModel): every weight is its
        return True
    prefix = getattr(model, "base_model_prefix", "")
    return bool(prefix) and key.startswith(f"{prefix}.")


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def fit_length(requested: int, model_config: Any, flag: str = "--max-seq-length") -> int:
    """`requested`, or the model's position limit when it asks for more (said in one line on stderr): a longer
    sequence would index past the position embeddings."""
    limit = int(getattr(model_config, "max_position_embeddings", requested))
    if requested > limit:
        print(
            f"{flag} {requested} is longer than the model takes; using its {limit} positions", file=sys.stderr
        )
        return limit
    return requested


def save_tokenizer(tokenizer: Any, directory: str | Path, model_config: Any) -> None:
    """Save `tokenizer` beside a model, with `model_max_length` set to the model's positions, so `truncation=True`
    and the `transformers` pipelines cut inputs where the model ends."""
    limit = getattr(model_config, "max_position_embeddings", None)
    if limit:
        tokenizer.model_max_length = int(limit)
    tokenizer.save_pretrained(str(directory))


def save_with_head(
    directory: str | Path,
    encoder: Any,
    head_tensors: Mapping[str, Any],
    settings_key: str,
    settings: Mapping[str, Any],
    architecture: str | None = None,
    tokenizer: Any = None,
    config_updates: Mapping[str, Any] | None = None,
) -> None:
    """A fine-tuned model as one Hugging Face directory: config.json (the encoder's, plus the head's settings under
    `settings_key` and `architectures`), and one model.safetensors holding the encoder under its
    `base_model_prefix` (as every `...For<Task>` class stores it) and the head's tensors under their own names.

    `AutoModel.from_pretrained(directory)` then loads the encoder, and a `transformers` class whose head has those
    names loads the whole model (the fine-tuners pick the names so that one exists where it can)."""
    import copy

    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    prefix = encoder.base_model_prefix
    state = {f"{prefix}.{k}": v.detach().cpu().contiguous() for k, v in encoder.state_dict().items()}
    clash = state.keys() & head_tensors.keys()
    if clash:
        raise ValueError(f"head tensor names collide with the encoder's: {sorted(clash)[:3]}")
    state.update({k: v.detach().cpu().contiguous() for k, v in head_tensors.items()})
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(encoder.config)
    setattr(config, settings_key, dict(settings))
    for name, value in (config_updates or {}).items():  # what the task class reads: num_labels, id2label, ...
        setattr(config, name, value)
    config.architectures = [architecture] if architecture else None
    config.save_pretrained(str(directory))
    if tokenizer is not None:
        save_tokenizer(tokenizer, directory, encoder.config)


def read_head(directory: str | Path, settings_key: str, prefixes: Sequence[str]) -> tuple[dict, dict] | None:
    """(settings, head tensors) of a directory `save_with_head` wrote; None when config.json has no such head."""
    directory = Path(directory)
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    settings = config.get(settings_key)
    if not isinstance(settings, dict) or not (directory / "model.safetensors").is_file():
        return None
    tensors = read_safetensors(directory / "model.safetensors")
    return settings, {k: v for k, v in tensors.items() if k.startswith(tuple(prefixes))}


def masked_lm_dir(path: str | Path) -> Path:
    """The masked LM inside `path`: an export's generator (or an MLM run's model), or `path` itself when it is a
    plain `transformers` checkpoint directory."""
    path = Path(path)
    export = read_export(path)
    if export is not None and export.root == path:
        for name in ("generator", "mlm"):
            if export.kinds.get(name, "").endswith("ForMaskedLM"):
                return export.parts[name]
        raise UserError(
            f"{path / MANIFEST}: this export has no masked LM part (it has {', '.join(export.parts)}); give an "
            "ELECTRA or MLM run, or a transformers ...ForMaskedLM directory."
        )
    if not (path / "config.json").is_file():
        raise UserError(
            f"{path}: no config.json or {MANIFEST} here; give a run directory of this library or a transformers "
            "...ForMaskedLM directory."
        )
    return require_safetensors(path)  # before any other work: its weights are what it is for


def refuse_run_folder(path: str | Path, option: str, then: str, strict: bool = False) -> None:
    """A run's folder given where a model is expected, named for what it is before any work: another command's
    output (its run.json names the command) or a pretraining run stopped before its export (its own
    config.json, which is not a model's, and no export.json). Why: else each consumer fails on whatever it
    looks for first ("holds no tokenizer", "config.json: not found", "model_type None"). `strict` takes any
    other run.json without an export as an unexported run too; `then` ends the advice ("fine-tune it")."""
    root = Path(path)
    if not (root / RUN_RECORD).is_file() or (root / MANIFEST).is_file():
        return
    record = read_json_record(root / RUN_RECORD) or {}
    command = record.get("command")
    if isinstance(command, str):
        raise UserError(
            f"{option} {root} is an `electra {command}` output, not a model; give a pretraining run of this library "
            f"(with its {MANIFEST}) or a Hugging Face checkpoint directory."
        )
    if strict or "corpus" in record:  # "corpus": the record a pretraining run writes
        raise UserError(
            f"{option} {root}: a pretraining run of this library with no export yet ({MANIFEST} is written when a "
            f"run ends); finish it with `electra pretrain --output {root} --resume` and its settings, then {then}."
        )


def finetune_dir(path: str | Path) -> Path:
    """The directory a fine-tuner loads: an export's fine-tuning part, or `path` itself (a plain checkpoint).

    A part of an export (RUN/discriminator) is returned as it is: the user chose it.
    """
    path = Path(path)
    if (path / MANIFEST).is_file():
        export = _parse(path, path / MANIFEST)
        return export.finetune_dir
    return path


def _parse(root: Path, manifest: Path) -> Export:
    try:
        data = json.loads(manifest.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{manifest}: not valid JSON ({exc}); re-export the run.") from None
    if not isinstance(data, dict):
        raise UserError(f"{manifest}: must hold a JSON object; re-export the run.")
    problem = _manifest_problem(data)
    if problem:  # not an AttributeError, KeyError or TypeError, nor scoring parts read letter by letter
        raise UserError(f"{manifest}: {problem}; re-export the run.")
    if "parts" in data:
        entries = data["parts"]
        parts = {name: root / entry["dir"] for name, entry in entries.items()}
        kinds = {name: entry.get("kind", "") for name, entry in entries.items()}
    else:  # the first layout: {"objective", "finetune", "dirs": {part: dir}}, no kinds or scoring methods
        parts = {name: root / directory for name, directory in data.get("dirs", {}).items()}
        kinds = {}
    return Export(
        root=root,
        objective=data.get("objective"),
        finetune=data.get("finetune"),
        parts=parts,
        kinds=kinds,
        scoring={method: list(names) for method, names in data.get("scoring", {}).items()},
    )


def _manifest_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with the shape of a manifest's JSON object, or None: each field holds what `_parse` reads."""

    def names(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(name, str) for name in value)

    for key in ("objective", "finetune"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"{key} must be a name, not {data[key]!r}"
    parts = data.get("parts", {})
    if not isinstance(parts, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("dir"), str) for entry in parts.values()
    ):
        return 'parts must map each part to {"dir": ..., "kind": ...}'
    dirs = data.get("dirs", {})
    if not isinstance(dirs, dict) or not all(isinstance(directory, str) for directory in dirs.values()):
        return "dirs must map each part to its folder"
    scoring = data.get("scoring", {})
    if not isinstance(scoring, dict) or not all(names(value) for value in scoring.values()):
        return "scoring must map each method to a list of part names"
    return None
