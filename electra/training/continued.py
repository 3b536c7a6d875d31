"""Continued pretraining (`electra pretrain --init-from DIR`): start any objective from an existing checkpoint.

DAPT and TAPT (continued pretraining on a domain corpus or on a task's own texts) are the most requested thing in
the ELECTRA ports' issue trackers. DIR is an export of this library or a plain `transformers` ELECTRA directory
(a discriminator alone is enough). The run takes DIR's shape and tokenizer (token ids must keep their meaning),
loads the kept model's encoder (and its head when the objective's head has the same layout), loads the generator
when DIR has one of the same kind (otherwise a fresh one at the configured width, sharing the loaded embeddings as
configured), and starts a fresh optimizer and schedule.

DIR may also be a `transformers` BERT directory (BertModel, BertForPreTraining, BertForMaskedLM): continuing an
existing BERT with ELECTRA's objective is what users most often ask for, and BERT's encoder is an ELECTRA
discriminator's whose embeddings are as wide as its hidden states (same tensors under `bert.` instead of
`electra.`, no projection). What differs is said here, once: `_as_electra` (the config), `ENCODER_PREFIXES`,
`BERT_MLM_HEAD` and `_load` (the tensor names). BERT's masked-LM head continues `--objective mlm`, whose model has
the same head; BERT's pooler and next-sentence head have no counterpart and are dropped.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from transformers import BertConfig

from electra.core.config import SIZES, PretrainConfig, with_frozen_generator
from electra.core.config_files import load_config_file
from electra.core.errors import ElectraWarning, UserError
from electra.core.files import (
    SHARD_INDEX,
    check_safetensors,
    model_weights_file,
    read_model_weights,
    safetensors_shards,
)
from electra.core.settings import coerce_value, spelled, spelling
from electra.data.tokenization import load_saved_tokenizer, lowercases, states_casing
from electra.export.layout import (
    finetune_dir,
    read_export,
    read_model_config,
    refuse_run_folder,
    require_safetensors,
)

cfg = spelling(PretrainConfig)  # --init-from on the command line, init_from in Python

# The model types --init-from continues, and the prefix under which each one's pretraining and task classes keep
# the encoder (their base_model_prefix): a BERT checkpoint's encoder tensors load under ELECTRA's names once this
# prefix is renamed. A bare encoder (ElectraModel, BertModel) saves them with no prefix at all.
ENCODER_PREFIXES = {"electra": "electra.", "bert": "bert."}

# BERT's masked-LM head (BertForMaskedLM's and BertForPreTraining's `cls.predictions.*`) under the names of
# ElectraForMaskedLM's (the model `--objective mlm` keeps), which computes the same: a dense layer as wide as the
# hidden states (embedding_size = hidden_size for a BERT), gelu (others are refused), LayerNorm, then
# the word embeddings, tied, plus a bias. Other objectives' models have no such head and leave these tensors out.
BERT_MLM_HEAD = {
    "cls.predictions.transform.dense.": "generator_predictions.dense.",
    "cls.predictions.transform.LayerNorm.": "generator_predictions.LayerNorm.",
    "cls.predictions.bias": "generator_lm_head.bias",
}

# Fields of a transformers ElectraConfig that fix the kept model's shape.
SHAPE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "embedding_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
)


def _hf_config(directory: Path) -> dict[str, Any]:
    """DIR's config.json as a dict, or one line naming the file and what to give instead (a run's folder that
    was never exported holds the run's own config.json, not a model's)."""
    # checked here, not only with the flags: it may come from --set init_from=, a config file or Python
    if not directory.is_dir():
        raise UserError(
            f"{cfg('init_from')} {directory}: not a directory; give a run of this library or a transformers ELECTRA or "
            "BERT directory."
        )
    refuse_run_folder(directory, cfg("init_from"), "continue from it", strict=True)
    path = directory / "config.json"
    if not path.is_file():
        raise UserError(
            f"{path}: not found; {cfg('init_from')} takes a run of this library or a transformers ELECTRA or BERT "
            "directory."
        )
    return read_model_config(directory)


def kept_dir(directory: str | Path) -> Path:
    """The checkpoint whose encoder a continued run starts from: an export's fine-tuning part, or DIR itself.

    Its weights are required to be safetensors and their header to be intact here, before the corpus is read: a
    pickle-only or cut-short checkpoint is refused at once, not after the examples are built."""
    path = finetune_dir(directory)
    config = _hf_config(path)
    if config.get("model_type") not in ENCODER_PREFIXES:
        raise UserError(
            f"{path}: model_type {config.get('model_type')!r}; {cfg('init_from')} continues ELECTRA and BERT checkpoints "
            "(model_type electra or bert). Fine-tune it as it is with `electra glue` or `electra squad`."
        )
    weights = model_weights_file(path)
    if weights is not None and weights.name == SHARD_INDEX:
        safetensors_shards(weights)  # a shard missing, cut short, or without the tensors the index puts there
    for weights in sorted(require_safetensors(path).glob("*.safetensors")):
        check_safetensors(weights)
    return path


def kept_config(directory: str | Path) -> dict[str, Any]:
    """The config.json of DIR's kept model in ELECTRA's fields (`_as_electra`): what the run's shape is read from."""
    return _as_electra(_hf_config(kept_dir(directory)))


def _as_electra(config: dict[str, Any]) -> dict[str, Any]:
    """A BERT config.json as the ElectraConfig of the same encoder: its embeddings are as wide as its hidden states
    (ELECTRA then builds no projection), and a field it leaves out has BERT's default, not ELECTRA's or a preset's
    (BERT-Base's width is 768 where ELECTRA's default is 256). An ELECTRA config is returned as it is."""
    if config.get("model_type") != "bert":
        return config
    bert = {**BertConfig().to_dict(), **config}
    return {**bert, "embedding_size": bert["hidden_size"]}


def _refuse_unrepresentable(directory: str | Path, kept: dict[str, Any]) -> None:
    """One line, before the corpus is read, for a checkpoint whose weights this library's layers would compute
    something else with: the run builds ELECTRA's layers as `electra.nn.hf_configs` does (gelu, absolute positions,
    bidirectional attention), and transformers 5 itself no longer reads a relative position type (it would drop
    those weights silently)."""
    activation = kept.get("hidden_act", "gelu")
    if activation != "gelu":
        raise UserError(
            f"{cfg('init_from')} {directory}: its hidden_act is {activation!r}; continued pretraining builds ELECTRA's "
            "gelu layers, in which these weights would compute something else. Fine-tune it as it is with "
            "`electra glue` or `electra squad`, which load its own config."
        )
    positions = kept.get("position_embedding_type") or "absolute"
    if positions != "absolute":
        raise UserError(
            f"{cfg('init_from')} {directory}: its position_embedding_type is {positions!r}; continued pretraining builds "
            "absolute position embeddings only, so its relative-position weights would be dropped and its attention "
            "would compute something else; give a checkpoint with absolute positions."
        )
    if kept.get("is_decoder"):
        raise UserError(
            f"{cfg('init_from')} {directory}: it is a decoder (is_decoder true: each token attends to the ones before it "
            "only); continued pretraining trains a bidirectional encoder, in which these weights would compute "
            "something else; give an encoder checkpoint (e.g. BertModel, BertForPreTraining or BertForMaskedLM)."
        )


# The fields a size preset is recognised by: a checkpoint with all of them equal to a preset's is of that size.
PRESET_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "embedding_size",
)


def preset_of(directory: str | Path) -> str | None:
    """The size preset (`config.SIZES`) whose shape DIR's kept model has, or None when it has none of them.

    A continued run takes its recipe (learning rate, batch, warmup, generator width) from a preset; without
    `--size`, the one the checkpoint was built as is the one it should be trained with."""
    kept = kept_config(directory)
    for name, preset in SIZES.items():
        if all(kept.get(field) == preset.get(field) for field in PRESET_FIELDS):
            return name
    return None


def checkpoint_shape(directory: str | Path, overrides: dict[str, Any], size: str = "tiny") -> dict[str, Any]:
    """`overrides` plus the shape of DIR's model (and of its generator, when it has a masked-LM one) and whether
    its tokenizer lowercases; a value the user set differently is refused, since those weights could not load (or,
    for `lowercase`, the run's config would describe another tokenizer than the one it uses: the checkpoint's
    tokenizer is used as saved, e.g. a cased BERT's stays cased; one whose folder does not say takes the setting,
    `_unstated_casing`). The `size` preset's sequence length is cut to the checkpoint's positions when it has
    fewer."""
    kept = kept_config(directory)
    _refuse_unrepresentable(directory, kept)
    shape: dict[str, Any] = {k: kept[k] for k in SHAPE_FIELDS if k in kept}
    preset_length = SIZES.get(size, {}).get("max_seq_length", PretrainConfig.max_seq_length)
    positions = int(kept.get("max_position_embeddings", preset_length))
    if "max_seq_length" not in overrides and preset_length > positions:
        shape["max_seq_length"] = positions
    export = read_export(directory)
    if export is not None and export.kinds.get("generator", "").endswith("ForMaskedLM"):
        generator = _hf_config(export.parts["generator"])
        shape["generator_hidden_multiplier"] = generator["hidden_size"] / kept["hidden_size"]
        if generator["num_hidden_layers"] != kept["num_hidden_layers"]:
            shape["generator_num_layers"] = generator["num_hidden_layers"]
    tokenizer = load_saved_tokenizer(init_vocabulary(directory), _unstated_casing(directory, overrides))
    # text_form=words puts its own, lowercasing normalizer into the checkpoint's tokenizer (apply_text_form)
    shape["lowercase"] = lowercases(tokenizer) or overrides.get("text_form") == "words"
    for key, value in shape.items():
        # "--set hidden_size=32.0" or "lowercase=yes" mean what the checkpoint has: compared as the field's type
        if key in overrides and coerce_value(key, overrides[key], type(value).__name__) != value:
            raise UserError(
                f"{cfg('init_from')} {directory}: its {key} is {value}, not {overrides[key]}; drop that setting (the "
                "checkpoint's shape and tokenizer are used)."
            )
    vocabulary = {"tokenizer_vocab_size": _vocabulary_size(directory, kept, len(tokenizer))}
    return {**overrides, **shape, **vocabulary}  # the checkpoint's vocabulary is the run's, whatever was set


def _unstated_casing(directory: str | Path, overrides: dict[str, Any]) -> bool | None:
    """The casing of DIR's tokenizer where the folder does not state one (`states_casing`: a vocab.txt alone, as
    BERT's original releases, cased and uncased alike, were): the `lowercase` setting when given, else lowercasing
    (what transformers assumes), said in one line with how to state it. None where the folder states it (a setting
    that differs is then refused)."""
    folder = init_vocabulary(directory)
    if states_casing(folder):
        return None
    if "lowercase" in overrides:
        return coerce_value("lowercase", overrides["lowercase"], "bool")
    if overrides.get("text_form") == "words":  # its own normalizer replaces the tokenizer's, and lowercases
        return True
    warnings.warn(
        f"{folder}: its tokenizer does not say whether it lowercases (no tokenizer_config.json "
        "with do_lower_case), so it is taken as lowercasing; for a cased vocabulary pass "
        "--set lowercase=false (lowercase=true silences this).",
        ElectraWarning,
        stacklevel=2,
    )
    return True


def _vocabulary_size(directory: str | Path, kept: dict[str, Any], pieces: int) -> int:
    """The size of DIR's tokenizer (`pieces`), which must be its embeddings' row count: the run builds its model at
    the tokenizer's size, so any other count could not load the embeddings, and a tokenizer larger than them would
    hand out ids past their last row. Checked here, before the corpus is read."""
    rows = kept.get("vocab_size", pieces)
    if rows != pieces:
        fix = (
            "give the tokenizer it was trained with"
            if pieces > rows
            else "give it the tokenizer's size first: model.resize_token_embeddings(len(tokenizer)), then "
            "model.save_pretrained(dir)"
        )
        raise UserError(
            f"{cfg('init_from')} {directory}: its tokenizer has {pieces:,} pieces but its config.json says vocab_size "
            f"{rows:,} (the embeddings' rows); continued pretraining needs the two equal: {fix}."
        )
    return pieces


def continued_settings(
    directory: str | Path, overrides: dict[str, Any], size: str | None = None
) -> tuple[str, dict[str, Any], str | None]:
    """(size, overrides, note) of a run continued from DIR, for `electra pretrain --init-from` and
    `electra.build_config(overrides={"init_from": DIR})` alike: `size` or, when None, the preset DIR was built as
    (tiny, with the returned note, for a shape no preset has), and `overrides` with `init_from` and DIR's shape and
    vocabulary size (`checkpoint_shape`)."""
    note = None
    if size is None:
        size = preset_of(directory)
        if size is None:
            size = "tiny"
            note = (
                f"{cfg('init_from')} {directory}: its shape is no size preset's, so the tiny recipe (learning rate, batch, "
                f"warmup) trains it; pass {spelled(None, 'size', '--size')} to choose another."
            )
    return size, checkpoint_shape(directory, {**overrides, "init_from": str(directory)}, size), note


class RunSettings(NamedTuple):
    size: str
    overrides: dict[str, Any]
    from_file: dict[str, Any]  # the config file's values, as given
    note: str | None  # what to tell the user (a checkpoint of no preset's shape)


def run_settings(
    size: str | None,
    config_file: str | None,
    overrides: dict[str, Any],
    init_from: str | Path | None = None,
) -> RunSettings:
    """The size and overrides a pretraining config is built from, for `electra pretrain` and `electra flops`
    alike (the count must describe the run): a frozen generator's sharing, and, when the run continues a
    checkpoint however that is given (`init_from`, `--set init_from=`, the config file's), its shape, vocabulary
    and preset (`continued_settings`); the config file's shape fields are checked against the checkpoint too, not
    silently replaced by its shape. `size` None is the checkpoint's preset, or tiny."""
    overrides = with_frozen_generator(overrides)
    from_file = load_config_file(config_file) if config_file else {}
    init_from = init_from or overrides.get("init_from") or from_file.get("init_from")
    note = None
    if init_from:
        size, overrides, note = continued_settings(init_from, {**from_file, **overrides}, size)
    return RunSettings(size or "tiny", overrides, from_file, note)


def init_vocabulary(directory: str | Path) -> Path:
    """The tokenizer directory of DIR's kept model."""
    path = kept_dir(directory)
    if not ((path / "tokenizer.json").is_file() or (path / "vocab.txt").is_file()):
        raise UserError(
            f"{path}: holds no tokenizer (tokenizer.json or vocab.txt); add the one it was trained with."
        )
    return path


def _load(
    module: nn.Module, directory: Path, required_prefix: str, saved_prefix: str | None = None
) -> list[str]:
    """Load DIR's safetensors weights into `module`: every tensor under `required_prefix` must be there with its
    shape; other tensors (a head) load when they match and stay fresh otherwise. Returns the fresh ones.

    `saved_prefix` is what DIR keeps those tensors under when it differs (a BERT checkpoint's `bert.`)."""
    weights = model_weights_file(require_safetensors(directory))
    if weights is None:
        raise UserError(
            f"{directory}: no model.safetensors or {SHARD_INDEX} (only safetensors are loaded, since unpickling "
            "can run code); save it again with model.save_pretrained(dir)."
        )
    # checkpoints converted from TensorFlow name LayerNorm's tensors gamma and beta; from_pretrained renames them
    state = {
        key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): value
        for key, value in read_model_weights(weights).items()
    }
    if saved_prefix == ENCODER_PREFIXES["bert"]:
        state = _with_bert_mlm_head(state)
    target = module.state_dict()
    saved_prefix = saved_prefix or required_prefix
    if required_prefix and any(k.startswith(saved_prefix) for k in state):
        state = {
            required_prefix + k[len(saved_prefix) :] if k.startswith(saved_prefix) else k: v
            for k, v in state.items()
        }
    elif required_prefix:
        # a bare encoder (transformers' ElectraModel, BertModel) saves its tensors without the prefix the
        # pretraining classes keep them under; from_pretrained adds it, and so does this
        state = {f"{required_prefix}{k}": v for k, v in state.items()}
    usable = {k: v for k, v in state.items() if k in target and target[k].shape == v.shape}
    tied = {target[k].data_ptr() for k in usable}  # a tied tensor (output projection) loads with its twin

    def unloaded(key: str) -> bool:
        buffer = key.endswith(("position_ids", "token_type_ids"))
        return key not in usable and not buffer and target[key].data_ptr() not in tied

    missing = [k for k in target if k.startswith(required_prefix) and unloaded(k)]
    if missing:
        wrong = [k for k in missing if k in state]
        detail = (
            f"{wrong[0]} is {list(state[wrong[0]].shape)} there, {list(target[wrong[0]].shape)} in the model"
            if wrong
            else f"{missing[0]} is not in {weights.name}"
        )
        raise UserError(
            f"{directory}: its weights do not fit the model its config.json describes ({detail}); give a "
            "checkpoint whose config and weights were saved together (model.save_pretrained(dir))."
        )
    module.load_state_dict(usable, strict=False)
    return sorted(k for k in target if unloaded(k))


def _with_bert_mlm_head(state: dict[str, Any]) -> dict[str, Any]:
    """A BERT checkpoint's tensors with its masked-LM head renamed (`BERT_MLM_HEAD`). A head with an output matrix
    of its own (saved with tie_word_embeddings false, other than the word embeddings) computes something the tied
    head cannot: it is left out, and the head starts fresh, as for a checkpoint that has none."""
    decoder = state.get("cls.predictions.decoder.weight")
    embeddings = state.get(f"{ENCODER_PREFIXES['bert']}embeddings.word_embeddings.weight")
    if decoder is not None and (embeddings is None or not torch.equal(decoder, embeddings)):
        return state
    if "cls.predictions.bias" not in state and "cls.predictions.decoder.bias" in state:  # one tensor, tied
        state = {**state, "cls.predictions.bias": state["cls.predictions.decoder.bias"]}
    renamed = {}
    for key, value in state.items():
        old = next((old for old in BERT_MLM_HEAD if key.startswith(old)), None)
        renamed[BERT_MLM_HEAD[old] + key[len(old) :] if old else key] = value
    return renamed


def load_initial_weights(model: Any, directory: str | Path) -> dict[str, list[str]]:
    """Start `model` (a PretrainingModel) from DIR; returns, per part, the tensors that stayed freshly initialised."""
    objective = model.objective  # what cannot be continued (gdes, a cloze run) was refused by its config
    kept = kept_dir(directory)
    saved_prefix = ENCODER_PREFIXES[_hf_config(kept)["model_type"]]
    fresh = {"kept": _load(objective.kept_module(model), kept, "electra.", saved_prefix)}
    generator = objective.generator_module(model)
    export = read_export(directory)
    if generator is not None and export is not None and "generator" in export.parts:
        kinds_match = export.kinds.get("generator") == objective.generator_kind(model)
        if kinds_match:
            fresh["generator"] = _load(generator, export.parts["generator"], "")
    return fresh
