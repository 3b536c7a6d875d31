"""N-best lists in two JSON formats, read strictly (bad input names the file and entry) and written back.

- "mlm-scoring" (awslabs/mlm-scoring): {utt_id: {"hyp_1": {"score": s, "text": t}, ..., "ref": r}}.
- "list": [{"id": utt_id, "ref": r, "hyps": [{"text": t, "score": s}, ...]}, ...].

A score is a log-domain acoustic (or first-pass) score: higher is better. Written lists keep the input format,
add `pll` and `combined` to every hypothesis and order hypotheses best first by the combined score.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.errors import UserError

FORMATS = ("mlm-scoring", "list")


@dataclass
class Hypothesis:
    text: str
    score: float
    pll: float | None = None
    key: str | None = None  # "hyp_3" in the mlm-scoring format


@dataclass
class Utterance:
    id: str
    ref: str | None
    hyps: list[Hypothesis] = field(default_factory=list)


def read_nbest(path: str | Path) -> tuple[list[Utterance], str]:
    """(utterances, format name); every error is one line naming the file and the entry."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: n-best file does not exist.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{path}: not valid JSON ({exc}); expected an mlm-scoring dict or a list of utterances."
        ) from None
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
        raise UserError(f"{path}:{uid}: empty hypothesis list (no hyp_N fields).")
    return Utterance(id=uid, ref=_read_ref(path, uid, entry.get("ref")), hyps=hyps)


def _read_list_entry(path: Path, index: int, entry: Any) -> Utterance:
    if not isinstance(entry, dict):
        raise UserError(f"{path}:entry {index}: must be an object with id, ref and hyps.")
    uid = str(entry.get("id", index))
    hyps_raw = entry.get("hyps")
    if not isinstance(hyps_raw, list):
        raise UserError(f"{path}:{uid}: 'hyps' must be a list of {{text, score}} objects.")
    if not hyps_raw:
        raise UserError(f"{path}:{uid}: empty hypothesis list.")
    hyps = [_read_hyp(path, f"{uid}/hyps[{i}]", h) for i, h in enumerate(hyps_raw)]
    return Utterance(id=uid, ref=_read_ref(path, uid, entry.get("ref")), hyps=hyps)


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
    pll = float(pll) if isinstance(pll, (int, float)) and not isinstance(pll, bool) else None
    return Hypothesis(text=text.strip(), score=float(score), pll=pll, key=key)


def write_nbest(path: str | Path, utts: list[Utterance], fmt: str, lam: float) -> None:
    """Write lists best first by acoustic + lam * PLL (by acoustic score alone when unscored), in `fmt`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def ordered(utt: Utterance) -> list[tuple[Hypothesis, float]]:
        pairs = [(h, combined_score(h, lam) if h.pll is not None else h.score) for h in utt.hyps]
        return sorted(pairs, key=lambda p: -p[1])

    def fields(h: Hypothesis, combined: float) -> dict[str, Any]:
        if h.pll is None:  # unscored lists (from `electra nbest`) keep the plain {text, score} shape
            return {"text": h.text, "score": h.score}
        return {"text": h.text, "score": h.score, "pll": h.pll, "combined": combined}

    if fmt == "mlm-scoring":
        out: Any = {}
        for utt in utts:
            entry: dict[str, Any] = {
                f"hyp_{i}": fields(h, c) for i, (h, c) in enumerate(ordered(utt), start=1)
            }
            if utt.ref is not None:
                entry["ref"] = utt.ref
            out[utt.id] = entry
    elif fmt == "list":
        out = [{"id": u.id, "ref": u.ref, "hyps": [fields(h, c) for h, c in ordered(u)]} for u in utts]
    else:
        raise ValueError(f"unknown n-best format {fmt!r}")
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def combined_score(hyp: Hypothesis, lam: float) -> float:
    if hyp.pll is None:
        raise ValueError(f"hypothesis {hyp.text!r} has not been scored")
    return hyp.score + lam * hyp.pll
