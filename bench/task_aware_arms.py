"""The arms of `bench/task_aware.py`, by name: what each one trains, parsed once from its name.

ft                      fine-tune only
<corpora>[_mlm]_ft      continued pretraining on the corpora in order (tapt: the task's own texts; dapt: BM25's
                        domain text; dapt_tapt: DAPT, then TAPT), ELECTRA's objective or MLM, then fine-tune
<mt|meta>_<obj>[_tapt][_balanced]
                        MT-TARTAN (uniform weights) or META-TARTAN (meta-learned) with auxiliary objective
                        <obj> (electra, mlm, or any registered one) on TAPT and DAPT text, or on TAPT text alone
                        (`_tapt`); `_balanced` divides every term by its running mean
tlm_bm25, tlm_iss       TLM from scratch on BM25's domain text or on an ISS selection of the same size
"""

from __future__ import annotations

from dataclasses import dataclass

from electra.core.errors import UserError

# The grid (issue 54): fine-tuning, TAPT and DAPT with either objective, and MT-/META-TARTAN with TAPT and
# with TAPT+DAPT, with MLM (the paper's) or ELECTRA's objective as the auxiliary.
STUDY_ARMS = (
    "ft",
    "tapt_mlm_ft",
    "tapt_ft",
    "dapt_mlm_ft",
    "dapt_ft",
    "mt_mlm_tapt",
    "mt_mlm",
    "meta_mlm_tapt",
    "meta_mlm",
    "mt_electra_tapt",
    "mt_electra",
    "meta_electra_tapt",
    "meta_electra",
)
# Every arm this experiment has run, in the order its tables list them.
ARMS = (
    *STUDY_ARMS,
    "dapt_tapt_ft",
    "dapt_tapt_mlm_ft",
    "mt_electra_balanced",
    "meta_electra_balanced",
    "mt_electra_tapt_balanced",
    "meta_electra_tapt_balanced",
    "tlm_bm25",
    "tlm_iss",
)
CORPORA = ("tapt", "dapt")


@dataclass(frozen=True)
class Arm:
    """What one arm trains. `kind`: ft, continued (pretraining on `corpora` in order, then fine-tuning), tartan or
    tlm; `objective` the LM objective of the continued pretraining or of TARTAN's auxiliaries; `corpora` the
    text it is trained on; `weighting` uniform or meta (TARTAN); `balanced` TARTAN's running-mean scaling."""

    name: str
    kind: str
    objective: str = "electra"
    corpora: tuple[str, ...] = ()
    weighting: str = "uniform"
    balanced: bool = False

    @property
    def needs_dapt(self) -> bool:
        """Whether the arm reads BM25's domain text (and so the general corpus and its index)."""
        return "dapt" in self.corpora or self.kind == "tlm"

    @property
    def label(self) -> str:
        """The arm in words, for tables and plots."""
        objective = "MLM" if self.objective == "mlm" else self.objective.upper()
        if self.kind == "ft":
            return "fine-tune only"
        if self.kind == "continued":
            return " → ".join(c.upper() for c in self.corpora) + f" ({objective}) → fine-tune"
        if self.kind == "tartan":
            name = "MT-TARTAN" if self.weighting == "uniform" else "META-TARTAN"
            aux = "+".join(c.upper() for c in self.corpora)
            return f"{name}, {objective} aux on {aux}" + (", balanced losses" if self.balanced else "")
        return f"TLM from scratch, {self.corpora[0].upper()} subset"


def parse_arm(name: str) -> Arm:
    """The arm `name` stands for (module docstring); an unknown name is refused in one line with the grid's names."""
    parts = name.split("_")
    if name == "ft":
        return Arm(name, "ft")
    if name in ("tlm_bm25", "tlm_iss"):
        return Arm(name, "tlm", corpora=(parts[1],))
    if len(parts) >= 2 and parts[-1] == "ft":
        objective = "mlm" if parts[-2] == "mlm" else "electra"
        corpora = tuple(parts[: -2 if objective == "mlm" else -1])
        if corpora and all(c in CORPORA for c in corpora) and len(set(corpora)) == len(corpora):
            return Arm(name, "continued", objective, corpora)
    if len(parts) >= 2 and parts[0] in ("mt", "meta") and parts[1]:
        extras = parts[2:]
        if all(e in ("tapt", "balanced") for e in extras) and len(set(extras)) == len(extras):
            corpora = ("tapt",) if "tapt" in extras else ("tapt", "dapt")
            weighting = "uniform" if parts[0] == "mt" else "meta"
            return Arm(name, "tartan", parts[1], corpora, weighting, "balanced" in extras)
    raise UserError(
        f"unknown arm {name!r}; the grid's are {', '.join(STUDY_ARMS)} (bench/task_aware_arms.py says how names are "
        "built)"
    )
