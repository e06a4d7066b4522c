"""Each bad input: exit code 2, one line on stderr per problem naming the field and the fix, no traceback."""

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import stepbudget as sb
from stepbudget.cli import app
from stepbudget.inputs.documents import MAX_DEPTH

runner = CliRunner()


def fails(*args, problems: int | None = 1):
    """The error of a command that must fail: ``problems`` lines (any number when None), each one problem."""
    r = runner.invoke(app, list(args))
    assert r.exit_code == 2, (r.exit_code, r.output)
    err = r.stderr.strip()
    assert "Traceback" not in r.output and "Traceback" not in err
    lines = err.splitlines()
    assert problems is None or len(lines) == problems, err
    assert all(line.startswith("stepbudget: error: ") for line in lines), err
    return err


def fails_on(tmp_path, text, command="budget"):
    """``fails`` for a scenario file holding ``text``."""
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return fails(command, str(f))


CASES = [
    # (args, words the message must contain)
    (("--set", "layout.dp=64"), ["layout", "16384", "layout.dp=128"]),
    (("--set", "layout.tp=3", "--set", "cluster.gpus=6144"), ["layout.tp", "heads", "3"]),
    (("--set", "layout.tp=16", "--set", "cluster.gpus=32768"), ["layout.tp", "KV heads", "16"]),
    (("--set", "layout.cp=2", "--set", "layout.dp=64", "--set", "model.seq_len=8194", "--set",
      "batch.global_batch_tokens=null", "--set", "batch.global_batch_seqs=2048"), ["layout.cp", "2*cp"]),
    (("--set", "layout.pp=12", "--set", "cluster.gpus=12288"), ["layout.pp", "not divisible", "12"]),
    (("--set", "layout.micro_batch=3"), ["batch", "dp*micro_batch", "micro_batch"]),
    (("--set", "model.hidden_size=0"), ["model.hidden_size", "greater than 0"]),
    (("--set", "layout.tp=-1"), ["layout.tp", "greater than or equal to 1"]),
    (("--set", "cluster.nic_Bps=0"), ["cluster.nic_Bps", "greater than or equal to 1"]),
    (("--set", "cluster.nic_Bps=400Gbx"), ["cluster.nic_Bps", "400Gb/s"]),
    (("--set", "cluster.gpu.hbm_bytes=lots"), ["cluster.gpu.hbm_bytes", "141GB"]),
    (("--set", "layout.foo=1"), ["layout.foo", "unknown field"]),
    (("--set", "layout.schedule=zigzag"), ["layout.schedule", "1f1b"]),
    (("--set", "layoutpp"), ["--set", "section.field=value"]),
    (("--set", "batch.global_batch_tokens=16777000"), ["batch.global_batch_tokens", "seq_len"]),
    (("--set", "cluster.gpu=tpu9"), ["cluster.gpu", "h100-sxm"]),
    (("--set", "overlap.comm_sm_share=1.5"), ["overlap.comm_sm_share", "[0, 1)"]),
    (("--set", "overlap.tp=1.5"), ["overlap.tp", "[0, 1]"]),
    (("--set", "overlap.tp=fast"), ["overlap.tp", "a number or 'auto'", "'fast'"]),
    (("--set", "layout.tp=true"), ["layout", "tp", "not a number"]),  # YAML's true is not 1
    (("--set", "cluster.gpus_per_node=yes"), ["cluster", "gpus_per_node", "not a number"]),
]


@pytest.mark.parametrize("args, words", CASES)
def test_bad_layout_and_values(args, words):
    err = fails("budget", "llama3-405b", *args)
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize(
    "sets, words",
    [
        (("layout.ep=48",), ["layout.ep", "divide", "256"]),
        (("layout.ep=512",), ["layout.ep", "256"]),
        (("model.moe.top_k=300",), ["model.moe.top_k", "num_experts"]),
        (("model.parallel_block=true",), ["model.parallel_block", "dense MLP", "false"]),
    ],
)
def test_bad_expert_parallelism(sets, words):
    err = fails("budget", "deepseek-v3", *[a for s in sets for a in ("--set", s)])
    for w in words:
        assert w in err


def test_ep_without_moe():
    assert "layout.ep" in fails("budget", "llama3-405b", "--set", "layout.ep=2")


def test_unknown_preset_and_missing_file():
    assert "unknown preset 'nosuch'" in fails("budget", "nosuch")
    assert "not found" in fails("budget", "missing.yaml")
    assert "unknown preset" in fails("show", "nosuch")


def test_malformed_yaml(tmp_path):
    assert "not valid YAML" in fails_on(tmp_path, "model: [unclosed\n")


def test_missing_sections_and_fields_are_named_all_at_once(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model:\n  num_layers: 2\n")
    err = fails("budget", str(f), problems=None)
    named = {line.removeprefix("stepbudget: error: ").split(":")[0] for line in err.splitlines()}
    assert named == {"model.hidden_size", "model.num_heads", "model.ffn_size", "model.vocab_size", "model.seq_len",
                     "cluster", "layout", "batch"}
    assert all(line.endswith("required field is missing; add it") for line in err.splitlines())


def test_every_problem_of_a_scenario_is_named_at_once():
    # three layout rules and a unit broken at once: each is a line, from the sections that validate
    err = fails("budget", "llama3-405b", "--set", "layout.dp=64", "--set", "layout.tp=3", "--set", "layout.pp=7",
                problems=3)
    assert [line.split(":")[2].strip() for line in err.splitlines()] == ["layout", "layout.tp", "layout.pp"]
    # a bad model leaves the checks that read it out, not those between the layout and the cluster
    err = fails("budget", "llama3-405b", "--set", "layout.dp=64", "--set", "precision.grads=fp7",
                "--set", "model.hidden_size=-1", problems=3)
    assert {line.split(":")[2].strip() for line in err.splitlines()} == {"model.hidden_size", "precision.grads",
                                                                        "layout"}


@settings(max_examples=40, deadline=None)
@given(key=st.sampled_from(["layout.tp", "layout.pp", "layout.dp", "model.hidden_size", "cluster.nic_Bps",
                            "batch.global_batch_seqs", "model.seq_len"]),
       value=st.one_of(st.integers(-5, 0), st.text(alphabet="xyz!@", min_size=1, max_size=4),
                       st.sampled_from(["1e999", "!", ""])))
def test_any_bad_value_is_one_line_exit_2(key, value):
    fails("budget", "llama3-405b", "--set", f"{key}={value}")


@settings(max_examples=30, deadline=None)
@given(key=st.sampled_from(["model.moe.popularity_skew", "precision.optimizer_bytes", "cluster.nic_latency_s",
                            "cluster.gpu.hbm_Bps", "layout.dp_bucket_params", "overlap.dp", "cluster.nic_efficiency"]),
       value=st.sampled_from([float("inf"), float("-inf"), float("nan"), "inf", "nan"]))
def test_no_number_field_takes_infinity_or_nan(tmp_path_factory, key, value):
    # written in a file (YAML's .inf and .nan, or the words): each is refused by name, not carried into the budget
    section, *rest = key.split(".")
    nested = value
    for name in reversed(rest):
        nested = {name: nested}
    err = fails_on(tmp_path_factory.mktemp("inf"), yaml.safe_dump({"base": "deepseek-v3", section: nested}))
    assert key.split(".")[-1] in err


def test_counts_past_any_job_are_refused_by_name(tmp_path):
    assert "model.seq_len" in fails_on(tmp_path, "base: llama3-405b\nmodel:\n  seq_len: 100000000000000000000\n")


def test_a_file_changes_one_figure_of_its_bases_named_gpu(tmp_path):
    f = tmp_path / "smaller.yaml"
    f.write_text("base: deepseek-v3\ncluster:\n  gpu:\n    hbm_bytes: 40GB\n")
    gpu, named = sb.load(str(f)).cluster.gpu, sb.load("deepseek-v3").cluster.gpu
    assert gpu.hbm_bytes == 40e9 and gpu.peak_bf16_flops == named.peak_bf16_flops and gpu.name == named.name


def test_an_output_that_cannot_be_written_is_one_line(tmp_path):
    folder = tmp_path / "plot.svg"
    folder.mkdir()
    assert "--plot" in fails("wire", "llama3-405b", "--plot", str(folder))
    assert "--out" in fails("search", "megascale-175b", "--gpus", "1024", "--top", "1",
                            "--out", str(tmp_path / "missing" / "x.parquet"))
    # /proc takes no new files, whoever runs the test: the write itself fails, and says so
    assert "cannot write" in fails("scale", "llama3-405b", "--gpus", "16384", "--plot", "/proc/stepbudget.svg")
    assert list(tmp_path.iterdir()) == [folder] and not any(folder.iterdir())  # nothing half-written left


def test_wire_refuses_series_it_cannot_hold():
    assert "--window" in fails("wire", "llama3-405b", "--window", "1ns")
    assert "--steps" in fails("wire", "llama3-405b", "--steps", "10000000")
    # a rate without its unit makes the step years long: refused, with the units named as a suspect
    assert "units" in fails("wire", "llama3-405b", "--set", "cluster.achieved_flops=400e6")


def test_deep_files_and_long_base_chains_are_one_line(tmp_path):
    assert f"nested more than {MAX_DEPTH} levels deep" in fails_on(tmp_path, "model: " + "[" * 5000 + "]" * 5000 + "\n")
    for i in range(40):
        (tmp_path / f"b{i}.yaml").write_text(f"base: b{i + 1}.yaml\n")
    (tmp_path / "b40.yaml").write_text("base: llama3-405b\n")
    assert "base:" in fails("budget", str(tmp_path / "b0.yaml"))


def test_a_base_file_is_found_beside_the_file_that_names_it(tmp_path, monkeypatch):
    (tmp_path / "mine.yaml").write_text("base: llama3-405b\nlayout:\n  micro_batch: 1\n")
    (tmp_path / "variant.yaml").write_text("base: mine.yaml\nbatch:\n  global_batch_tokens: null\n"
                                           "  global_batch_seqs: 4096\n")
    monkeypatch.chdir("/")
    assert sb.load(str(tmp_path / "variant.yaml")).global_batch_seqs == 4096


@pytest.mark.parametrize("args, words", [
    (("moe", "--servers", "1", "--gpus-per-server", "1"), ["--servers", "--gpus-per-server"]),
    (("moe", "--skew", "zipf:inf"), ["--skew", "[0, 16]"]),
    (("moe", "--servers", "256", "--gpus-per-server", "1"), ["model.moe.node_limit"]),
    (("wire", "--set", "cluster.nic_Bps=400"), ["cluster.nic_Bps", "unit"]),
    (("search", "megascale-175b", "--gpus", "1024", "--top", "100000"), ["--top", "--out"]),
    (("simulate", "hpn-gpt3-175b", "--steps", "3", "--replicas", "100000000"), ["--replicas"]),
])
def test_messages_name_the_option_or_field_to_change(args, words):
    err = fails(*args)
    assert all(w in err for w in words), err


def test_a_key_given_twice_is_an_error_not_a_silent_overwrite(tmp_path):
    assert "'pp' given twice" in fails_on(tmp_path, "base: llama3-405b\nlayout:\n  pp: 16\n  pp: 8\n")
    runs = tmp_path / "runs.yaml"
    runs.write_text("schema_version: 1\nruns:\n- id: a\n  id: b\n")
    assert "given twice" in fails("validate", "--runs", str(runs))
