"""N-best lists in the layouts recognizers write, read into `Utterance`s and the re-ranked 1-best written back.

One reader and one writer per layout, in `FORMATS`, keyed by the name `--format` takes:

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

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.pll.nbest import FORMATS as JSON_FORMATS
from electra.pll.nbest import Hypothesis, Utterance, read_nbest, read_utf8

KALDI_ACOUSTIC_SCALE = 1.0 / 12.0  # steps/rnnlmrescore.sh's default --inv-acwt 12
ESPNET_TEXT_FILES = ("text", "token", "token_int", "text_nospecial")
_ESPNET_RANK = re.compile(r"(\d+)best_recog")
_NEMO_NAME = re.compile(r"preds_out_width(\d+)")
_TENSOR = re.compile(r"tensor\(\s*([^,)]+)")


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


# ---------------------------------------------------------------------------------------------------- reading


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
        if _espnet_jobs(path):
            return "espnet"
        if (path / "words_text").is_file():
            return "kaldi"
        return None
    if not path.is_file():
        raise UserError(f"{path}: no such file or folder.")
    name = path.name.lower()
    if name.endswith(".json"):
        return "json"
    if _NEMO_NAME.search(name):
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


def _lines(path: Path, what: str, expected: str) -> list[tuple[int, str]]:
    """(line number, line) of a text file, blank lines left out; numbered as editors number them."""
    text = read_utf8(path, what, expected)
    lines = text.split("\n")
    return [(n, line.rstrip("\r")) for n, line in enumerate(lines, start=1) if line.strip()]


def _keyed(path: Path, what: str, expected: str) -> dict[str, tuple[int, str]]:
    """A Kaldi-style `KEY value...` file: key -> (line number, the rest of the line, stripped)."""
    out: dict[str, tuple[int, str]] = {}
    for number, line in _lines(path, what, expected):
        key, *rest_of_line = line.split(None, 1)  # Kaldi separates the key by a space; tabs are read alike
        rest = rest_of_line[0] if rest_of_line else ""
        if key in out:
            raise UserError(
                f"{path}:{number}: key {key!r} appears twice (first on line {out[key][0]}); give every key once."
            )
        out[key] = (number, rest.strip())
    return out


def _number(path: Path, number: int, raw: str, what: str) -> float:
    """A finite number read from a file, or one line naming FILE:LINE; ESPnet's `tensor(-3.25, ...)` too."""
    match = _TENSOR.match(raw.strip())
    try:
        value = float((match.group(1) if match else raw).strip("[] "))
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        shown = repr(raw.strip()) if raw.strip() else "empty"
        raise UserError(
            f"{path}:{number}: {what} is {shown}, not a finite number; give a number on every line "
            "(a log score or cost), e.g. -12.5."
        )
    return value


# ESPnet


def _espnet_jobs(path: Path) -> list[Path]:
    """The folders holding `Nbest_recog/`: `path` itself, or the `output.N/` of an ESPnet logdir."""
    if any(_ESPNET_RANK.fullmatch(p.name) and p.is_dir() for p in path.iterdir()):
        return [path]
    jobs = [p for p in path.glob("output.*") if p.is_dir() and (p / "1best_recog").is_dir()]
    return sorted(jobs, key=lambda p: (len(p.name), p.name))


def _read_espnet(path: Path, ref: Path | None) -> list[Utterance]:
    jobs = _espnet_jobs(path)
    if not jobs:
        raise UserError(
            f"{path}: no 1best_recog/ folder (nor output.N/1best_recog/); give the folder ESPnet's asr_inference "
            "wrote (--output_dir), or its logdir."
        )
    utts: list[Utterance] = []
    seen: dict[str, Path] = {}
    for job in jobs:
        for utt in _read_espnet_job(job):
            if utt.id in seen:
                raise UserError(
                    f"{job}: utterance {utt.id!r} is also in {seen[utt.id]}; give each utterance once."
                )
            seen[utt.id] = job
            utts.append(utt)
    return utts


def _read_espnet_job(job: Path) -> list[Utterance]:
    ranks = sorted(
        (int(m.group(1)), p) for p in job.iterdir() if p.is_dir() and (m := _ESPNET_RANK.fullmatch(p.name))
    )
    if not ranks or ranks[0][0] != 1:
        raise UserError(f"{job}: no 1best_recog/ folder; ESPnet numbers its n-best folders from 1best_recog.")
    expected = "ESPnet's `UTT value` lines"
    order: list[str] = []
    hyps: dict[str, list[Hypothesis]] = {}
    for rank, folder in ranks:
        text_file, score_file = folder / "text", folder / "score"
        if not text_file.is_file():
            raise UserError(
                f"{folder}: no 'text' file (a model decoded without a token list writes only 'token'); "
                "decode with the token list so that ESPnet writes the text."
            )
        texts = _keyed(text_file, "ESPnet text file", expected)
        if not score_file.is_file():
            raise UserError(f"{folder}: no 'score' file beside 'text'; each hypothesis needs ESPnet's score.")
        scores = _keyed(score_file, "ESPnet score file", expected)
        features = _espnet_features(folder)
        for key, (number, text) in texts.items():
            if key not in scores:
                raise UserError(
                    f"{text_file}:{number}: hypothesis {key!r} has no score in {score_file}; give every "
                    "hypothesis its score line (as ESPnet writes them), or leave it out of 'text'."
                )
            line, raw = scores[key]
            extra = {}
            for name, (feature_file, values) in features.items():
                if key not in values:
                    raise UserError(
                        f"{text_file}:{number}: hypothesis {key!r} has no line in {feature_file}; every "
                        "hypothesis needs every numeric field, or remove that file."
                    )
                extra[name] = values[key]
            if rank == 1:
                order.append(key)
                hyps[key] = []
            elif key not in hyps:
                raise UserError(
                    f"{text_file}:{number}: utterance {key!r} has a {rank}-best hypothesis but none in "
                    f"{ranks[0][1] / 'text'}; an utterance's hypotheses start at 1best_recog."
                )
            score = _number(score_file, line, raw, f"the score of {key!r}")
            hyps[key].append(Hypothesis(text=text, score=score, key=f"{rank}best_recog", extra=extra))
        for key, (line, _) in scores.items():
            if key not in texts:
                raise UserError(
                    f"{score_file}:{line}: {key!r} has a score but no hypothesis in {text_file}; give its text, "
                    "or leave its score out."
                )
    return [Utterance(id=key, ref=None, hyps=hyps[key]) for key in order]


def _espnet_features(folder: Path) -> dict[str, tuple[Path, dict[str, float]]]:
    """Each further file of `KEY number` lines in an n-best folder (ESPnet's `rtf`, say): a feature of its name.
    Files whose first value is not a number (tokens, intermediate CTC texts) are not features and are skipped."""
    features = {}
    for file in sorted(folder.iterdir()):
        if not file.is_file() or file.name in (*ESPNET_TEXT_FILES, "score") or "." in file.name:
            continue
        values = _keyed(file, "ESPnet n-best file", "ESPnet's `UTT value` lines")
        first = next(iter(values.values()), None)
        if first is None or not _is_number_text(first[1]):
            continue
        features[file.name] = (
            file,
            {k: _number(file, n, raw, f"{file.name} of {k!r}") for k, (n, raw) in values.items()},
        )
    return features


def _is_number_text(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return bool(_TENSOR.match(raw))
    return True


# Kaldi


def _kaldi_cost_files(path: Path) -> list[tuple[Path, str]]:
    """(cost file, feature name) of a Kaldi n-best archive: acwt -> am_score, lmwt.withlm -> lm_score, lmwt.X ->
    X_score."""
    files = [(path / "acwt", "am_score"), (path / "lmwt.withlm", "lm_score")]
    for file in sorted(path.glob("lmwt.*")):
        if file.name != "lmwt.withlm" and file.is_file():
            files.append((file, file.name.removeprefix("lmwt.") + "_score"))
    return files


def _read_kaldi(path: Path, ref: Path | None) -> list[Utterance]:
    words_file = path / "words_text"
    if not words_file.is_file():
        raise UserError(
            f"{path}: no words_text (the n-best words keyed UTT-N); make it from nbest-to-linear's words with "
            "`utils/int2sym.pl -f 2- words.txt < words > words_text`."
        )
    expected = "Kaldi's `UTT-N value` lines"
    words = _keyed(words_file, "Kaldi n-best words", expected)
    costs = []
    for file, name in _kaldi_cost_files(path):
        if not file.is_file():
            raise UserError(
                f"{path}: no {file.name} beside words_text; nbest-to-linear writes the acoustic costs (acwt) and "
                "the LM costs (lmwt.withlm) that give each hypothesis its score."
            )
        costs.append((file, name, _keyed(file, "Kaldi cost file", expected)))
    order: list[str] = []
    by_utt: dict[str, list[tuple[int, Hypothesis]]] = {}
    for key, (number, text) in words.items():
        utt, _, rank = key.rpartition("-")
        if not utt or not rank.isdigit() or int(rank) < 1:
            raise UserError(
                f"{words_file}:{number}: key {key!r} is not UTT-N (an utterance id, a hyphen and the rank from "
                "1), which lattice-to-nbest writes."
            )
        extra = {}
        for file, name, values in costs:
            if key not in values:
                raise UserError(
                    f"{words_file}:{number}: hypothesis {key!r} has no cost in {file}; give every hypothesis "
                    "its line there (nbest-to-linear writes one per hypothesis)."
                )
            line, raw = values[key]
            extra[name] = -_number(file, line, raw, f"the cost of {key!r}")
        score = extra["am_score"] * KALDI_ACOUSTIC_SCALE + extra["lm_score"]
        if utt not in by_utt:
            order.append(utt)
            by_utt[utt] = []
        by_utt[utt].append((int(rank), Hypothesis(text=text, score=score, key=key, extra=extra)))
    for file, _, values in costs:
        for key, (line, _) in values.items():
            if key not in words:
                raise UserError(
                    f"{file}:{line}: {key!r} has a cost but no words in {words_file}; give its words, or leave "
                    "its cost out."
                )
    return [
        Utterance(id=u, ref=None, hyps=[h for _, h in sorted(by_utt[u], key=lambda p: p[0])]) for u in order
    ]


# NeMo


def _read_nemo(path: Path, ref: Path | None) -> list[Utterance]:
    rows = []
    for number, line in _lines(path, "NeMo beams file", "NeMo's `text<TAB>score` lines"):
        text, tab, raw = line.rpartition("\t")
        if not tab:
            raise UserError(
                f"{path}:{number}: no tab-separated score after the hypothesis; NeMo writes each beam as "
                "`text<TAB>score`: give every line its score."
            )
        rows.append((number, text.strip(), _number(path, number, raw, "the beam's score")))
    manifest = _read_manifest(ref) if ref is not None else None
    widths = _NEMO_NAME.findall(path.name)  # the last: a re-ranked copy keeps the name it was made from
    match = int(widths[-1]) if widths else None
    if manifest is None and match is None:
        raise UserError(
            f"{path}: the beam width cannot be told without the manifest; pass the manifest the beams were "
            "decoded from as --dev-ref/--test-ref."
        )
    if manifest is None:
        width = match
        named = [(str(i + 1), {}) for i in range(-(-len(rows) // width))]
    else:
        width = match if match else max(len(rows) // max(len(manifest), 1), 1)
        named = [(uid, entry) for _, uid, entry in manifest]
        if len(rows) < width * len(manifest):
            number = manifest[len(rows) // width][0]
            raise UserError(
                f"{ref}:{number}: utterance {manifest[len(rows) // width][1]!r} has no beams (or too few) in "
                f"{path}, which holds {len(rows)} lines for {len(manifest)} utterances of {width} beams; give "
                "the manifest the beams were decoded from (the same utterances, in order)."
            )
    if len(rows) > width * len(named):  # more beams than the manifest's utterances take
        raise UserError(
            f"{path}:{rows[width * len(named)][0]}: beams beyond the {len(named)} utterances of {ref} "
            f"({width} each); give the manifest and the beams file of one decoding."
        )
    if len(rows) < width * len(named):  # no manifest: the last utterance is short of beams
        raise UserError(
            f"{path}:{rows[-1][0]}: the last utterance has {len(rows) % width} of its {width} beams (width{width} "
            "in the file's name); give the whole beams file NeMo wrote, or its manifest as --dev-ref/--test-ref."
        )
    utts = []
    for index, (uid, entry) in enumerate(named):
        beams = rows[index * width : (index + 1) * width]
        hyps = [Hypothesis(text=text, score=score, key=f"line {n}") for n, text, score in beams]
        ref_text = entry.get("text") if entry else None
        extra = {k: v for k, v in entry.items() if k != "text"}
        utts.append(
            Utterance(
                id=uid, ref=ref_text.strip() if isinstance(ref_text, str) else None, hyps=hyps, extra=extra
            )
        )
    return utts


def _read_manifest(path: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """(line, utterance id, entry) of a NeMo manifest: JSON lines with `text`; the id is the audio file's name
    without its suffix (the line number where there is no `audio_filepath`)."""
    entries = []
    for number, line in _lines(path, "NeMo manifest", "JSON lines with audio_filepath and text"):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = None
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise UserError(
                f"{path}:{number}: not a manifest line (a JSON object with 'audio_filepath' and a string 'text')."
            )
        audio = entry.get("audio_filepath")
        uid = Path(audio).stem if isinstance(audio, str) and audio else str(number)
        entries.append((number, uid, entry))
    ids: dict[str, int] = {}
    for number, uid, _ in entries:
        if uid in ids:
            raise UserError(
                f"{path}:{number}: utterance {uid!r} (its audio file's name) is also on line {ids[uid]}; give "
                "every audio file a distinct name."
            )
        ids[uid] = number
    return entries


# Whisper-style JSON lines


def _read_whisper(path: Path, ref: Path | None) -> list[Utterance]:
    utts = []
    seen: dict[str, int] = {}
    for number, line in _lines(path, "n-best JSON lines", "one JSON object per utterance"):
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            raise UserError(
                f'{where}: not a JSON object; write one utterance a line: {{"id", "sequences", "sequences_scores"}}.'
            )
        texts, scores = record.get("sequences"), record.get("sequences_scores")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise UserError(
                f"{where}: 'sequences' must be the list of decoded texts (processor.batch_decode)."
            )
        if not texts:
            raise UserError(
                f"{where}: an utterance with no hypotheses ('sequences' is empty); give it at least one, or leave "
                "the line out."
            )
        if not isinstance(scores, list) or len(scores) != len(texts):
            count = len(scores) if isinstance(scores, list) else 0
            raise UserError(
                f"{where}: {len(texts)} sequences but {count} sequences_scores; every hypothesis needs its score "
                "(generate's sequences_scores, with output_scores=True)."
            )
        uid = str(record.get("id", number))
        if uid in seen:
            raise UserError(
                f"{where}: utterance id {uid!r} is also on line {seen[uid]}; give each utterance once."
            )
        seen[uid] = number
        features = {
            k: v
            for k, v in record.items()
            if isinstance(v, list) and k not in ("sequences", "sequences_scores")
        }
        for name, values in [("sequences_scores", scores), *features.items()]:
            if len(values) != len(texts):
                raise UserError(
                    f"{where}: {name!r} has {len(values)} values for {len(texts)} sequences; give one each."
                )
            for value in values:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise UserError(
                        f"{where}: {name!r} holds {json.dumps(value)}, not a finite number; give one number per "
                        "sequence."
                    )
        hyps = [
            Hypothesis(
                text=text.strip(),
                score=float(scores[i]),
                extra={name: float(values[i]) for name, values in features.items()},
            )
            for i, text in enumerate(texts)
        ]
        reference = record.get("ref")
        if reference is not None and not isinstance(reference, str):
            raise UserError(f"{where}: 'ref' must be a string (the utterance's transcript).")
        extra = {
            k: v
            for k, v in record.items()
            if k not in ("id", "ref", "sequences", "sequences_scores", *features)
        }
        utts.append(
            Utterance(
                id=uid, ref=reference.strip() if reference is not None else None, hyps=hyps, extra=extra
            )
        )
    return utts


# TSV with a header


def _read_tsv(path: Path, ref: Path | None) -> list[Utterance]:
    lines = _lines(path, "n-best table", "a tab-separated table with a header utt, text, score")
    if not lines:
        raise UserError(f"{path}: holds no utterances.")
    header_line, header = lines[0][0], lines[0][1].split("\t")
    missing = [c for c in ("utt", "text", "score") if c not in header]
    if missing or len(set(header)) != len(header):
        why = f"no {missing[0]!r} column" if missing else "a column named twice"
        raise UserError(
            f"{path}:{header_line}: {why} in the header; the first line names the columns, tab-separated: utt, "
            "text, score, then any numeric fields (and ref, the transcript)."
        )
    numeric = [c for c in header if c not in ("utt", "text", "ref")]
    order: list[str] = []
    by_utt: dict[str, Utterance] = {}
    for number, line in lines[1:]:
        cells = line.split("\t")
        if len(cells) != len(header):
            raise UserError(
                f"{path}:{number}: {len(cells)} tab-separated cells for the header's {len(header)} columns; give "
                "every row every column (an empty text where the recognizer heard nothing)."
            )
        row = dict(zip(header, cells))
        uid = row["utt"].strip()
        if not uid:
            raise UserError(f"{path}:{number}: no utterance id in column 'utt'.")
        values = {c: _number(path, number, row[c], f"column {c!r}") for c in numeric}
        reference = row["ref"].strip() if "ref" in row else None
        if uid not in by_utt:
            order.append(uid)
            by_utt[uid] = Utterance(id=uid, ref=reference)
        elif by_utt[uid].ref != reference:
            raise UserError(
                f"{path}:{number}: utterance {uid!r} has another 'ref' here than on its first row; give each "
                "utterance one reference."
            )
        hyp = Hypothesis(
            text=row["text"].strip(),
            score=values.pop("score"),
            key=f"line {number}",
            extra=values,
        )
        by_utt[uid].hyps.append(hyp)
    return [by_utt[u] for u in order]


# References


def _apply_refs(utts: list[Utterance], ref: Path, source: Path) -> None:
    """Every utterance's reference from a Kaldi/ESPnet `text` file or a NeMo manifest, which must name exactly
    the list's utterances: a reference with no hypotheses would leave its words out of the WER unseen."""
    with ref.open("rb") as handle:
        manifest = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
    if manifest:
        refs = {uid: (number, entry["text"]) for number, uid, entry in _read_manifest(ref)}
    else:
        refs = _keyed(ref, "reference file", "Kaldi-style `UTT words` lines (data/SET/text)")
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


# ---------------------------------------------------------------------------------------------------- writing


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


def _keyed_text(rows: Sequence[tuple[str, str]]) -> str:
    return "".join(f"{key} {value}".rstrip() + "\n" for key, value in rows)


def _write_espnet(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    folder = _espnet_best(stem).parent
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomically(folder / "score", _keyed_text([(u.id, repr(s)) for u, _, s in chosen]))
    write_text_atomically(folder / "text", _keyed_text([(u.id, h.text) for u, h, _ in chosen]))
    return folder / "text"


def _espnet_best(stem: Path) -> Path:
    return stem / "1best_recog" / "text"


def _write_kaldi(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    path = _kaldi_best(stem)
    write_text_atomically(path, _keyed_text([(u.id, h.text) for u, h, _ in chosen]))
    return path


def _kaldi_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".text")


def _write_nemo(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    """The width-1 beams file, and, where the utterances came from a manifest, the manifest with `pred_text`
    (what NeMo's speech_to_text_eval.py scores)."""
    path = _nemo_best(stem)
    if all("audio_filepath" in u.extra for u, _, _ in chosen):
        lines = [
            json.dumps({**u.extra, "text": u.ref or "", "pred_text": h.text}, ensure_ascii=False)
            for u, h, _ in chosen
        ]
        write_text_atomically(_nemo_manifest(stem), "".join(f"{x}\n" for x in lines))
    write_text_atomically(path, "".join(f"{h.text}\t{s!r}\n" for _, h, s in chosen))
    return path


def _nemo_manifest(stem: Path) -> Path:
    return stem.with_name(stem.name + ".manifest.json")


def _nemo_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".preds_out_width1.tsv")


def _write_whisper(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    path = _whisper_best(stem)
    lines = []
    for utt, hyp, score in chosen:
        record: dict[str, Any] = {"id": utt.id, "sequences": [hyp.text], "sequences_scores": [score]}
        if utt.ref is not None:
            record["ref"] = utt.ref
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    write_text_atomically(path, "".join(lines))
    return path


def _whisper_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".jsonl")


def _write_tsv(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    path = _tsv_best(stem)
    with_ref = all(u.ref is not None for u, _, _ in chosen)
    rows = ["utt\ttext\tscore" + ("\tref" if with_ref else "")]
    for utt, hyp, score in chosen:
        rows.append(f"{utt.id}\t{hyp.text}\t{score!r}" + (f"\t{utt.ref}" if with_ref else ""))
    write_text_atomically(path, "\n".join(rows) + "\n")
    return path


def _tsv_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".tsv")


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
        _read_espnet,
        _write_espnet,
        _espnet_best,
        lambda stem: [_espnet_best(stem).with_name("score")],
    ),
    "kaldi": NbestFormat(
        "kaldi",
        "Kaldi n-best archive (words_text, acwt, lmwt.withlm)",
        _read_kaldi,
        _write_kaldi,
        _kaldi_best,
    ),
    "nemo": NbestFormat(
        "nemo",
        "NeMo beams file (text<TAB>score)",
        _read_nemo,
        _write_nemo,
        _nemo_best,
        lambda stem: [_nemo_manifest(stem)],
    ),
    "whisper": NbestFormat(
        "whisper",
        "JSON lines {id, sequences, sequences_scores}",
        _read_whisper,
        _write_whisper,
        _whisper_best,
    ),
    "tsv": NbestFormat("tsv", "table with a header utt, text, score, ...", _read_tsv, _write_tsv, _tsv_best),
}
