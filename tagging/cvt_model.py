"""Cross-View Training's tagger (Clark's dissertation, chapter 4, section 4.2): a two-layer CNN-BiLSTM encoder, the
primary prediction module on both layers, and auxiliary modules that see restricted views of the sentence.

Encoder. Each word is its embedding (random start; the word lowercased, digits mapped to 0) concatenated with a
character CNN's max-pooled filters (widths 2, 3, 4 by default), as the reference code does (the text says "sum").
The first BiLSTM layer's two directions stay separate: `fwd1[t]` has read words 0..t only, `bwd1[t]` words t..T
only. The second layer reads both and so sees the whole sentence. Every sentence is framed by `<start>` and `<end>`
tokens (positions 0 and T+1), as the reference does; labels live at positions 1..T.

Prediction modules (each `softmax(U·act(W·x) + b)`):
- primary on [h1; h2] with ReLU: the tagger's output, and the teacher on unlabeled sentences;
- full on [h1; h2] without ReLU (the reference code's), trained only as a student, with dropout;
- fwd on fwd1[t] (no right context), bwd on bwd1[t] (no left context);
- future on fwd1[t-1] (neither the word nor its right context), past on bwd1[t+1] (neither the word nor its left).
As in the reference code, future is not trained at the first word (its input would be `<start>`'s state) nor past
at the last, so each is trained only where its view holds a real word.

Losses live here beside the modules that own them: `supervised_loss` (primary module, label smoothing) and
`cvt_loss` (the auxiliary modules toward the primary module's soft predictions, which are computed without dropout
and without gradient, so the primary module is never trained on unlabeled text).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from electra.core.errors import UserError
from electra.core.files import read_safetensors, require_file, write_json_atomically
from electra.export.checkpoint import save_tensors_atomically
from electra.tagging.cvt_settings import AUXILIARY_MODULES

WORD_SPECIALS = ("<pad>", "<unk>", "<start>", "<end>")
CHAR_SPECIALS = ("<pad>", "<unk>", "<start>", "<end>", "<missing>")
PAD, UNK, START, END, MISSING = 0, 1, 2, 3, 4
CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE = "config.json", "vocab.json", "model.safetensors"
MODEL_TYPE = "electra-cvt-tagger"

_DIGIT = re.compile(r"\d")
# PTB's escaped brackets, as the WSJ-derived files (CoNLL-2000, the treebank) spell them
_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "-LSB-": "[", "-RSB-": "]"}


def word_form(word: str) -> str:
    """The characters the character CNN reads: the word as written, PTB bracket escapes undone."""
    return _BRACKETS.get(word, word).replace("\\/", "/").replace("\\*", "*")


def normalize_word(word: str) -> str:
    """The key of a word's embedding: lowercased, every digit 0 (`1,500` and `2,750` share `0,000`)."""
    return _DIGIT.sub("0", word_form(word).lower())


@dataclass
class Vocabulary:
    """Words (normalized) and characters the embeddings index, and the labels the modules predict."""

    words: list[str]
    chars: list[str]
    labels: list[str]

    def __post_init__(self) -> None:
        self._word_ids = {w: i for i, w in enumerate(self.words)}
        self._char_ids = {c: i for i, c in enumerate(self.chars)}
        self.label_ids = {t: i for i, t in enumerate(self.labels)}

    def word_id(self, word: str) -> int:
        return self._word_ids.get(normalize_word(word), UNK)

    def char_ids(self, word: str) -> list[int]:
        return [self._char_ids.get(c, UNK) for c in word_form(word)]

    def to_dict(self) -> dict[str, list[str]]:
        return {"words": self.words, "chars": self.chars, "labels": self.labels}


def build_vocabulary(
    sentences: Iterable[Sequence[str]],
    labels: Sequence[str],
    min_count: int = 2,
    max_words: int | None = None,
    vector_words: Sequence[str] = (),
) -> Vocabulary:
    """Words seen at least `min_count` times in `sentences` (the text the model trains on: the labeled sentences,
    and the unlabeled ones under CVT), the most frequent first, at most `max_words`; every character seen. Rarer
    words read as `<unk>`, which the labeled data thereby trains. With `vector_words` (the normalized words of a
    pretrained vectors file, `electra.tagging.word_vectors`), those come first, all of them, and the text's words
    join after them, as the reference code builds its vocabulary from GloVe's words and the training words."""
    word_counts: Counter[str] = Counter()
    char_counts: Counter[str] = Counter()
    for sentence in sentences:
        for word in sentence:
            word_counts[normalize_word(word)] += 1
            char_counts.update(word_form(word))
    kept = [w for w, n in sorted(word_counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_count]
    kept = [w for w in kept if w not in WORD_SPECIALS][:max_words]
    if vector_words:
        known = set(vector_words)
        kept = [w for w in vector_words if w not in WORD_SPECIALS] + [w for w in kept if w not in known]
    chars = [c for c in sorted(char_counts) if c not in CHAR_SPECIALS]
    return Vocabulary(list(WORD_SPECIALS) + kept, list(CHAR_SPECIALS) + chars, list(labels))


@dataclass
class Batch:
    """Sentences as tensors, framed by `<start>`/`<end>`: word ids [B, T+2] and lengths [B] counting the frame.
    Characters are per distinct word form of the batch: `spellings` [U, W] (a fixed width, so a word's vector never
    depends on the other words of the batch) and `spelling_ids` [B, T+2], each position's row in `spellings`."""

    words: torch.Tensor
    spellings: torch.Tensor
    spelling_ids: torch.Tensor
    lengths: torch.Tensor

    def token_mask(self) -> torch.Tensor:
        """[B, T+2] True at the real words (positions 1..T of each sentence), False at the frame and padding."""
        positions = torch.arange(self.words.shape[1], device=self.words.device)
        return (positions >= 1) & (positions < (self.lengths - 1).unsqueeze(1))


def make_batch(sentences: Sequence[Sequence[str]], vocab: Vocabulary, max_word_length: int) -> Batch:
    """Encode word sequences (not empty). A word's characters are cut at `max_word_length` and framed
    `<pad> <start> c1..cn <end> <pad>`, so the widest filter always finds a window; `<start>`, `<end>` and padding
    positions read the spelling `<pad> <start> <missing> <end>`."""
    longest = max(len(s) for s in sentences) + 2
    words = torch.zeros(len(sentences), longest, dtype=torch.long)
    spelling_ids = torch.zeros(len(sentences), longest, dtype=torch.long)
    rows: dict[str, int] = {}
    spellings = [[PAD, START, MISSING, END]]
    for i, sentence in enumerate(sentences):
        ids = [START] + [vocab.word_id(w) for w in sentence] + [END]
        words[i, : len(ids)] = torch.tensor(ids)
        spelled = []
        for word in sentence:
            row = rows.get(word)
            if row is None:
                row = rows[word] = len(spellings)
                spellings.append([PAD, START] + vocab.char_ids(word)[:max_word_length] + [END])
            spelled.append(row)
        spelling_ids[i, 1 : len(sentence) + 1] = torch.tensor(spelled, dtype=torch.long)
    table = torch.zeros(len(spellings), max_word_length + 4, dtype=torch.long)
    for row, pieces in enumerate(spellings):
        table[row, : len(pieces)] = torch.tensor(pieces)
    lengths = torch.tensor([len(s) + 2 for s in sentences])
    return Batch(words, table, spelling_ids, lengths)


@dataclass
class CvtTaggerConfig:
    """The tagger's shape. Defaults are the dissertation's Table 4.1 (300-d words, 50-d characters, 100 filters per
    width, LSTMs of 1024 then 512 units, projections and hidden layers 512); a CPU run passes smaller ones."""

    vocab_words: int
    vocab_chars: int
    num_labels: int
    word_dim: int = 300
    char_dim: int = 50
    char_widths: tuple[int, ...] = (2, 3, 4)
    char_filters: int = 100
    max_word_length: int = 20
    lstm1: int = 1024
    lstm2: int = 512
    projection: int = 512
    modules: tuple[str, ...] = AUXILIARY_MODULES
    model_type: str = field(default=MODEL_TYPE)
    known_modules: ClassVar[tuple[str, ...]] = AUXILIARY_MODULES

    def __post_init__(self) -> None:
        self.char_widths = tuple(self.char_widths)
        self.modules = tuple(self.modules)
        unknown = sorted(set(self.modules) - set(self.known_modules))
        if unknown:
            raise ValueError(f"unknown auxiliary modules {unknown}; known: {', '.join(self.known_modules)}")

    @property
    def first_width(self) -> int:
        """Width of one direction of the first layer (its projection, where the LSTM is wider)."""
        return min(self.lstm1, self.projection)

    @property
    def second_width(self) -> int:
        return min(self.lstm2, self.projection)


class PredictionModule(nn.Module):
    """softmax(U·act(W·x) + b); returns the logits. `relu=False` is the reference code's full-view module."""

    def __init__(self, inputs: int, hidden: int, labels: int, relu: bool = True):
        super().__init__()
        self.hidden = nn.Linear(inputs, hidden)
        self.output = nn.Linear(hidden, labels)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hidden(x)
        return self.output(torch.relu(h) if self.relu else h)


def reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each sequence of `x` [B, T, D] reversed within its own length (padding stays at the end); its own inverse."""
    positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    index = (lengths.unsqueeze(1) - 1 - positions).where(positions < lengths.unsqueeze(1), positions)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


class BiLSTM(nn.Module):
    """Two LSTMs, one reading left to right and one right to left; outputs [fwd; bwd] per position. The backward
    one reads each sentence reversed within its length, so neither direction ever reads padding before a word
    (no packing: packed sequences cost several times as much on a CPU). A layer wider than `projection` projects
    its output to it, as the reference's LSTMCell(num_proj) does."""

    def __init__(self, inputs: int, units: int, projection: int):
        super().__init__()
        proj = projection if projection < units else 0
        self.forward_lstm = nn.LSTM(inputs, units, batch_first=True, proj_size=proj)
        self.backward_lstm = nn.LSTM(inputs, units, batch_first=True, proj_size=proj)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        forward = self.forward_lstm(x)[0]
        backward = reverse_within(self.backward_lstm(reverse_within(x, lengths))[0], lengths)
        return torch.cat([forward, backward], dim=-1)


class CharCNN(nn.Module):
    """Max-pooled ReLU filters of each width over a word's character embeddings (as matmuls over windows)."""

    def __init__(self, chars: int, dim: int, widths: Sequence[int], filters: int):
        super().__init__()
        self.embeddings = nn.Embedding(chars, dim, padding_idx=PAD)
        self.widths = tuple(widths)
        self.filters = nn.ModuleList(nn.Linear(w * dim, filters) for w in self.widths)

    def forward(self, spellings: torch.Tensor) -> torch.Tensor:
        """[U, W] character ids -> [U, filters * len(widths)]."""
        chars = self.embeddings(spellings)  # [U, W, dim]
        pooled = []
        for width, linear in zip(self.widths, self.filters):
            windows = chars.unfold(1, width, 1).transpose(2, 3).flatten(2)  # [U, W-width+1, width*dim]
            pooled.append(torch.relu(linear(windows)).amax(dim=1))
        return torch.cat(pooled, dim=-1)


class CvtEncoder(nn.Module):
    """The shared encoder of CVT's models (the tagger here, the parser in `cvt_parser`): word embeddings and the
    character CNN, then two BiLSTM layers. Subclasses add their prediction modules."""

    def __init__(self, config: CvtTaggerConfig):
        super().__init__()
        self.config = c = config
        self.word_embeddings = nn.Embedding(c.vocab_words, c.word_dim)
        nn.init.normal_(self.word_embeddings.weight, std=c.word_dim**-0.5)
        self.char_cnn = CharCNN(c.vocab_chars, c.char_dim, c.char_widths, c.char_filters)
        word_width = c.word_dim + c.char_filters * len(c.char_widths)
        self.lstm1 = BiLSTM(word_width, c.lstm1, c.projection)
        self.lstm2 = BiLSTM(2 * c.first_width, c.lstm2, c.projection)

    @property
    def both_width(self) -> int:
        """Width of [h1; h2], what the primary and full-view modules read."""
        return 2 * self.config.first_width + 2 * self.config.second_width

    def _words(self, batch: Batch, dropout: float) -> torch.Tensor:
        """[B, T+2, word_dim + filters]: a word's vector depends on that word alone."""
        drop = self.training and dropout > 0
        words = F.dropout(self.word_embeddings(batch.words), dropout, drop)
        spelled = F.dropout(self.char_cnn(batch.spellings), dropout, drop)
        return torch.cat([words, spelled[batch.spelling_ids]], dim=-1)

    def encode(self, batch: Batch, dropout: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(h1, h2), each [B, T+2, 2·width]: the two layers' outputs, `dropout` (a rate) applied to the word
        vectors and to both outputs while in training mode. h1's first half is the forward direction (fwd1[t] has
        read words 0..t only), its second half the backward one (bwd1[t]: words t..T+1 only)."""
        drop = self.training and dropout > 0
        h1 = F.dropout(self.lstm1(self._words(batch, dropout), batch.lengths), dropout, drop)
        h2 = F.dropout(self.lstm2(h1, batch.lengths), dropout, drop)
        return h1, h2


class CvtTagger(CvtEncoder):
    """The CNN-BiLSTM tagger with its prediction modules; `forward` returns logits at every framed position."""

    def __init__(self, config: CvtTaggerConfig):
        super().__init__(config)
        c, both = config, self.both_width
        self.primary = PredictionModule(both, c.projection, c.num_labels)
        views = {"full": both, "fwd": c.first_width, "bwd": c.first_width}
        views |= {"future": c.first_width, "past": c.first_width}
        self.auxiliary = nn.ModuleDict(
            {
                name: PredictionModule(views[name], c.projection, c.num_labels, relu=name != "full")
                for name in c.modules
            }
        )

    def forward(
        self, batch: Batch, dropout: float = 0.0, modules: Sequence[str] = ()
    ) -> dict[str, torch.Tensor]:
        """Logits [B, T+2, labels] of `primary` and of each module named in `modules`. Position t of `future`
        comes from fwd1[t-1] and of `past` from bwd1[t+1] (zeros past the frame). `dropout` (a rate) applies to
        the word vectors and both layers' outputs while the model is in training mode; the teacher passes 0."""
        h1, h2 = self.encode(batch, dropout)
        both = torch.cat([h1, h2], dim=-1)
        out = {"primary": self.primary(both)}
        half = self.config.first_width
        fwd, bwd = h1[..., :half], h1[..., half:]
        views = {
            "full": lambda: both,
            "fwd": lambda: fwd,
            "bwd": lambda: bwd,
            "future": lambda: F.pad(fwd, (0, 0, 1, 0))[:, :-1],
            "past": lambda: F.pad(bwd, (0, 0, 0, 1))[:, 1:],
        }
        for name in modules:
            out[name] = self.auxiliary[name](views[name]())
        return out


def primary_argmax(
    model: CvtEncoder, sentences: Sequence[Sequence[str]], vocab: Vocabulary, batch_size: int
) -> list[list[int]]:
    """Each sentence's most probable class of the primary module at each word (a tag for the tagger, a (head,
    relation) edge for the parser), in evaluation mode; sentences are batched by length, answers in input order."""
    model.eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    found: dict[int, list[int]] = {}
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = make_batch([sentences[i] for i in chunk], vocab, model.config.max_word_length)
            best = model(batch)["primary"].argmax(-1)
            for row, i in enumerate(chunk):
                found[i] = best[row, 1 : len(sentences[i]) + 1].tolist()
    return [found[i] for i in range(len(sentences))]


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the masked positions of -Σ_c target_c · log softmax(logits)_c (0 where nothing is masked in)."""
    per_token = -(targets * F.log_softmax(logits.float(), dim=-1)).sum(-1)
    mask = mask.to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def supervised_loss(
    model: CvtTagger, batch: Batch, labels: torch.Tensor, dropout: float, smoothing: float
) -> torch.Tensor:
    """The primary module's cross-entropy on labeled sentences, toward (1-ε)·one-hot + ε/C (label smoothing, ε =
    `smoothing`), averaged over the words. `labels` is [B, T+2] label ids (anything at the frame and padding)."""
    logits = model(batch, dropout)["primary"]
    classes = logits.shape[-1]
    mask = batch.token_mask()
    targets = F.one_hot(labels.clamp(0, classes - 1), classes).float() * (1 - smoothing) + smoothing / classes
    return soft_cross_entropy(logits, targets, mask)


def teacher_probabilities(model: CvtTagger, batch: Batch) -> torch.Tensor:
    """The primary module's predictions as soft targets: evaluation mode (no dropout), no gradient."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return torch.softmax(model(batch)["primary"].float(), dim=-1)
    finally:
        model.train(was_training)


def cvt_loss(
    model: CvtTagger, batch: Batch, dropout: float, modules: Sequence[str] | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The CVT loss of an unlabeled batch: the plain sum over the auxiliary modules of their cross-entropy to the
    primary module's predictions (same gradient as KL to them). The targets carry no gradient and the primary
    module is not run as a student, so nothing here trains it; the encoder learns from every module. Returns the
    loss and each module's share (floats, for logs)."""
    modules = tuple(model.config.modules if modules is None else modules)
    targets = teacher_probabilities(model, batch)
    out = model(batch, dropout, modules)
    mask = batch.token_mask()
    masks = {
        # trained only where the view holds a real word: not future at the first word, not past at the last
        "future": mask & F.pad(mask, (1, 0))[:, :-1],
        "past": mask & F.pad(mask, (0, 1))[:, 1:],
    }
    losses = {name: soft_cross_entropy(out[name], targets, masks.get(name, mask)) for name in modules}
    total = sum(losses.values(), torch.zeros((), device=targets.device))
    return total, {name: float(value.detach()) for name, value in losses.items()}


def save_tagger(
    model: CvtEncoder, vocab: Vocabulary, directory: str | Path, extra: dict | None = None
) -> None:
    """`directory`/config.json (the shape, the labels, and `extra` such as the training settings), vocab.json (words
    and characters) and model.safetensors (every module's weights, auxiliary ones too, so training can go on)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = asdict(model.config) | {"labels": vocab.labels}
    if extra:
        config["training"] = extra
    write_json_atomically(directory / CONFIG_FILE, config, indent=2)
    write_json_atomically(directory / VOCAB_FILE, {"words": vocab.words, "chars": vocab.chars})
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_tensors_atomically(state, directory / WEIGHTS_FILE)


def load_tagger(directory: str | Path) -> tuple[CvtTagger, Vocabulary]:
    """The tagger and vocabulary `save_tagger` wrote (safetensors, no pickle), in evaluation mode; a folder that
    is not one is one UserError naming the file."""
    return load_cvt_model(directory, CvtTaggerConfig, CvtTagger, "CVT tagger", "electra tag-bilstm")


def load_cvt_model(
    directory: str | Path, config_class: type, model_class: type, what: str, command: str
) -> tuple[CvtEncoder, Vocabulary]:
    """A model of `model_class` and its vocabulary, as `save_tagger` wrote them, in evaluation mode. The folder's
    `model_type` must be `config_class`'s; anything else is one UserError naming the file and the `command` that
    writes such folders."""
    directory = Path(directory)
    hint = f"give a folder written by `{command}`"
    try:
        config = json.loads(require_file(directory / CONFIG_FILE, f"{what} config", hint).read_text())
        vocab = json.loads(require_file(directory / VOCAB_FILE, f"{what} vocabulary", hint).read_text())
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{directory}: config.json or vocab.json is not valid JSON ({exc.msg}); {hint}."
        ) from None
    expected = next(f.default for f in fields(config_class) if f.name == "model_type")
    if config.get("model_type") != expected:
        raise UserError(
            f"{directory / CONFIG_FILE}: not a {what} (model_type {config.get('model_type')!r}); {hint}."
        )
    labels = config.pop("labels")
    config.pop("training", None)
    model = model_class(config_class(**config))
    state = read_safetensors(require_file(directory / WEIGHTS_FILE, f"{what} weights", hint))
    model.load_state_dict(state)
    return model.eval(), Vocabulary(vocab["words"], vocab["chars"], labels)
