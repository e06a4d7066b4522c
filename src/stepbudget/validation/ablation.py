"""Published ablations: the model's MFU gain of each technique beside the source's.

A whole-step comparison says how far a prediction is from one run; an ablation says whether the model
moves the right way, by the right amount, when one technique is switched on. A study (``ablations.yaml``)
starts from a published run, converted as ``validate`` converts it (``convert.to_case``), with a few
overrides; each step then applies its overrides on top of every step before it, as the source's table adds
one technique per row. A step's gain is its MFU minus the previous row's, in MFU points, for the source and
for the model alike (each in its own FLOP count: the model's MFU is ``estimate(derive(scenario)).mfu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from stepbudget.budget.step import estimate
from stepbudget.inputs.documents import read_yaml
from stepbudget.inputs.errors import ScenarioError
from stepbudget.inputs.files import read_text
from stepbudget.inputs.scenario import apply_overrides, build
from stepbudget.plan.derive import derive
from stepbudget.validation.convert import to_case
from stepbudget.validation.runs import RunError, load_runs

__all__ = ["AblationRow", "SHIPPED_ABLATIONS", "ablations"]

SHIPPED_ABLATIONS = "ablations.yaml"


@dataclass(frozen=True)
class AblationRow:
    """One step of a published ablation: the source's MFU before and after it, and the model's."""

    id: str
    """The study's id (``ablations.yaml``)."""
    source: str
    """Document and locator of the study's table."""
    step: str
    """The row's name as the source prints it, e.g. "(3) with TP overlap"."""
    modelled: bool
    """False when the model has no term for the technique (its predicted gain is then 0 by construction)."""
    measured_before_mfu: float
    """The source's MFU of the previous row (a fraction)."""
    measured_after_mfu: float
    """The source's MFU with this step (a fraction)."""
    predicted_before_mfu: float
    """The model's MFU of the previous row's scenario (a fraction)."""
    predicted_after_mfu: float
    """The model's MFU with this step's overrides applied on top of every earlier step's."""
    overrides: tuple[str, ...]
    """What this step sets, in the --set syntax."""

    @property
    def measured_gain_pts(self) -> float:
        return 100 * (self.measured_after_mfu - self.measured_before_mfu)

    @property
    def predicted_gain_pts(self) -> float:
        return 100 * (self.predicted_after_mfu - self.predicted_before_mfu)

    @property
    def gain_error_pts(self) -> float:
        """Predicted minus measured gain, in MFU points."""
        return self.predicted_gain_pts - self.measured_gain_pts


def _text(path: str | Path | None) -> tuple[str, str]:
    if path is None:
        return (resources.files("stepbudget.validation") / SHIPPED_ABLATIONS).read_text(encoding="utf-8"), SHIPPED_ABLATIONS
    return read_text(path, "ablations file"), str(path)


def _studies(path: str | Path | None) -> list[dict]:
    text, where = _text(path)
    try:
        data = read_yaml(text)
    except yaml.YAMLError as e:
        raise RunError(f"ablations file: {where} is not valid YAML ({str(e).splitlines()[0]}); fix the syntax") from None
    if not isinstance(data, dict) or not isinstance(data.get("ablations"), list):
        raise RunError(f"ablations file: {where} has no 'ablations:' list; use the schema of the shipped "
                       f"{SHIPPED_ABLATIONS}")
    return data["ablations"]


def _base(study: dict, runs: dict[str, dict]) -> dict:
    """The raw scenario of the study's base run, converted as validate converts it, with its base overrides."""
    sid, rid = study.get("id"), study.get("base_run")
    if rid not in runs:
        raise RunError(f"ablation {sid}: base_run: no run {rid!r} in the runs file; name a run id of published_runs.yaml")
    case = to_case(runs[rid])
    if case.scenario is None:
        raise RunError(f"ablation {sid}: base_run {rid} cannot be predicted ({case.reason})")
    return apply_overrides(case.scenario.model_dump(mode="json"), list(study.get("base_overrides") or []))


def _mfu(data: dict, where: str) -> float:
    try:
        return float(estimate(derive(build(data))).mfu)
    except ScenarioError as e:
        raise RunError(f"{where}: {e}") from None


def _rows(study: dict, runs: dict[str, dict]) -> list[AblationRow]:
    """One row per step; each step's scenario carries every earlier step's overrides."""
    sid, src = str(study.get("id")), study.get("source") or {}
    source = f"{src.get('document', '')}, {src.get('locator', '')}".strip(", ")
    data = _base(study, runs)
    measured, predicted = float(study["baseline_mfu_pct"]) / 100, _mfu(data, f"ablation {sid} baseline")
    rows = []
    for step in study.get("steps") or []:
        name, overrides = str(step.get("step")), tuple(str(o) for o in step.get("overrides") or [])
        data = apply_overrides(data, list(overrides))
        after, after_measured = _mfu(data, f"ablation {sid} step {name}"), float(step["mfu_pct"]) / 100
        rows.append(AblationRow(id=sid, source=source, step=name, modelled=bool(step.get("modelled", True)),
                                measured_before_mfu=measured, measured_after_mfu=after_measured,
                                predicted_before_mfu=predicted, predicted_after_mfu=after, overrides=overrides))
        measured, predicted = after_measured, after
    return rows


def ablations(path: str | Path | None = None, runs_path: str | Path | None = None) -> list[AblationRow]:
    """Every step of every study in ``path`` (default: the shipped ``ablations.yaml``), base runs read from
    ``runs_path`` (default: the shipped published_runs.yaml). RunError names the study and field at fault."""
    runs = {r["id"]: r for r in load_runs(runs_path)}
    return [row for study in _studies(path) for row in _rows(study, runs)]
