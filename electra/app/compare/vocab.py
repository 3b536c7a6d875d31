"""The one vocabulary every arm of a comparison reads (OUT/tokenizer): trained once on the corpus, or given.

Arms share it so that their token ids, cached examples and FLOPs per step are comparable; its size sets the cost of
a step, and so the steps each budget buys.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from electra.app.compare.layout import tokenizer_cache
from electra.app.compare.settings import CompareSettings
from electra.core.config import PretrainConfig
from electra.data.tokenization import load_or_train_tokenizer
from electra.export.layout import masked_lm_dir


def prepare_tokenizer(
    settings: CompareSettings,
    config: PretrainConfig,
    check: Callable[[int], Any] | None = None,
    replace: bool = False,
) -> Path:
    """Train (or reuse) the vocabulary once; every arm then loads it from OUT/tokenizer. `--vocab` wins, then a
    frozen generator's vocabulary (its token ids must mean what they meant when it was trained). A new vocabulary
    (or, with `replace`, one that takes the place of OUT/tokenizer) is given to `check` (its size) before
    OUT/tokenizer is written: a refusal there leaves only the tokenizer cache, keyed by the corpus."""
    directory = settings.out / "tokenizer"
    if replace or not (directory / "tokenizer.json").is_file():
        tokenizer = given_tokenizer(settings, config) or load_or_train_tokenizer(
            None,
            settings.corpus,
            config.tokenizer_vocab_size,
            config.lowercase,
            tokenizer_cache(settings),
            text_form=config.text_form,
        )
        if check is not None:
            check(len(tokenizer))
        staging = settings.out / ".tokenizer.partial"
        shutil.rmtree(staging, ignore_errors=True)
        tokenizer.save_pretrained(str(staging))
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(staging, directory)
    return directory


def given_tokenizer(settings: CompareSettings, config: PretrainConfig) -> Any | None:
    """The vocabulary every arm must use when one is given (`--vocab`, else a frozen generator's), loaded (cheap,
    writes nothing); None when it is to be trained on the corpus."""
    frozen = [
        dict(arm.overrides)["generator_from"]
        for arm in settings.arms
        if "generator_from" in dict(arm.overrides)
    ]
    vocab = settings.vocab or (str(masked_lm_dir(frozen[0])) if frozen else None)
    if vocab is None:
        return None
    return load_or_train_tokenizer(
        vocab, None, config.tokenizer_vocab_size, config.lowercase, text_form=config.text_form
    )
