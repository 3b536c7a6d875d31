"""Text forms: what the tokenizer does to text before it is split into pieces.

A scorer for n-best rescoring sees recognizer output (lowercase words, no punctuation, numbers spelled out), while
a corpus is written text. Training on text in the form it will score removes a mismatch the model would otherwise
spend capacity on, which is what any ASR language model's training recipe does. The form lives in the tokenizer's
normalizer, so training text, the trained vocabulary and every later input are shaped by the one definition here,
and a saved tokenizer carries it to `transformers` users. The word n-gram baseline normalises with it too.
"""

from __future__ import annotations

from functools import lru_cache

from electra.core.errors import UserError

TEXT_FORMS = ("raw", "words")


def text_form_normalizer(text_form: str, lowercase: bool = True):
    """The `tokenizers` normalizer of a text form.

    "raw" is BERT's normalizer. "words" is the form ASR output and WER references are written in: lowercase
    letters and in-word apostrophes (`don't`), accents stripped, hyphens and underscores as spaces, and every other
    character (punctuation, digits, quotes) removed.
    """
    from tokenizers import Regex, normalizers

    if text_form == "raw":
        return normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    if text_form != "words":
        raise UserError(f"text_form={text_form!r} is not one of {', '.join(TEXT_FORMS)}.")
    return normalizers.Sequence(
        [
            normalizers.BertNormalizer(lowercase=True, strip_accents=True),
            normalizers.Replace(Regex(r"[-_]"), " "),
            normalizers.Replace(Regex(r"[^a-z'\s]"), ""),
            normalizers.Replace(Regex(r"(?<![a-z])'|'(?![a-z])"), ""),
        ]
    )


@lru_cache(maxsize=1)
def _words_normalizer():
    return text_form_normalizer("words")


def words(text: str) -> list[str]:
    """The words of `text` in the "words" form (`Well-known, don't STOP!` -> well known don't stop)."""
    return _words_normalizer().normalize_str(text).split()
