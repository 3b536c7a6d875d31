"""N-best lists in two JSON formats, read strictly (bad input names the file and entry) and written back.

- "mlm-scoring" (awslabs/mlm-scoring): {utt_id: {"hyp_1": {"score": s, "text": t}, ..., "ref": r}}.
- "list": [{"id": utt_id, "ref": r, "hyps": [{"text": t, "score": s}, ...]}, ...].

A score is a log-domain acoustic (or first-pass) score: higher is better. Written lists keep the input format
and every field the user's hypotheses and utterances carried (a recognizer's `am_score`, `lm_score`, timings...),
add `pll` (and `pieces`, the number of scored word pieces; `pll_scorer`, which model and method gave the PLL) to
every hypothesis, and, when rescored, `combined`, ordering hypotheses best first by it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.core.errors import UserError
from electra.core.files import decode_user_text, refusing_duplicate_keys, require_file, write_text_atomically

FORMATS = ("mlm-scoring", "list")


# Fields this module owns; anything else on a hypothesis or an utterance is the user's and is written back as read.
OWN_HYP_FIELDS = ("text", "score", "pll", "pieces", "pll_scorer", "combined")
OWN_UTT_FIELDS = ("id", "ref", "hyps")


@dataclass
class Hypothesis:
    text: str
    score: float
    pll: float | None = None
    key: str | None = None  # "hyp_3" in the mlm-scoring format
    pieces: int | None = None  # word pieces the PLL sums over (for length normalisation)
    extra: dict[str, Any] = field(default_factory=dict)  # the user's other fields, kept on write
    # The model and method that gave `pll` (electra.pll.scoring.scorer_identity); None when unknown (a hand-made scorer, or
    # a list scored before the record existed). Saved with the PLL so a later `rescore --scores` can refuse mixing.
    scorer: str | None = None


@dataclass
class Utterance:
    id: str
    ref: str | None
    hyps: list[Hypothesis] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def read_nbest(path: str | Path, text: str | None = None) -> tuple[list[Utterance], str]:
    """(utterances, format name); every error is one line naming the file and the entry.

    `text` is the file's content when it was read already (standard input, named `path` in messages)."""
    path = Path(path)
    if text is None:
        text = read_utf8(path, "n-best file", "an n-best JSON file")
    try:
        data = load_json(path, text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}: not valid JSON ({exc}); expected an mlm-scoring dict or a list of utterances."
        ) from None
    return parse_nbest(path, data)


def load_json(path: Path, text: str) -> Any:
    """`text` parsed as JSON, a key that appears twice in one object refused in one line: Python's parser keeps
    the last, so an mlm-scoring list with an utterance id (or a `hyp_3`) twice lost the first silently."""

    unique = refusing_duplicate_keys(
        lambda key: (
            f"{path}: key {key!r} appears twice in one JSON object (the second would silently replace "
            "the first); give every utterance id and hypothesis key once."
        )
    )
    return json.loads(text.lstrip("\ufeff"), object_pairs_hook=unique)


def read_utf8(path: Path, kind: str, expected: str) -> str:
    """A file's text, or a one-line error naming it: missing, or not text (saying what was expected)."""
    require_file(path, kind)
    return decode_user_text(path.read_bytes(), str(path), expected)


def looks_like_nbest(text: str) -> bool:
    """Whether a file's content is an n-best JSON document, not sentences or JSON lines of scores.

    One JSON line `{"text": ..., "pll": ...}` is valid JSON too; an n-best dict never has a string 'text' field."""
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped[:1] not in ("{", "["):
        return False
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        return False
    return not (isinstance(data, dict) and isinstance(data.get("text"), str))


def parse_nbest(path: Path, data: Any) -> tuple[list[Utterance], str]:
    if isinstance(data, dict):
        utts = [_read_mlm_scoring_entry(path, str(uid), entry) for uid, entry in data.items()]
        fmt = "mlm-scoring"
    elif isinstance(data, list):
        utts = [_read_list_entry(path, i, entry) for i, entry in enumerate(data)]
        fmt = "list"
    else:
        raise UserError(
            f"{path}: top level must be a JSON object (mlm-scoring format) or a list of utterances."
        )
    if not utts:
        raise UserError(f"{path}: holds no utterances.")
    seen: set[str] = set()
    for utt in utts:
        if utt.id in seen:
            raise UserError(f"{path}:{utt.id}: utterance id appears twice.")
        seen.add(utt.id)
    return utts, fmt


def _hyp_index(key: str) -> int:
    match = re.fullmatch(r"hyp_(\d+)", key)
    return int(match.group(1)) if match else -1


def _read_mlm_scoring_entry(path: Path, uid: str, entry: Any) -> Utterance:
    if not isinstance(entry, dict):
        raise UserError(f"{path}:{uid}: entry must be an object of hyp_N fields and ref.")
    keys = sorted((k for k in entry if k.startswith("hyp_")), key=_hyp_index)
    bad = [k for k in keys if _hyp_index(k) < 0]
    if bad:
        raise UserError(f"{path}:{uid}: field {bad[0]!r} is not hyp_<number>.")
    hyps = [_read_hyp(path, f"{uid}/{k}", entry[k], key=k) for k in keys]
    if not hyps:
        raise UserError(
            f"{path}:{uid}: empty hypothesis list (no hyp_N fields); give it at least one hypothesis (an empty "
            "'text' where the recognizer heard nothing), or leave the utterance out."
        )
    extra = {k: v for k, v in entry.items() if not k.startswith("hyp_") and k != "ref"}
    return Utterance(id=uid, ref=_read_ref(path, uid, entry.get("ref")), hyps=hyps, extra=extra)


def _read_list_entry(path: Path, index: int, entry: Any) -> Utterance:
    if not isinstance(entry, dict):
        raise UserError(f"{path}:entry {index}: must be an object with id, ref and hyps.")
    uid = str(entry.get("id", index))
    hyps_raw = entry.get("hyps")
    if not isinstance(hyps_raw, list):
        raise UserError(f"{path}:{uid}: 'hyps' must be a list of {{text, score}} objects.")
    if not hyps_raw:
        raise UserError(
            f"{path}:{uid}: empty hypothesis list; give it at least one hypothesis (an empty 'text' where the "
            "recognizer heard nothing), or leave the utterance out."
        )
    hyps = [_read_hyp(path, f"{uid}/hyps[{i}]", h) for i, h in enumerate(hyps_raw)]
    extra = {k: v for k, v in entry.items() if k not in OWN_UTT_FIELDS}
    return Utterance(id=uid, ref=_read_ref(path, uid, entry.get("ref")), hyps=hyps, extra=extra)


def _read_ref(path: Path, uid: str, ref: Any) -> str | None:
    if ref is None:
        return None
    if not isinstance(ref, str):
        raise UserError(f"{path}:{uid}: 'ref' must be a string.")
    return ref.strip()


def _read_hyp(path: Path, where: str, hyp: Any, key: str | None = None) -> Hypothesis:
    if not isinstance(hyp, dict):
        raise UserError(f"{path}:{where}: hypothesis must be an object with text and score.")
    text, score = hyp.get("text"), hyp.get("score")
    if not isinstance(text, str):
        raise UserError(f"{path}:{where}: missing or non-string 'text'.")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise UserError(
            f"{path}:{where}: missing or non-numeric 'score' (a finite log score, higher is better)."
        )
    pll = hyp.get("pll")  # present in lists this tool wrote; kept so they can be read back
    pll = float(pll) if _is_number(pll) else None
    pieces = hyp.get("pieces")
    pieces = int(pieces) if _is_number(pieces) and pieces >= 0 else None
    scorer = hyp.get("pll_scorer") if pll is not None else None
    scorer = scorer if isinstance(scorer, str) else None
    extra = {k: v for k, v in hyp.items() if k not in OWN_HYP_FIELDS}
    return Hypothesis(
        text=text.strip(), score=float(score), pll=pll, key=key, pieces=pieces, extra=extra, scorer=scorer
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def write_nbest(
    path: str | Path | None,
    utts: list[Utterance],
    fmt: str,
    lam: float | None,
    ln_alpha: float = 0.0,
    ln_type: str = "gnmt",
    combine: Callable[[Hypothesis], float] | None = None,
) -> str:
    """Write lists in `fmt`; return the JSON text (to standard output when `path` is None).

    With `combine` (a fused score) or `lam` (score + lam * length-normalised PLL), hypotheses are ordered best first
    by it and carry `combined`; with neither (scoring only) they keep their order and gain `pll` and `pieces`."""

    def ordered(utt: Utterance) -> list[tuple[Hypothesis, float | None]]:
        if combine is not None:
            pairs = [(h, combine(h)) for h in utt.hyps]
            return sorted(pairs, key=lambda p: -p[1])
        if lam is None:
            return [(h, None) for h in utt.hyps]
        pairs = [
            (h, combined_score(h, lam, ln_alpha, ln_type) if h.pll is not None else h.score) for h in utt.hyps
        ]
        return sorted(pairs, key=lambda p: -p[1])

    def fields(h: Hypothesis, combined: float | None) -> dict[str, Any]:
        record: dict[str, Any] = {"text": h.text, "score": h.score}
        record.update(h.extra)
        if h.pll is not None:  # unscored lists (from `electra nbest`) keep the plain {text, score} shape
            record["pll"] = h.pll
            if h.pieces is not None:
                record["pieces"] = h.pieces
            if h.scorer is not None:
                record["pll_scorer"] = h.scorer
        if combined is not None and (h.pll is not None or combine is not None):
            record["combined"] = combined
        return record

    if fmt == "mlm-scoring":
        out: Any = {}
        for utt in utts:
            entry: dict[str, Any] = {
                f"hyp_{i}": fields(h, c) for i, (h, c) in enumerate(ordered(utt), start=1)
            }
            if utt.ref is not None:
                entry["ref"] = utt.ref
            entry.update(utt.extra)
            out[utt.id] = entry
    elif fmt == "list":
        out = [
            {"id": u.id, "ref": u.ref, **u.extra, "hyps": [fields(h, c) for h, c in ordered(u)]} for u in utts
        ]
    else:
        raise ValueError(f"unknown n-best format {fmt!r}")
    text = json.dumps(out, indent=1, ensure_ascii=False) + "\n"
    if path is not None:
        write_text_atomically(path, text)
    return text


LN_TYPES = ("gnmt", "length")


def length_penalty(pieces: int, alpha: float, kind: str = "gnmt") -> float:
    """The divisor of a length-normalised PLL: GNMT's ((5 + n) / 6)^alpha, or plainly n^alpha; 1 when alpha is 0.

    Longer hypotheses collect more negative log-probability terms, so a summed PLL prefers short (deleting)
    hypotheses; normalising removes part of that bias (Wu et al. 2016; mlm-scoring's `--ln`)."""
    if alpha == 0.0:
        return 1.0
    if kind == "gnmt":
        return ((5.0 + pieces) / 6.0) ** alpha
    if kind == "length":
        return max(pieces, 1) ** alpha
    raise ValueError(f"unknown length normalisation {kind!r}; choose one of {LN_TYPES}")


def combined_score(hyp: Hypothesis, lam: float, ln_alpha: float = 0.0, ln_type: str = "gnmt") -> float:
    if hyp.pll is None:
        raise ValueError(f"hypothesis {hyp.text!r} has not been scored")
    if ln_alpha and hyp.pieces is None:
        raise UserError(
            f"hypothesis {hyp.text!r} has a PLL but no 'pieces' count, which --ln needs; score it again "
            "with this version of `electra score`."
        )
    return hyp.score + lam * hyp.pll / length_penalty(hyp.pieces or 0, ln_alpha, ln_type)
