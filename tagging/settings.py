"""`electra tag`'s settings, declared once: its flags and their checks both come from here (light to import: the
command line reads it before any model code loads). The optimizer's settings are the fine-tuning recipe's
declarations (`electra.finetune.recipe.RecipeSettings`), so that every fine-tuner describes and checks them alike."""

from __future__ import annotations

from dataclasses import dataclass

from electra.core.errors import UserError
from electra.core.settings import COUNT, check_declared, setting
from electra.finetune.settings import recipe_setting

VIEW_MODULES = ("fwd", "bwd", "future", "past")  # tagging.cvt_views' auxiliary modules
ENCODINGS = ("file", "bioes")  # train on the file's tags as they are, or on their BIOES form
METRICS = ("auto", "span", "accuracy")


@dataclass
class TagSettings:
    """How a tagger is fine-tuned and scored. None, where allowed, means the value for the model's size (GLUE's:
    learning rate 3e-4 small, 1e-4 base, 5e-5 large; layer decay 0.8, 0.9 for large)."""

    columns: str | None = setting(
        None,
        "comma-separated names of the files' columns, e.g. word,pos,chunk (default: word first, label last)",
        flags=("--columns",),
    )
    label: str | None = setting(
        None, "the column to tag, by its --columns name (default: the last)", flags=("--label",)
    )
    encoding: str = setting(
        "file",
        "train on the file's tags as they are, or on their BIOES form (predictions are written back in the "
        "file's scheme); spans and scores are the same either way",
        choices=ENCODINGS,
        flags=("--encoding",),
    )
    metric: str = setting(
        "auto",
        "span F1 (BIO/BIOES labels) or token accuracy; auto: span F1 when every label is O or B-/I-/E-/S-",
        choices=METRICS,
        flags=("--metric",),
    )
    learning_rate: float | None = recipe_setting("learning_rate")
    layer_decay: float | None = recipe_setting("layer_decay")
    epochs: float | None = recipe_setting("epochs", 3.0, "training epochs")
    max_steps: int | None = recipe_setting("max_steps")
    batch_size: int = recipe_setting("batch_size")
    eval_batch_size: int = recipe_setting("eval_batch_size")
    max_seq_length: int = recipe_setting(
        "max_seq_length", help="pieces per window; longer sentences are split into windows of whole words"
    )
    warmup_fraction: float = recipe_setting("warmup_fraction")
    weight_decay: float = recipe_setting("weight_decay")
    adam_epsilon: float = recipe_setting("adam_epsilon")
    max_grad_norm: float = recipe_setting("max_grad_norm")
    original_off_by_one: bool = recipe_setting("original_off_by_one")
    max_train_sentences: int | None = setting(
        None, "train on the first N sentences of --train", within=COUNT, flags=("--max-train-sentences",)
    )
    max_eval_sentences: int | None = setting(
        None,
        "score the first N sentences of --dev and --test",
        within=COUNT,
        flags=("--max-eval-sentences",),
    )
    cvt: bool = setting(
        False,
        "Cross-View Training: every update adds a batch of unlabeled sentences (--unlabeled), on which "
        "auxiliary modules reading left-only and right-only views of the lower layers learn the tagger's "
        "predictions",
        flags=("--cvt",),
    )
    unlabeled: str | None = setting(
        None,
        "--cvt's unlabeled text: any corpus `electra pretrain` reads",
        flags=("--unlabeled",),
        metavar="CORPUS",
    )
    max_unlabeled: int = setting(
        20000, "--cvt reads the first N sentences of --unlabeled", within=COUNT, flags=("--max-unlabeled",)
    )
    view_layers: int | None = setting(
        None,
        "--cvt's restricted views run the encoder's lower N layers (default: half of them, rounded up)",
        within=COUNT,
        flags=("--view-layers",),
    )
    cvt_modules: str = setting(
        "fwd,bwd,future,past",
        "--cvt's auxiliary modules, a comma list of fwd, bwd, future, past",
        flags=("--cvt-modules",),
    )
    mixed_precision: str = recipe_setting("mixed_precision")
    cpu_dropout: str = recipe_setting("cpu_dropout")
    save_every: int = recipe_setting(
        "save_every",
        help="checkpoint each seed's run every N updates under OUTPUT/runs/ (0: never), for --resume",
    )
    log_every: int = recipe_setting("log_every")
    progress: bool = recipe_setting("progress")

    def __post_init__(self) -> None:
        check_declared(self, "")
        if self.max_seq_length < 3:  # a window is [CLS] pieces [SEP]
            raise UserError(
                f"--max-seq-length {self.max_seq_length} leaves no room for a word; give at least 3."
            )
        if self.cvt != (self.unlabeled is not None):
            raise UserError(
                "--cvt and --unlabeled CORPUS go together: Cross-View Training learns from the unlabeled text."
            )
        unknown = sorted(set(self.modules()) - set(VIEW_MODULES))
        if unknown or not self.modules():
            raise UserError(
                f"--cvt-modules {self.cvt_modules}: give a comma list of {', '.join(VIEW_MODULES)}"
                + (f" (unknown: {', '.join(unknown)})." if unknown else ".")
            )

    def modules(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.cvt_modules.split(",") if name.strip())
