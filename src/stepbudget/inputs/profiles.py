"""Calibration profiles: a few named, physical parameters fitted to measured runs of one stack.

The operator model is physics with datasheet and kernel figures; a stack adds what no public source
quantifies (host work per step, per-micro-batch launches, clocks below boost, MoE permutation). A
profile names those costs, each bounded to stay physical, and says which runs it was fitted on and what
its error was on runs the fit never saw (``stepbudget calibrate`` writes it). A scenario takes one with
``cluster.profile: NAME|PATH``; ``none`` (the default) is the uncalibrated model.

The parameters (``PARAMETERS``) and where they enter (plan/derive.py, ``calibrated``):

- ``gemm_scale:<gpu>``: the operator model's compute rate on that GPU family is multiplied by it
  (sustained clocks and kernel efficiency of the stack; 1 = as modelled).
- ``step_s``: seconds every step pays (host work, the optimizer's launch, syncs at the step's edges).
- ``microbatch_s``: seconds per micro-batch slot on the pipeline's critical path, ``m + p - 1``
  (launches and host work per forward-backward pass).
- ``routed_token_s``: seconds per token routed to an expert, per MoE layer a GPU holds (permutation,
  routing and small kernels that the operator model does not carry).
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from stepbudget.inputs.documents import plain, read_yaml
from stepbudget.inputs.errors import ScenarioError
from stepbudget.inputs.files import read_text

NONE = "none"
SCHEMA = 1
"""The profile file's schema version (``schema_version``)."""


@dataclass(frozen=True)
class Parameter:
    """One kind of calibration parameter: its unit, its physical bounds and what it stands for."""

    name: str
    unit: str
    low: float
    high: float
    neutral: float
    """The value that changes nothing (1 for a scale, 0 for a cost)."""
    what: str


PARAMETERS = {p.name: p for p in (
    Parameter("gemm_scale", "", 0.5, 1.5, 1.0,
              "the operator model's compute rate on one GPU family, times this (sustained clock, kernel efficiency)"),
    Parameter("step_s", "s", 0.0, 10.0, 0.0, "fixed cost of every step (host work, optimizer launch, step-edge syncs)"),
    Parameter("microbatch_s", "s", 0.0, 0.5, 0.0,
              "cost of each micro-batch slot on the pipeline's critical path, m + p - 1 of them"),
    Parameter("routed_token_s", "s", 0.0, 1e-6, 0.0,
              "cost of each token routed to an expert, per MoE layer on a GPU (permutation, routing, small kernels)"),
)}
"""The parameter kinds a profile may hold. ``gemm_scale`` is per GPU family: ``gemm_scale:h100``. Bounds: a
scale within a half of the model (no stack runs twice or half as fast as its kernels' measured rates); a step
cost up to 10 s; a micro-batch cost up to 0.5 s; a routed-token cost up to 1 us per token and layer (a
permutation at 5 % of HBM bandwidth on a 7,168-wide BF16 token moves it in ~0.1 us: ten times that)."""

GPU_FAMILIES = ("gb200", "b200", "h200", "h800", "h100", "a100", "mi300x", "mi250x", "v100")
"""GPU families a ``gemm_scale`` is fitted per, matched in the GPU's name (the first that matches)."""


def gpu_family(gpu_name: str) -> str:
    """The GPU family of a GPU's name ("NVIDIA H100 SXM" -> "h100"); the name itself when none matches."""
    low = gpu_name.lower()
    return next((f for f in GPU_FAMILIES if f in low), re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "gpu")


def kind_of(name: str) -> Parameter | None:
    """The kind of parameter ``name`` is (``gemm_scale:h100`` is a gemm_scale), None when unknown."""
    base, _, family = name.partition(":")
    if (base == "gemm_scale") != bool(family):  # a scale names its GPU family; nothing else has one
        return None
    return PARAMETERS.get(base)


@dataclass(frozen=True)
class Profile:
    """A calibration profile: parameter values and what they were fitted on (the file's whole document)."""

    name: str
    values: dict[str, float] = field(default_factory=dict)
    cv_median_abs_error: float | None = None
    """Leave-one-source-out cross-validated median |error| of the fit; None when not measured."""
    where: str = ""
    """The file it was read from ("" for none)."""
    document: dict = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(v != kind(k).neutral for k, v in self.values.items())

    def gemm_scale(self, gpu_name: str) -> float:
        return self.values.get(f"gemm_scale:{gpu_family(gpu_name)}", 1.0)

    def cost(self, name: str) -> float:
        return self.values.get(name, 0.0)

    @property
    def fitted_runs(self) -> frozenset[str]:
        """The ids of the runs the profile was fitted on (its file's ``fitted_on.runs``)."""
        fitted = self.document.get("fitted_on")
        runs = fitted.get("runs") if isinstance(fitted, dict) else None
        return frozenset(r for r in runs if isinstance(r, str)) if isinstance(runs, list) else frozenset()

    @property
    def label(self) -> str:
        """How every output names it: "generic (CV median 7.8 %)", or "none"."""
        if self.name == NONE:
            return NONE
        cv = f"CV median {self.cv_median_abs_error:.1%}" if self.cv_median_abs_error is not None else "CV not measured"
        return f"{self.name} ({cv.replace('%', ' %')})"


NO_PROFILE = Profile(NONE)


def kind(name: str) -> Parameter:
    """The kind of a parameter name already checked (``gemm_scale:h100`` is a gemm_scale); KeyError otherwise."""
    return PARAMETERS[name.partition(":")[0]]


def shipped_profiles() -> list[str]:
    """Names of the profiles shipped with the package (inputs/profiles/NAME.yaml)."""
    folder = resources.files("stepbudget.inputs") / "profiles"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(ref: str) -> Profile:
    """The profile ``ref`` names: ``none``, a shipped profile's name, or a path to a profile file.
    ScenarioError (one line, naming ``cluster.profile``) when it cannot be read."""
    ref = ref.strip()
    try:  # a file rewritten by calibrate is read again: its modification time is part of the cache key
        stamp = os.stat(ref).st_mtime_ns if ref not in shipped_profiles() and ref.lower() != NONE else 0
    except (OSError, ValueError):
        stamp = 0
    return _load(ref, stamp)


@functools.lru_cache(maxsize=64)
def _load(ref: str, stamp: int) -> Profile:
    if ref.lower() in (NONE, ""):
        return NO_PROFILE
    if ref in shipped_profiles():
        text = (resources.files("stepbudget.inputs") / "profiles" / f"{ref}.yaml").read_text(encoding="utf-8")
        where = f"shipped profile {ref}"
    elif ref.endswith((".yaml", ".yml")) or "/" in ref or Path(ref).exists():
        text, where = read_text(ref, "cluster.profile"), ref
    else:
        raise ScenarioError(f"cluster.profile: no profile {ref!r}; use none, one of {', '.join(shipped_profiles())} "
                            "or the path of a file `stepbudget calibrate` wrote")
    return parse_profile(text, where)


def parse_profile(text: str, where: str) -> Profile:
    """A profile from its YAML text; ScenarioError naming the file and the field when it is not one."""
    try:
        doc = read_yaml(text)
        plain(doc, "cluster.profile")
    except ScenarioError as e:
        raise ScenarioError(f"cluster.profile: {where}: {e}") from None
    except yaml.YAMLError as e:  # a syntax error or a bound passed (LimitError): one line, the parser's first
        raise ScenarioError(f"cluster.profile: {where} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("parameters"), dict):
        raise ScenarioError(f"cluster.profile: {where} has no 'parameters:' mapping; write it with stepbudget calibrate")
    if doc.get("schema_version", SCHEMA) != SCHEMA:
        raise ScenarioError(f"cluster.profile: {where}: schema_version {doc.get('schema_version')!r}; this version "
                            f"reads {SCHEMA}")
    values = {name: _value(where, name, body) for name, body in doc["parameters"].items()}
    cv = (doc.get("error") or {}).get("cross_validated") if isinstance(doc.get("error"), dict) else None
    median = cv.get("median_abs_error") if isinstance(cv, dict) else None
    median = float(median) if isinstance(median, (int, float)) and math.isfinite(median) else None
    stated = doc.get("profile")
    name = stated if isinstance(stated, str) and stated.strip() else Path(where).stem
    return Profile(name=name, values=values, cv_median_abs_error=median, where=where, document=doc)


def _value(where: str, name: object, body: object) -> float:
    kind = kind_of(name) if isinstance(name, str) else None
    if kind is None:
        known = ", ".join(k if k != "gemm_scale" else "gemm_scale:<gpu>" for k in PARAMETERS)
        raise ScenarioError(f"cluster.profile: {where}: parameters.{name}: not a parameter; use {known}")
    value = body.get("value") if isinstance(body, dict) else body
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not kind.low <= value <= kind.high:
        raise ScenarioError(f"cluster.profile: {where}: parameters.{name}: {value!r}; give a number from "
                            f"{kind.low:g} to {kind.high:g}{' ' + kind.unit if kind.unit else ''}")
    return float(value)
