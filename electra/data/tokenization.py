"""WordPiece tokenizers: load a BERT-style `vocab.txt`, or train one on the pretraining corpus.

Either way the result is a `transformers` fast tokenizer, so it is saved next to every export and downstream
code (`AutoTokenizer.from_pretrained(run/discriminator)`) needs nothing from this library.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import ElectraTokenizerFast, PreTrainedTokenizerFast

from electra.core.errors import UserError
from electra.core.files import read_json_record
from electra.core.run_inputs import RunInputs
from electra.core.settings import spelling
from electra.core.text_form import text_form_normalizer, words
from electra.data.corpus import read_documents
from electra.data.packing import corpus_fingerprint, default_cache_root
from electra.data.progress import corpus_size

arg = spelling(RunInputs)  # --vocab on the command line, vocab in Python
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WORDS_ALPHABET = "'abcdefghijklmnopqrstuvwxyz"  # every character the "words" text form keeps
# Part of the cache key of a trained vocabulary, so one cached by an older trainer is trained again rather
# than reused: at 2, the "##x" pieces are numbered the same in every process, not by one process's hash order.
TRAINING_VERSION = 2
# What transformers writes for a tokenizer saved from `PreTrainedTokenizerFast` (v5 and v4 names).
GENERIC_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def apply_text_form(tokenizer: PreTrainedTokenizerFast, text_form: str) -> PreTrainedTokenizerFast:
    """Give a loaded tokenizer the "words" normalizer; "raw" keeps whatever normalizer it was saved with."""
    if text_form == "raw":
        return tokenizer
    backend = tokenizer.backend_tokenizer
    backend.normalizer = text_form_normalizer(text_form)
    return _wrap(backend, lowercase=True, generic=True)


def text_form_of(tokenizer: PreTrainedTokenizerFast) -> str:
    """The text form a loaded tokenizer applies, read from its normalizer: a vocabulary carries its form into a
    run that continues from it (`--init-from`) even where that run's own setting says "raw"."""
    probe = "Well-known, don't STOP 42"
    normalizer = tokenizer.backend_tokenizer.normalizer
    return (
        "words"
        if normalizer is not None and normalizer.normalize_str(probe).split() == words(probe)
        else "raw"
    )


def lowercases(tokenizer: PreTrainedTokenizerFast) -> bool:
    """Whether a loaded tokenizer lowercases its input, read from its normalizer: a run continued from a
    checkpoint uses that checkpoint's tokenizer as saved (a cased BERT's stays cased), so its `lowercase` setting
    is taken from here rather than from the config's default."""
    normalizer = tokenizer.backend_tokenizer.normalizer
    return normalizer is not None and normalizer.normalize_str("A") == "a"


def _wrap(backend, lowercase: bool, generic: bool) -> PreTrainedTokenizerFast:
    """A `transformers` tokenizer around a `tokenizers` one. BERT's class rebuilds BERT's normalizer when it is
    loaded again, so a tokenizer with any other normalizer is saved as the generic class, which `AutoTokenizer`
    loads from tokenizer.json exactly as written."""
    cls = PreTrainedTokenizerFast if generic else ElectraTokenizerFast
    return cls(
        tokenizer_object=backend,
        # the generic class returns no token_type_ids unless told to; ELECTRA's segment pairs need them
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        do_lower_case=lowercase,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )


def load_vocab_tokenizer(vocab: str | Path, lowercase: bool = True) -> PreTrainedTokenizerFast:
    """A fast WordPiece tokenizer over an existing vocabulary; refuses vocabularies without BERT's specials."""
    path = Path(vocab)
    if path.is_dir():
        return load_saved_tokenizer(path, lowercase)
    if not path.is_file():
        raise UserError(
            f"vocabulary {path} does not exist; pass a BERT-style vocab.txt or omit {arg('vocab')} to train one."
        )
    try:
        tokens = {line.rstrip("\n") for line in path.read_text(encoding="utf-8").splitlines()}
    except UnicodeDecodeError:
        raise UserError(
            f"vocabulary {path} is not UTF-8 text; it must list one WordPiece token per line."
        ) from None
    missing = [tok for tok in SPECIAL_TOKENS if tok not in tokens]
    if missing:
        raise UserError(
            f"vocabulary {path} lacks {', '.join(missing)}; add these tokens (one per line) or train a vocabulary."
        )
    return ElectraTokenizerFast(vocab=str(path), do_lower_case=lowercase)


def holds_tokenizer(directory: str | Path) -> bool:
    """Whether `directory` holds a tokenizer's vocabulary: tokenizer.json (fast), vocab.txt (WordPiece), vocab.json
    (byte-level BPE) or a SentencePiece *.model. A tokenizer_config.json alone is not one."""
    directory = Path(directory)
    return any((directory / name).is_file() for name in ("tokenizer.json", "vocab.txt", "vocab.json")) or any(
        directory.glob("*.model")
    )


def require_tokenizer(directory: str | Path) -> Path:
    """`directory`, when it holds a saved tokenizer (`holds_tokenizer`); otherwise one line naming the fix.

    Asked before any work by every command that tokenizes with a checkpoint's tokenizer: where there is none,
    transformers 5's AutoTokenizer does not fail but builds an empty five-piece one, and a fine-tune would train
    on nothing but [UNK] and report a result."""
    directory = Path(directory)
    if not holds_tokenizer(directory):
        raise UserError(
            f"{directory} holds no tokenizer (tokenizer.json or vocab.txt); save the one the model was trained "
            "with beside it: tokenizer.save_pretrained(dir)."
        )
    return directory


def require_tokenizer_fits(tokenizer: Any, rows: int, directory: str | Path) -> None:
    """One line, before any work, for a tokenizer with more pieces than the model has embedding rows (`rows`,
    config.json's vocab_size): its last ids would index past the embeddings, an IndexError traceback deep in the
    first forward of `glue`, `squad`, `score` or `probe`, once the data was read."""
    if len(tokenizer) > rows:
        raise UserError(
            f"{directory}: its tokenizer has {len(tokenizer):,} pieces but the model's embeddings only {rows:,} "
            "rows (config.json vocab_size); save the tokenizer the model was trained with beside it."
        )


def states_casing(directory: str | Path) -> bool:
    """Whether a saved tokenizer says if it lowercases: its tokenizer_config.json's do_lower_case (BERT's and
    ELECTRA's classes rebuild their normalizer from it, whatever tokenizer.json holds, and lowercase without it), or
    a generic class, whose tokenizer.json loads as written. A vocab.txt alone says neither: BERT's vocabularies
    were released cased and uncased alike."""
    directory = Path(directory)
    config = read_json_record(directory / "tokenizer_config.json") or {}
    generic = config.get("tokenizer_class") in GENERIC_CLASSES and (directory / "tokenizer.json").is_file()
    return generic or isinstance(config.get("do_lower_case"), bool)


def load_saved_tokenizer(directory: str | Path, lowercase: bool | None = None) -> PreTrainedTokenizerFast:
    """The tokenizer saved in `directory`; `lowercase` is its casing where the folder does not state one
    (`states_casing`; transformers then lowercases)."""
    directory = require_tokenizer(directory)
    config = directory / "tokenizer_config.json"
    if (directory / "tokenizer.json").is_file() and config.is_file():
        if json.loads(config.read_text()).get("tokenizer_class") in GENERIC_CLASSES:
            return PreTrainedTokenizerFast.from_pretrained(str(directory))
    if lowercase is not None and not states_casing(directory):
        return ElectraTokenizerFast.from_pretrained(str(directory), do_lower_case=lowercase)
    return ElectraTokenizerFast.from_pretrained(str(directory))


def word_start_flags(tokenizer: PreTrainedTokenizerFast) -> torch.Tensor:
    """[vocabulary] bool: which pieces begin a word (WordPiece's "##" marks the others; special tokens begin one).

    The word-span cloze model (`cloze_span=word`) reads these to find where the next word starts."""
    prefix = getattr(tokenizer.backend_tokenizer.model, "continuing_subword_prefix", None)
    if not prefix:
        raise UserError(
            "cloze_span=word needs a WordPiece vocabulary (pieces inside a word start with '##'); this tokenizer "
            f"has none: train one (omit {arg('vocab')}) or set cloze_span=piece."
        )
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return torch.tensor([not piece.startswith(prefix) for piece in pieces], dtype=torch.bool)


def train_wordpiece_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    lowercase: bool = True,
    min_frequency: int = 2,
    show_progress: bool = False,
    text_form: str = "raw",
) -> PreTrainedTokenizerFast:
    """Train BERT-style WordPiece (`tokenizers`, in Rust) over text in `text_form`, wrapped for `transformers`.

    The same corpus gives the same vocabulary, numbered the same, in every process. `tokenizers`' trainer alone
    does not (huggingface/tokenizers#1794): it numbers the "##x" pieces in the order a hash map hands it the words,
    which differs per process, and on tied pair counts it merges the pair with the lower numbers, so even the set
    of pieces could differ. Every "##x" piece is therefore registered, sorted, before training (`_continuations`,
    one more pass over the text that only collects its characters; `texts` is read twice, so a one-shot iterator
    is held in memory first), and removed from the special tokens afterwards.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if iter(texts) is texts:
        texts = list(texts)
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = text_form_normalizer(text_form, lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    form_alphabet = WORDS_ALPHABET if text_form == "words" else ""
    continuations = _continuations(texts, tokenizer, "##", form_alphabet)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *continuations],
        show_progress=show_progress,
        # The words form writes only these characters: each gets a piece even where the corpus lacks it (a corpus
        # whose apostrophes are all detached, "it 's", would otherwise turn every "it's" scored later into [UNK]).
        initial_alphabet=list(form_alphabet),
    )
    tokenizer.train_from_iterator(_nonempty(texts), trainer=trainer)
    if tokenizer.get_vocab_size() <= len(SPECIAL_TOKENS) + len(continuations):
        raise UserError(
            f"the corpus is too small to train a vocabulary; give more text or pass {arg('vocab')} vocab.txt."
        )
    tokenizer = _only_real_special_tokens(tokenizer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return _wrap(tokenizer, lowercase, generic=text_form != "raw")


def _continuations(texts: Iterable[str], tokenizer, prefix: str, also: str = "") -> list[str]:
    """The "##x" piece of every character x that can continue a word of this corpus, sorted.

    Whether x can is asked of the tokenizer's own normalizer and pre-tokenizer, after a letter and between two
    (so forms that depend on their neighbours count: a final sigma, an apostrophe inside a word): punctuation,
    spaces and CJK characters (each its own word) get none, which is what the trainer would have made."""
    characters = set(also)  # characters to cover whether or not the corpus holds them
    for text in texts:
        characters.update(text)
    continuing: set[str] = set()
    for character in characters:
        for context in (f"a{character}", f"a{character}a"):
            normalized = tokenizer.normalizer.normalize_str(context)
            for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized):
                continuing.update(word[1:])
    return sorted(prefix + character for character in continuing)


def _only_real_special_tokens(tokenizer):
    """The trained tokenizer with only SPECIAL_TOKENS as special tokens: the "##x" pieces registered for the
    numbering stay ordinary pieces of the vocabulary, with the numbers they were trained under."""
    from tokenizers import Tokenizer

    layout = json.loads(tokenizer.to_str())
    layout["added_tokens"] = [t for t in layout["added_tokens"] if t["content"] in SPECIAL_TOKENS]
    return Tokenizer.from_str(json.dumps(layout))


def _nonempty(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        if text.strip():
            yield text


def check_special_tokens(tokenizer: PreTrainedTokenizerFast, source: str) -> None:
    for name in ("pad_token_id", "cls_token_id", "sep_token_id", "mask_token_id"):
        if getattr(tokenizer, name) is None:
            raise UserError(
                f"tokenizer from {source} has no {name.removesuffix('_id')}; use a BERT-style vocabulary."
            )


VOCAB_SAMPLE_CHARS = 200_000_000  # text a vocabulary is trained on, at most (see `vocabulary_sample`)


def vocabulary_sample(
    corpus: str | Path, max_chars: int, seed: int = 0, strict_utf8: bool = False, text_field: str = "text"
) -> list[str]:
    """A seeded sample of the corpus's documents of at most `max_chars` of text, to train a vocabulary on.

    The whole corpus when it is smaller. Otherwise each document is kept with probability 1.25 x max_chars / the
    corpus's size (its files' sizes, read from the disk), so the sample is spread over the whole corpus, and
    reading stops once the sample is full; where the size cannot be known beforehand (compressed files, Parquet,
    saved datasets) the sample is the corpus's first `max_chars`. WordPiece's vocabulary settles long before:
    on this project's shared corpus a tenth of it gave pieces per word within 1% of the whole corpus's
    (docs/pretraining/corpora.md), and 200 MB holds more text than BERT's vocabulary needs to find its 30k pieces
    while training in about a minute, where a 38 GB corpus took hours."""
    size = corpus_size(corpus)
    keep = 1.0 if not size or size <= max_chars else min(1.0, 1.25 * max_chars / size)
    rng = random.Random(seed)
    sample: list[str] = []
    chars = 0
    for document in read_documents(corpus, strict_utf8=strict_utf8, text_field=text_field):
        if keep < 1.0 and rng.random() >= keep:
            continue
        sample.append(document)
        chars += len(document)
        if chars >= max_chars:
            break
    return sample


def load_or_train_tokenizer(
    vocab: str | Path | None,
    corpus: str | Path | None,
    vocab_size: int,
    lowercase: bool = True,
    cache_dir: str | Path | None = None,
    strict_utf8: bool = False,
    text_form: str = "raw",
    text_field: str = "text",
    sample_chars: int = VOCAB_SAMPLE_CHARS,
) -> PreTrainedTokenizerFast:
    """`--vocab` wins; otherwise train WordPiece on a sample of the corpus (`vocabulary_sample`) once and reuse it
    while the corpus is unchanged. `text_form` "words" puts that form's normalizer into the tokenizer either way
    (see `text_form_normalizer`)."""
    if vocab is not None:
        tokenizer = load_vocab_tokenizer(vocab, lowercase=lowercase)
        check_special_tokens(tokenizer, str(vocab))
        return apply_text_form(tokenizer, text_form)
    if corpus is None:
        raise UserError(f"give {arg('vocab')} vocab.txt or a {arg('corpus')} to train a vocabulary on.")
    inputs = [corpus_fingerprint(corpus), vocab_size, lowercase] + ([text_form] if text_form != "raw" else [])
    inputs.append(TRAINING_VERSION)
    inputs += [text_field] if text_field != "text" else []
    inputs += [sample_chars] if sample_chars != VOCAB_SAMPLE_CHARS else []
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:20]
    root = Path(cache_dir) if cache_dir else default_cache_root() / "tokenizers"
    final = root / key
    if (final / "tokenizer.json").is_file():
        return load_saved_tokenizer(final)
    started = time.perf_counter()
    print(
        f"training a {vocab_size:,}-piece WordPiece vocabulary on {corpus}"
        f"{' in its words form' if text_form == 'words' else ''} (once; cached in {root}): reading a sample of "
        f"up to {sample_chars / 1e6:,.0f} MB",
        flush=True,
    )
    documents = vocabulary_sample(corpus, sample_chars, strict_utf8=strict_utf8, text_field=text_field)
    if not documents:
        raise UserError(f"corpus {corpus} is empty: it holds no text; give a corpus with text in it.")
    read = time.perf_counter() - started
    tokenizer = train_wordpiece_tokenizer(
        documents, vocab_size=vocab_size, lowercase=lowercase, show_progress=True, text_form=text_form
    )
    chars = sum(map(len, documents))
    print(
        f"vocabulary trained on {chars / 1e6:,.1f} MB ({len(documents):,} documents) in "
        f"{time.perf_counter() - started:,.1f} s ({read:,.1f} s of it reading the sample)",
        flush=True,
    )
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".{key}-{os.getpid()}"
    tokenizer.save_pretrained(str(staging))
    if final.exists():  # another process finished first: keep its copy
        shutil.rmtree(staging, ignore_errors=True)
    else:
        os.replace(staging, final)
    return tokenizer
