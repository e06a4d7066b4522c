"""A malformed run in a runs file: the other runs are still predicted and the bad one is listed under "Not
predicted" with its field; ``--strict`` stops at it instead, in one line naming the run and the field."""

import copy

import pytest
import yaml
from typer.testing import CliRunner

from stepbudget import api
from stepbudget.cli import app
from tests._util import one_line


@pytest.fixture
def runs_file(tmp_path):
    """The NeMo example file's first run, and a copy of it whose GPU count is text."""
    good = yaml.safe_load(open("examples/nemo_h100_runs.yaml", encoding="utf-8"))["runs"][0]
    bad = {**copy.deepcopy(good), "id": "lots_of_gpus", "num_gpus": "lots"}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "runs": [good, bad]}), encoding="utf-8")
    return str(path), good["id"]


def test_the_good_run_is_predicted_and_the_bad_one_listed(runs_file):
    path, good = runs_file
    result = api.validate(path)
    rows = result.value
    by_id = {r.case.id: r for r in rows}
    assert set(by_id) == {good, "lots_of_gpus"}
    # the table's tokens/s per GPU over the printed batch: 128 sequences of 4,096 tokens on 8 GPUs
    assert by_id[good].error is not None and by_id[good].case.measured_step_s == pytest.approx(128 * 4096 / (16847 * 8))
    bad = by_id["lots_of_gpus"]
    assert bad.predicted_step_s is None and bad.case.scenario is None
    assert "num_gpus: 'lots' is not a positive integer" in bad.case.reason
    # the JSON document carries both: the good one predicted, the bad one with its reason
    assert result.to_dict()["summary"]["n"] == 1
    assert {r["id"] for r in result.rows()} == {good, "lots_of_gpus"}
    text = " ".join(result.text().split())
    assert "Not predicted (1)" in text and "lots_of_gpus: num_gpus" in text


def test_the_cli_lists_the_bad_run_under_not_predicted(runs_file):
    path, good = runs_file
    r = CliRunner().invoke(app, ["validate", "--runs", path])
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())  # rich wraps lines at the terminal's width
    assert "Not predicted (1)" in out
    assert "lots_of_gpus: num_gpus: 'lots' is not a positive integer" in out
    assert good in out


def test_strict_stops_at_the_bad_run_in_one_line(runs_file):
    path, _ = runs_file
    line = one_line("validate", "--runs", path, "--strict")
    assert "run lots_of_gpus" in line and "num_gpus" in line


def test_the_api_strict_raises_naming_the_run_and_field(runs_file):
    from stepbudget.validation.runs import RunError

    path, _ = runs_file
    with pytest.raises(RunError, match=r"^run lots_of_gpus: num_gpus: 'lots'"):
        api.validate(path, strict=True)
