"""What `electra tag` trains and scores on: the CoNLL files read and encoded once (the label set, the scoring by
spans or by accuracy, the training windows, the dev and test sets, and --cvt's unlabeled windows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from electra.core.errors import UserError
from electra.tagging.conll import Sentence, is_span_scheme, label_vocabulary, read_conll, to_bioes
from electra.tagging.features import Window, encode
from electra.tagging.settings import TagSettings
from electra.tagging.spans import is_span_label
from electra.tagging.unlabeled import read_unlabeled


@dataclass
class EvalSet:
    """A scored file: its sentences as read, and their encoded windows."""

    path: Path
    sentences: list[Sentence]
    features: list[dict]
    windows: list[Window]


@dataclass
class TagData:
    """What every seed trains and scores on."""

    labels: list[str]  # the model's labels (the training file's, in BIOES form with encoding "bioes")
    spans: bool  # scored by span F1 (else token accuracy)
    train: list[dict]
    train_sentences: int
    evals: dict[str, EvalSet]  # "dev", "test"
    file_bioes: bool  # the training file's own tags use E-/S- (predictions are written back in that scheme)
    unlabeled: list[dict] = field(default_factory=list)  # --cvt's windows, with `word_starts` (0/1 per piece)
    sep_id: int = 0  # the tokenizer's [SEP]: where --cvt's right-to-left views end


def primary_metric(data: TagData) -> str:
    return "f1" if data.spans else "accuracy"


def choose_scoring(labels: Sequence[str], settings: TagSettings, train: Path) -> bool:
    """Whether runs are scored by spans: `--metric auto` decides by the labels; `span` and `--encoding bioes`
    need every label to be O or B-/I-/E-/S- and are refused, naming one that is not, otherwise."""
    spans = is_span_scheme(labels) if settings.metric == "auto" else settings.metric == "span"
    needs_spans = settings.metric == "span" or settings.encoding == "bioes"
    if needs_spans:
        bad = next((tag for tag in labels if not is_span_label(tag)), None)
        if bad is not None:
            flag = "--metric span" if settings.metric == "span" else "--encoding bioes"
            raise UserError(
                f"{flag}: {train} has the label {bad!r}, which is neither O nor B-, I-, E- or S- and a type; pick "
                "the chunk or entity column with --label, or drop the flag."
            )
    return spans


def load_data(train: Path, evals: dict[str, Path], tokenizer, settings: TagSettings) -> TagData:
    """Read and encode the files. The label set is the whole training file's (a capped run still knows every
    label); a dev or test label the training file lacks is scored but cannot be predicted."""
    read = lambda path, cap: read_conll(path, settings.columns, settings.label, cap)  # noqa: E731
    every = read(train, None)
    file_labels = label_vocabulary(every)
    spans = choose_scoring(file_labels, settings, train)
    train_sentences = every[: settings.max_train_sentences] if settings.max_train_sentences else every
    bioes = settings.encoding == "bioes"
    convert = to_bioes if bioes else list
    labels = label_vocabulary_of([convert(s.labels) for s in every]) if bioes else file_labels
    ids = {label: i for i, label in enumerate(labels)}
    features, _ = encode(
        [s.words for s in train_sentences],
        tokenizer,
        settings.max_seq_length,
        [convert(s.labels) for s in train_sentences],
        ids,
    )
    sets = {}
    for name, path in evals.items():
        sentences = read(path, settings.max_eval_sentences)
        encoded, windows = encode([s.words for s in sentences], tokenizer, settings.max_seq_length)
        sets[name] = EvalSet(path, sentences, encoded, windows)
    file_bioes = any(tag[:2] in ("E-", "S-") for tag in file_labels)
    unlabeled = unlabeled_features(settings, tokenizer) if settings.cvt else []
    return TagData(
        labels, spans, features, len(train_sentences), sets, file_bioes, unlabeled, tokenizer.sep_token_id
    )


def unlabeled_features(settings: TagSettings, tokenizer) -> list[dict]:
    """--cvt's unlabeled sentences as windows, each piece marked 1 where a word starts."""
    sentences = read_unlabeled(settings.unlabeled, settings.max_unlabeled)
    marked, _ = encode(
        sentences, tokenizer, settings.max_seq_length, [["w"] * len(s) for s in sentences], {"w": 1}
    )
    for feature in marked:
        feature["word_starts"] = [int(label == 1) for label in feature.pop("labels")]
    return marked


def label_vocabulary_of(tag_lists: Sequence[Sequence[str]]) -> list[str]:
    """`label_vocabulary`'s order (O first, then sorted) over lists of tags."""
    tags = {t for tags in tag_lists for t in tags}
    return (["O"] if "O" in tags else []) + sorted(tags - {"O"})
