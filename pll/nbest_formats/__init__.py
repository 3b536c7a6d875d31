"""N-best lists in the layouts recognizers write, read into `Utterance`s and the re-ranked 1-best written back.

One reader and one writer per layout, each in its own module here, gathered in `FORMATS` under the name
`--format` takes:

- `json`: the awslabs/mlm-scoring dict or the list of {id, ref, hyps} (`electra.pll.nbest`).
- `espnet`: ESPnet2's decoding folder (`asr_inference.py --output_dir`): `1best_recog/`, `2best_recog/`, ... each
  holding Kaldi-style `text` and `score` files (`UTT value` lines; ESPnet writes a score as `tensor(-3.25)`), or
  the `logdir` that holds several jobs' `output.N/` folders. Every other file of single numbers is a feature.
- `kaldi`: the n-best archive of `steps/rnnlmrescore.sh` (`lattice-to-nbest | nbest-to-linear`): `words_text`
  keyed `UTT-N`, with the costs beside it, `acwt` (acoustic) and `lmwt.withlm` (graph and LM), and any further
  `lmwt.X`. A cost is a negated log probability, so each becomes a log score (higher is better): `am_score`,
  `lm_score` and `X_score`; `score` is the total `steps/rnnlmrescore.sh` ranks by at its default acoustic scale,
  `am_score / 12 + lm_score`.
- `nemo`: the beams file of NeMo's `eval_beamsearch_ngram*.py --preds_output_folder`
  (`preds_out_width{W}_alpha{A}_beta{B}.tsv`): `text<TAB>score` lines, W per utterance in the order of the input
  manifest, whose JSON lines give the references (`text`) and, by their audio file's name, the utterance ids.
- `whisper`: transformers' `generate(num_beams=K, num_return_sequences=K, output_scores=True,
  return_dict_in_generate=True)` written as JSON lines, one utterance a line: {"id", "sequences": [decoded
  texts], "sequences_scores": [their scores], "ref"?}; further lists of numbers, one per sequence, are features.
- `tsv`: a tab-separated table with a header naming `utt`, `text` and `score`, optionally `ref`, and further
  numeric columns (features), one hypothesis a row.

Every reader checks its input completely (the door): a hypothesis without a score, an utterance with no
hypotheses, a score that is not a number, a file that is not UTF-8 are one line naming FILE:LINE and the fix,
before anything is scored or written. Reference files (`--dev-ref`, `--test-ref`) are Kaldi/ESPnet `text` files
(`UTT words`) or NeMo manifests (JSON lines with `audio_filepath` and `text`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from electra.core.errors import UserError
from electra.pll.nbest import FORMATS as JSON_FORMATS
from electra.pll.nbest import Hypothesis, Utterance, read_nbest
from electra.pll.nbest_formats.common import keyed_lines, read_manifest
from electra.pll.nbest_formats.espnet import espnet_best, espnet_jobs, read_espnet, write_espnet
from electra.pll.nbest_formats.kaldi import kaldi_best, read_kaldi, write_kaldi
from electra.pll.nbest_formats.nemo import NEMO_NAME, nemo_best, nemo_manifest, read_nemo, write_nemo
from electra.pll.nbest_formats.tsv import read_tsv, tsv_best, write_tsv
from electra.pll.nbest_formats.whisper import read_whisper, whisper_best, write_whisper


@dataclass(frozen=True)
class NbestFormat:
    """One layout: what it is (for messages and --help), how to read it and where its re-ranked 1-best goes."""

    name: str
    description: str
    read: Callable[[Path, Path | None], list[Utterance]]
    # The re-ranked 1-best in the layout: written under `stem` (OUTPUT_DIR/NAME.rescored), returning the path.
    write_best: Callable[[Path, Sequence[tuple[Utterance, Hypothesis, float]]], Path] | None
    best_path: Callable[[Path], Path] | None
    # Files written beside the 1-best (ESPnet's `score`, NeMo's manifest with `pred_text`), checked and cleared alike.
    companions: Callable[[Path], list[Path]] = lambda stem: []


def read_lists(
    path: str | Path, fmt: str = "auto", ref: str | Path | None = None
) -> tuple[list[Utterance], str]:
    """(utterances, layout) of an n-best list in any layout of `FORMATS`: `fmt`, or recognised from the files.

    The layout is "mlm-scoring" or "list" for JSON (as `read_nbest` names them), else the format's name. A
    reference file `ref` gives every utterance its reference (and must cover exactly the list's utterances)."""
    path = Path(path)
    layout = detect_format(path, fmt)
    if layout == "json":
        utts, layout = read_nbest(path)
    else:
        utts = FORMATS[layout].read(path, Path(ref) if ref is not None else None)
        if not utts:
            raise UserError(f"{path}: holds no utterances.")
    if ref is not None and layout != "nemo":  # NeMo's manifest was read with its beams
        _apply_refs(utts, Path(ref), path)
    return utts, layout


def json_format(layout: str) -> str:
    """The JSON format a list in `layout` is written back in beside its own layout: its own, or the list form."""
    return layout if layout in JSON_FORMATS else "list"


def detect_format(path: Path, fmt: str = "auto") -> str:
    """The format name of `path`: `fmt` when given (checked against what is there), else recognised; one line
    when it cannot be told, naming what each format looks like."""
    if fmt not in ("auto", *FORMATS):
        raise UserError(f"--format {fmt!r}: choose one of auto, {', '.join(FORMATS)}.")
    found = sniff_format(path)
    if fmt == "auto":
        if found is None:
            raise UserError(
                f"{path}: not a recognised n-best layout (an n-best .json, an ESPnet folder with 1best_recog/, a "
                "Kaldi folder with words_text, NeMo's preds_out_width*.tsv, Whisper-style .jsonl, or a .tsv with a "
                "header utt, text, score); pass --format to say which."
            )
        return found
    folder = fmt in ("espnet", "kaldi")
    if folder and not path.is_dir():
        raise UserError(
            f"{path}: --format {fmt} reads a folder (see `electra rescore --help`); this is not one."
        )
    if not folder and not path.is_file():
        what = "a folder" if path.is_dir() else "missing"
        raise UserError(f"{path}: --format {fmt} reads a file, but this is {what}.")
    return fmt


def layout_of_input(raw: str, fmt: str = "auto") -> str | None:
    """`electra score --input`'s layout: None for standard input or a file of sentences (or one that is not
    there, which the sentence reader names), else as `detect_format` tells it."""
    path = Path(raw)
    if raw == "-" or not path.exists():
        if fmt not in ("auto", "json"):
            raise UserError(
                f"--input {raw}: --format {fmt} reads a file or folder by its name, not standard input."
            )
        return None
    if fmt == "auto":  # None: a file of sentences, or a folder of no layout (refused by the sentence reader)
        return sniff_format(path)
    return detect_format(path, fmt)


def sniff_format(path: Path) -> str | None:
    """The layout `path` plainly is, or None (a file of sentences, say). NeMo's headerless beams are told by
    their file name only (`preds_out_width*`): a file of sentences may hold a tab and a number too."""
    if path.is_dir():
        if espnet_jobs(path):
            return "espnet"
        if (path / "words_text").is_file():
            return "kaldi"
        return None
    if not path.is_file():
        raise UserError(f"{path}: no such file or folder.")
    name = path.name.lower()
    if name.endswith(".json"):
        return "json"
    if NEMO_NAME.search(name):
        return "nemo"
    with path.open("rb") as handle:
        head = handle.read(65536).decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    first = head.split("\n", 1)[0].rstrip("\r")
    if first.startswith("{") and '"sequences"' in first:
        return "whisper"
    if name.endswith(".jsonl"):
        return None
    if head[:1] in ("{", "["):
        return "json"
    columns = first.split("\t")
    if {"utt", "text", "score"} <= set(columns):
        return "tsv"
    return None


def _apply_refs(utts: list[Utterance], ref: Path, source: Path) -> None:
    """Every utterance's reference from a Kaldi/ESPnet `text` file or a NeMo manifest, which must name exactly
    the list's utterances: a reference with no hypotheses would leave its words out of the WER unseen."""
    with ref.open("rb") as handle:
        manifest = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
    if manifest:
        refs = {uid: (number, entry["text"]) for number, uid, entry in read_manifest(ref)}
    else:
        refs = keyed_lines(ref, "reference file", "Kaldi-style `UTT words` lines (data/SET/text)")
    for utt in utts:
        if utt.id not in refs:
            raise UserError(
                f"{ref}: no reference for utterance {utt.id!r} of {source}; give the reference file of the same "
                "utterances (Kaldi's and ESPnet's data/SET/text)."
            )
        utt.ref = refs[utt.id][1].strip()
    have = {u.id for u in utts}
    for uid, (number, _) in refs.items():
        if uid not in have:
            raise UserError(
                f"{ref}:{number}: utterance {uid!r} has no hypotheses in {source}; give it at least one (an empty "
                "one where nothing was recognised), or leave it out of the reference file."
            )


def layout_files(inputs: Sequence[str | Path], fmt: str, targets: Sequence[Path]) -> list[Path]:
    """Every file the layouts' writers will make beside the rescored JSON `targets` (OUTPUT_DIR/NAME.rescored.json)
    of `inputs`, each input's layout recognised (or `fmt`): what `--overwrite` guards, known before any work."""
    return [
        file
        for path, target in zip(inputs, targets)
        if Path(path).exists()  # a missing input is named by its reader, after the output check
        for file in files_written(detect_format(Path(path), fmt), target.with_suffix(""))
    ]


def files_written(layout: str, stem: Path) -> list[Path]:
    """Every file `write_first_best` may write for a list in `layout`: checked before any work (`--overwrite`)
    and cleared before writing, so that no file of an earlier run is left beside a new one."""
    best = best_output(layout, stem)
    return [] if best is None else [best, *FORMATS[layout].companions(stem)]


def best_output(layout: str, stem: Path) -> Path | None:
    """Where the re-ranked 1-best of a list in `layout` goes beside OUTPUT_DIR/NAME.rescored.json (`stem` without
    `.json`); None for JSON layouts, whose rescored JSON is that already."""
    spec = FORMATS.get(layout)
    return spec.best_path(stem) if spec is not None and spec.best_path is not None else None


def write_first_best(
    layout: str, stem: Path, utts: Sequence[Utterance], combine: Callable[[Hypothesis], float]
) -> Path | None:
    """The hypothesis with the highest `combine` of each utterance (ties: the earlier), written in the layout's
    own form; returns the path written, None for JSON layouts."""
    spec = FORMATS.get(layout)
    if spec is None or spec.write_best is None:
        return None
    chosen = []
    for utt in utts:
        scores = [combine(h) for h in utt.hyps]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        chosen.append((utt, utt.hyps[best], scores[best]))
    return spec.write_best(stem, chosen)


FORMATS: dict[str, NbestFormat] = {
    "json": NbestFormat(
        "json",
        "awslabs/mlm-scoring dict or list of {id, ref, hyps}",
        lambda p, r: read_nbest(p)[0],
        None,
        None,
    ),
    "espnet": NbestFormat(
        "espnet",
        "ESPnet2 decoding folder (1best_recog/, 2best_recog/, ...)",
        read_espnet,
        write_espnet,
        espnet_best,
        lambda stem: [espnet_best(stem).with_name("score")],
    ),
    "kaldi": NbestFormat(
        "kaldi",
        "Kaldi n-best archive (words_text, acwt, lmwt.withlm)",
        read_kaldi,
        write_kaldi,
        kaldi_best,
    ),
    "nemo": NbestFormat(
        "nemo",
        "NeMo beams file (text<TAB>score)",
        read_nemo,
        write_nemo,
        nemo_best,
        lambda stem: [nemo_manifest(stem)],
    ),
    "whisper": NbestFormat(
        "whisper",
        "JSON lines {id, sequences, sequences_scores}",
        read_whisper,
        write_whisper,
        whisper_best,
    ),
    "tsv": NbestFormat("tsv", "table with a header utt, text, score, ...", read_tsv, write_tsv, tsv_best),
}
