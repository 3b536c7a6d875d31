"""N-best lists from 16 kHz wav files with pocketsphinx (an optional extra: `pip install 'electra[asr]'`).

pocketsphinx's PyPI wheel bundles an English acoustic model, language model and dictionary, so this needs no
download. Its n-best path scores come back as probabilities in pocketsphinx's log base; we store their natural
log, so `score` is a log score like any other n-best input (higher is better).
"""

from __future__ import annotations

import itertools
import math
import re
import wave
from pathlib import Path

from electra.core.errors import UserError
from electra.pll.nbest import Hypothesis, Utterance, read_utf8

INSTALL_HINT = "pocketsphinx is not installed; install the ASR extra with: pip install 'electra[asr]'"


def read_transcription(path: Path) -> dict[str, str]:
    """Sphinx-style references, `<s> words </s> (utt_id)` per line, or plain `utt_id words` lines."""
    refs: dict[str, str] = {}
    text = read_utf8(path, "references file", "'<s> words </s> (utt_id)' or 'utt_id words' lines")
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        match = re.fullmatch(r"(.*)\(([^()]+)\)", line)
        if match:
            words = match.group(1).replace("<s>", " ").replace("</s>", " ")
            refs[match.group(2).strip()] = " ".join(words.split())
        elif " " in line:
            uid, words = line.split(None, 1)
            refs[uid] = words.strip()
        else:
            raise UserError(f"{path}:{lineno}: expected '<s> words </s> (utt_id)' or 'utt_id words'.")
    return refs


def read_wav(path: Path) -> bytes:
    try:
        with wave.open(str(path)) as wav:
            rate, channels, width = wav.getframerate(), wav.getnchannels(), wav.getsampwidth()
            frames = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        raise UserError(f"{path}: not a readable PCM wav file ({exc}).") from None
    if (rate, channels, width) != (16000, 1, 2):
        raise UserError(
            f"{path}: need 16 kHz mono 16-bit wav, got {rate} Hz, {channels} channel(s), {8 * width}-bit; "
            "convert it first (for example: sox in.wav -r 16000 -c 1 -b 16 out.wav)."
        )
    return frames


def decode_nbest(
    audio_dir: str | Path, nbest: int = 20, refs: dict[str, str] | None = None
) -> list[Utterance]:
    """Decode every *.wav in `audio_dir` (sorted by name) into an n-best list of up to `nbest` distinct texts."""
    try:
        from pocketsphinx import Decoder
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    audio_dir = Path(audio_dir)
    if not audio_dir.is_dir():
        raise UserError(f"{audio_dir}: audio directory does not exist.")
    wavs = sorted(audio_dir.glob("*.wav"))
    if not wavs:
        raise UserError(f"{audio_dir}: no .wav files.")
    decoder = Decoder(samprate=16000, loglevel="FATAL")
    utts = []
    for wav in wavs:
        decoder.start_utt()
        decoder.process_raw(read_wav(wav), full_utt=True)
        decoder.end_utt()
        hyps: list[Hypothesis] = []
        seen: set[str] = set()
        # The lattice yields paths best first; near-duplicates differ only in fillers, so keep distinct texts.
        for path in itertools.islice(decoder.nbest(), 10 * nbest):
            text = " ".join(path.hypstr.split())
            if text in seen or path.score <= 0:
                continue
            seen.add(text)
            hyps.append(Hypothesis(text=text, score=math.log(path.score)))
            if len(hyps) == nbest:
                break
        if not hyps:
            # No usable path: its single best text, or, where it has none (silence, noise), the empty text, which
            # every reader of the list (score, rescore) takes; an utterance without hypotheses is refused there.
            best = decoder.hyp()
            text = " ".join(best.hypstr.split()) if best is not None else ""
            hyps.append(Hypothesis(text=text, score=0.0))
        utts.append(Utterance(id=wav.stem, ref=(refs or {}).get(wav.stem), hyps=hyps))
    return utts
