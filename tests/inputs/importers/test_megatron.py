"""Megatron-LM arguments: real launch scripts from NVIDIA/Megatron-LM (tests/data/configs/megatron/README.md),
a pasted command line and an args file, each field checked against the value read in the file by hand."""

from pathlib import Path

import pytest

from stepbudget.inputs.importers import megatron

DATA = Path(__file__).resolve().parents[2] / "data" / "configs"
MINE = DATA / "megatron"


def read(name: str):
    return megatron.read((MINE / name).read_text(), name)


def stated(imported) -> dict[str, object]:
    return {".".join(k): v for k, v in imported.values.items()}


def test_gpt3_175b_arrays_and_megatron_defaults():
    got = read("train_gpt3_175b_distributed.sh")
    assert stated(got) == {
        "model.num_layers": 96, "model.hidden_size": 12288, "model.num_heads": 96,  # lines 29-31
        "model.seq_len": 2048,  # line 32
        "model.activation": "gelu", "model.ffn_size": 4 * 12288,  # no --swiglu, no --ffn-hidden-size: Megatron's 4h
        "model.positions": "learned", "model.tied_embeddings": True, "model.dropout": True,  # Megatron's defaults
        "layout.tp": 8, "layout.pp": 16,  # lines 56-57
        "layout.micro_batch": 1, "batch.global_batch_seqs": 1536,  # lines 38-39
        "cluster.gpus_per_node": 8, "cluster.gpus": 8,  # GPUS_PER_NODE=8, NUM_NODES=1 (lines 7, 11) via torchrun
    }
    assert got.framework == "megatron-lm" and got.problems == ()
    assert got.keys[("cluster", "gpus")] == "--nproc_per_node $GPUS_PER_NODE x --nnodes $NUM_NODES"
    assert got.keys[("model", "activation")] == "--swiglu absent"
    assert {"--lr", "--fp16", "--step-batch-size-schedule", "--attention-backend", "--save"} <= set(got.ignored)


def test_llama3_8b_variables_conditionals_and_fp8():
    got = read("train_llama3_8b_h100_fp8.sh")
    assert stated(got) == {
        "model.num_layers": 32, "model.seq_len": 8192,  # NUM_LAYERS=32, SEQ_LENGTH=8192 (lines 38, 40)
        "model.hidden_size": 4096, "model.ffn_size": 14336, "model.num_heads": 32,  # lines 58-60
        "model.num_kv_heads": 8, "model.head_dim": 128,  # lines 61-63
        "model.positions": "rotary", "model.dropout": False, "model.activation": "swiglu",  # lines 66, 69-71
        "model.tied_embeddings": False,  # line 76
        "model.vocab_size": 128256,  # line 139 (the MOCK branch: TOKENIZER_ARG=${3:-"MOCK"}), a multiple of 128
        "layout.tp": 1, "layout.cp": 1, "layout.sequence_parallel": True,  # lines 117-120 (PP commented out)
        "layout.dp_kind": "zero1", "overlap.dp": "auto",  # lines 126-128
        "layout.micro_batch": 1, "batch.global_batch_seqs": 128,  # lines 36-37
        "precision.gemm": "fp8",  # line 108, inside if [[ "$DTYPE" == "fp8" ]] with DTYPE="fp8"
        "precision.grads": "bf16",  # line 96: --grad-reduce-in-bf16
        "cluster.gpus_per_node": 8, "cluster.gpus": 8,  # lines 22-23
    }
    assert got.keys[("model", "num_layers")] == "--num-layers $NUM_LAYERS"
    assert got.keys[("overlap", "dp")] == "--overlap-grad-reduce + --overlap-param-gather"
    assert "--fp8-amax-history-len" in got.ignored and "--grad-reduce-in-bf16" not in got.ignored
    assert "--data-path" not in got.ignored  # the real-data branch is not taken
    assert got.problems == ()


def test_mixtral_moe_and_expert_parallel():
    got = read("train_mixtral_8x7b_distributed.sh")
    s = stated(got)
    assert {k: s[k] for k in s if k.startswith("model.moe")} == {
        "model.moe.num_experts": 8, "model.moe.top_k": 2,  # lines 51-52
        "model.moe.expert_ffn_size": 14336,  # no --moe-ffn-hidden-size: Megatron takes --ffn-hidden-size (line 34)
        "model.moe.balance": "aux-loss",  # lines 53-54: --moe-router-load-balancing-type aux_loss, coeff 1e-2
    }
    assert got.keys[("model", "moe", "balance")] == "--moe-router-load-balancing-type aux_loss + --moe-aux-loss-coeff 0.01"
    assert (s["model.num_layers"], s["model.hidden_size"], s["model.num_kv_heads"]) == (32, 4096, 8)  # 32-33, 44
    assert (s["layout.tp"], s["layout.pp"], s["layout.ep"], s["layout.expert_tp"]) == (1, 4, 8, 1)  # lines 83-85
    assert (s["layout.dp_kind"], s["layout.sequence_parallel"], s["overlap.dp"]) == ("zero1", True, "auto")
    assert (s["layout.micro_batch"], s["batch.global_batch_seqs"]) == (1, 256)  # lines 69-70
    assert (s["cluster.gpus"], s["cluster.gpus_per_node"]) == (8, 8)  # GPUS_PER_NODE=8, NNODES=${SLURM_NNODES:-"1"}
    assert s["model.positions"] == "rotary"  # --position-embedding-type rope wins over --no-position-embedding
    assert s["layout.ep_kind"] == "all-to-all"  # line 56: --moe-token-dispatcher-type alltoall
    assert any(n.startswith('if [ -n "${WANDB_API_KEY}" ]') for n in got.ignored)  # the environment decides
    assert got.problems == ()


def test_deepseek_v3_mla_moe_mtp_inside_a_heredoc_launch():
    got = read("sbatch_mfsdp_deepseek_v3.sh")
    s = stated(got)
    assert {k: s[k] for k in s if k.startswith(("model.mla", "model.moe"))} == {
        "model.mla.q_lora_rank": 1536, "model.mla.kv_lora_rank": 512,  # lines 107-108
        "model.mla.qk_nope_head_dim": 128, "model.mla.qk_rope_head_dim": 64, "model.mla.v_head_dim": 128,  # 109-111
        "model.moe.num_experts": 256, "model.moe.top_k": 8, "model.moe.expert_ffn_size": 2048,  # 87, 92, 89
        "model.moe.shared_experts": 1, "model.moe.shared_ffn_size": 2048,  # line 90
        "model.moe.first_dense_layers": 3,  # line 88: [0]*3+[1]*58
        "model.moe.balance": "loss-free",  # line 102: --moe-router-enable-expert-bias
        "model.moe.expert_load": 1.0,  # line 106: --moe-router-force-load-balancing, a benchmark's even routing
    }
    # lines 91 and 97: DeepSeek-V3's sequence-wise loss at 1e-4, beside the bias
    assert any(i.startswith("--moe-router-load-balancing-type seq_aux_loss + --moe-aux-loss-coeff 0.0001 (beside "
                            "the expert bias") for i in got.ignored)
    assert (s["model.num_layers"], s["model.hidden_size"], s["model.ffn_size"], s["model.mtp_layers"]) == \
        (61, 7168, 18432, 1)  # lines 60-62, 115
    assert (s["model.num_heads"], s["model.head_dim"], s["model.dropout"]) == (128, 128, False)  # 63-64, 74-75
    # TP=${TP:-1}, EP=${EP:-8}, MBS=${MBS:-4}, GBS=${GBS:-2048} (lines 22-25) used at lines 30-42
    assert (s["layout.tp"], s["layout.ep"], s["layout.expert_tp"], s["layout.cp"]) == (1, 8, 1, 1)
    assert (s["layout.micro_batch"], s["batch.global_batch_seqs"]) == (4, 2048)
    assert s["layout.recompute"] == "selective"  # line 48
    assert s["layout.ep_kind"] == "deepep"  # lines 93-94: the flex dispatcher (HybridEP): one NIC copy per node
    # USE_MEGATRON_FSDP=${USE_MEGATRON_FSDP:-1} takes the branch of lines 140-153: optim_grads_params
    assert s["layout.dp_kind"] == "fsdp"
    assert "--profile" not in got.ignored  # PROFILE=${PROFILE:-0}: that branch is not taken
    assert "cluster.gpus" not in s  # the #SBATCH node count is a placeholder in a comment
    assert got.problems == ()


def test_a_sourced_file_of_variables():
    got = read("DeepSeek-R1.sh")
    s = stated(got)
    assert (s["model.num_layers"], s["model.moe.first_dense_layers"], s["model.mla.kv_lora_rank"]) == (61, 3, 512)
    assert (s["layout.recompute"], s["layout.sequence_parallel"], s["layout.micro_batch"]) == ("selective", True, 1)
    assert s["model.dropout"] is True  # no --attention-dropout/--hidden-dropout: Megatron's 0.1
    assert "layout.first_stage_layers" not in s  # --decoder-first-pipeline-num-layers is commented out (line 60)
    assert s["model.moe.balance"] == "loss-free"  # line 34: --moe-router-enable-expert-bias (beside 42-43's loss)
    assert got.keys[("model", "moe", "balance")] == "--moe-router-enable-expert-bias"
    assert "model.moe.capacity_factor" not in s and "model.moe.pad_to_capacity" not in s  # dropless
    assert got.keys[("model", "num_layers")] == "--num-layers"


def test_detect_claims_these_files_and_no_other_format():
    mine = sorted(MINE.glob("*.sh"))
    assert len(mine) >= 4 and all(megatron.detect(f.read_text(), f.name) for f in mine)
    others = [f for f in DATA.glob("*/*") if f.parent != MINE and f.is_file() and f.name != "README.md"]
    assert others, "the other importers' real files are missing"
    claimed = [f for f in others if megatron.detect(f.read_text(errors="replace"), f.name)]
    assert claimed == []
    assert not megatron.detect('{"num-layers": 24, "hidden-size": 2048}', "neox.yml")
    assert not megatron.detect('"num-layers": 24,\n"hidden-size": 2048,\n', "neox.yml")
    assert not megatron.detect('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}', "ds.json")
    assert not megatron.detect("# --num-layers 24 --hidden-size 2048\nfoo: 1\n", "x.yaml")


PASTED = ("torchrun --nproc_per_node=8 --nnodes 4 pretrain_gpt.py --num-layers 48 --hidden-size 6144 "
          "--num-attention-heads 48 --swiglu --seq-length 4096 --tensor-model-parallel-size 4 "
          "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 3 --micro-batch-size 2 "
          "--global-batch-size $GBS --use-rotary-position-embeddings --tp-comm-overlap --lr 3e-4 2>&1 | tee log")


def test_a_pasted_command_line():
    got = megatron.read(PASTED, "")
    s = stated(got)
    assert (s["layout.virtual_stages"], s["layout.schedule"]) == (4, "interleaved-1f1b")  # 48 / 4 / 3
    assert "overlap.pp" not in s  # interleaved, it is on unless --no-overlap-p2p-communication: the recipe's to say
    assert "layout.ep_kind" not in s  # a dense model has no dispatcher
    assert s["model.ffn_size"] == 16384  # int(4 * 6144 * 2 / 3 / 64) * 64, Megatron's --swiglu default
    assert (s["cluster.gpus"], s["cluster.gpus_per_node"]) == (32, 8)
    assert (s["model.positions"], s["overlap.tp"], s["layout.micro_batch"]) == ("rotary", 1.0, 2)
    assert "batch.global_batch_seqs" not in s
    assert "--global-batch-size $GBS (set outside the script)" in got.ignored
    assert "--lr" in got.ignored and "tee" not in " ".join(got.ignored)


ARGS_FILE = """\
# an args file: one flag a line
--num-layers 32
--hidden-size 4096
--num-attention-heads 32
--group-query-attention
--num-query-groups=4
--tensor-model-parallel-size 2
--pipeline-model-parallel-size 4
--num-virtual-stages-per-pipeline-rank 2
--decoder-first-pipeline-num-layers 6
--decoder-last-pipeline-num-layers 6
--account-for-loss-in-pipeline-split
--recompute-granularity full
--accumulate-allreduce-grads-in-fp32
--attention-dropout 0.0
--hidden-dropout 0.1
--vocab-size 50257
--num-experts 16
--moe-layer-freq ([0]*2+[1]*30)
--use-flash-attn
"""


def test_an_args_file():
    got = megatron.read(ARGS_FILE, "args.txt")
    s = stated(got)
    assert (s["model.num_kv_heads"], s["model.ffn_size"], s["model.activation"]) == (4, 16384, "gelu")
    assert (s["layout.virtual_stages"], s["layout.schedule"]) == (2, "interleaved-1f1b")
    assert (s["layout.first_stage_layers"], s["layout.last_stage_layers"], s["layout.loss_in_pipeline_split"]) == \
        (6, 6, True)
    assert (s["layout.recompute"], s["precision.grads"], s["model.dropout"]) == ("full", "fp32", True)
    assert s["model.vocab_size"] == 50432  # 50257 padded to a multiple of 128 x TP 2 = 256
    assert (s["model.moe.top_k"], s["model.moe.expert_ffn_size"], s["model.moe.first_dense_layers"]) == (2, 16384, 2)
    assert "model.moe.balance" not in s  # no router flag: aux_loss weighted 0.0, Megatron's default, balances nothing
    assert s["layout.expert_tp"] == 2  # Megatron: --expert-tensor-parallel-size defaults to TP
    assert "layout.sequence_parallel" not in s and "overlap.dp" not in s  # absent switches: the recipe's business
    assert any(i.startswith("--use-flash-attn") for i in got.ignored) and got.problems == ()


def test_shell_expansion():
    script = """
export A=${A:-4}
B=2 # two
SIZE=$((A*B*1024))
if [ "$A" -eq 4 ]; then
    EXTRA=(--sequence-parallel)
else
    EXTRA=(--use-distributed-optimizer)
fi
ARGS=(--num-layers ${LAYERS:-24} --hidden-size $SIZE)
ARGS+=("${EXTRA[@]}" --tensor-model-parallel-size $1 --seq-length $(cat len.txt))
python pretrain_gpt.py "${ARGS[@]}" --num-attention-heads '16'
"""
    got = megatron.read(script, "run.sh")
    s = stated(got)
    assert (s["model.num_layers"], s["model.hidden_size"], s["model.num_heads"]) == (24, 8192, 16)
    assert s["layout.sequence_parallel"] is True and "layout.dp_kind" not in s
    assert got.keys[("model", "hidden_size")] == "--hidden-size $SIZE"
    assert {"--tensor-model-parallel-size $1 (set outside the script)",
            "--seq-length $(cat len.txt) (not resolved without running the script)"} <= set(got.ignored)


@pytest.mark.parametrize("text", [
    "",
    "\x00\x01garbage ((( '''",
    "GPT_ARGS=(\n  --num-layers 96\n  --hidden-size 12288\n",  # truncated inside an array
    'torchrun pretrain_gpt.py --num-layers "96 --hidden-size',  # an unterminated quote
    "python pretrain_gpt.py --num-layers --hidden-size x --moe-layer-freq 2 --num-experts 8 --seq-length -5",
    "python pretrain_gpt.py --num-layers 4 --moe-layer-freq '[1,0]*2' --num-experts 8 --position-embedding-type relative",
])
def test_bad_input_gives_problems_not_exceptions(text):
    got = megatron.read(text, "bad.sh")
    assert got.format == megatron.FORMAT
    if "--num-layers --hidden-size x" in text:
        assert {p.split(":")[0] for p in got.problems} >= {"--num-layers", "--hidden-size", "--moe-layer-freq",
                                                          "--seq-length"}
    if "relative" in text:
        assert {p.split(":")[0] for p in got.problems} == {"--moe-layer-freq", "--position-embedding-type"}
    if not text.strip():
        assert got.problems and got.values == {}


def test_a_script_that_grows_its_values_without_bound_is_read_quickly_and_named():
    """Arithmetic past bash's 64-bit integers and a value doubled thirty times stay unknown: listed, not computed."""
    script = "\n".join(["A=10", *["A=$((A*A))"] * 16, "B=x", *['B="$B$B"'] * 30,
                        "torchrun pretrain_gpt.py --num-layers $A --hidden-size $B --tensor-model-parallel-size 2"])
    got = megatron.read(script, "big.sh")
    s = stated(got)
    assert "model.num_layers" not in s and "model.hidden_size" not in s and s["layout.tp"] == 2
    assert any(i.startswith("--num-layers $A") for i in got.ignored)
    assert all(len(p) <= 400 for p in got.problems) and all(len(i) < 1000 for i in got.ignored)


def test_flags_that_change_how_a_job_exchanges():
    got = megatron.read("--num-layers 4 --tensor-model-parallel-size 2 --context-parallel-size 2 --cp-comm-type p2p "
                        "--use-tp-pp-dp-mapping --ddp-bucket-size 20000000 --overlap-moe-expert-parallel-comm "
                        "--checkpoint-activations --grad-reduce-in-bf16", "args.txt")
    s = stated(got)
    assert (s["layout.cp_kind"], s["layout.order"], s["layout.dp_bucket_params"]) == \
        ("ring", ["tp", "cp", "ep", "pp", "dp"], 20000000)
    assert (s["overlap.ep"], s["overlap.ep_paired"], s["layout.recompute"], s["precision.grads"]) == \
        (1.0, True, "full", "bf16")
    a2a = megatron.read("--num-layers 4 --tensor-model-parallel-size 2 --cp-comm-type a2a", "args.txt")
    assert any(p.startswith("--cp-comm-type: 'a2a' is not modelled") for p in a2a.problems)


MOE = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --num-experts 8 "


@pytest.mark.parametrize("flags, expected", [
    # arguments.py: --moe-aux-loss-coeff alone weighs the default aux_loss
    ("--moe-aux-loss-coeff 1e-2", {"model.moe.balance": "aux-loss"}),
    ("--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3", {"model.moe.balance": "aux-loss"}),
    ("--moe-router-load-balancing-type aux_loss", {}),  # weighted 0.0: no loss balances anything
    ("--moe-router-load-balancing-type none --moe-aux-loss-coeff 1e-2", {}),
    # core_v0.15.0: one coefficient per type
    ("--moe-router-load-balancing-type seq_aux_loss global_aux_loss --moe-aux-loss-coeff 0 1e-3",
     {"model.moe.balance": "aux-loss"}),
    ("--moe-router-enable-expert-bias --moe-router-score-function sigmoid", {"model.moe.balance": "loss-free"}),
    ("--moe-expert-capacity-factor 1.25", {"model.moe.capacity_factor": 1.25}),
    ("--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity",
     {"model.moe.capacity_factor": 1.0, "model.moe.pad_to_capacity": True}),
    ("--moe-expert-capacity-factor -1", {}),  # transformer_config.py: below 0 is None, dropless
    # arguments.py core_v0.13.0:2773: random logits that balance the tokens, for benchmarks
    ("--moe-router-force-load-balancing", {"model.moe.expert_load": 1.0}),
])
def test_router_balance_and_capacity(flags, expected):
    got = megatron.read(MOE + flags, "args.txt")
    router = ("model.moe.balance", "model.moe.capacity_factor", "model.moe.pad_to_capacity", "model.moe.expert_load")
    assert {k: v for k, v in stated(got).items() if k in router} == expected and got.problems == ()
    read = ("--moe-router-enable-expert-bias", "--moe-router-load-balancing-type", "--moe-aux-loss-coeff",
            "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity")
    assert not set(read) & set(got.ignored)  # each router flag is stated, or listed with why


@pytest.mark.parametrize("flags, key", [
    ("--moe-pad-expert-input-to-capacity", "--moe-pad-expert-input-to-capacity"),  # Megatron-Core refuses it
    ("--moe-expert-capacity-factor 0", "--moe-expert-capacity-factor"),
    ("--moe-expert-capacity-factor lots", "--moe-expert-capacity-factor"),
    ("--moe-router-load-balancing-type sinkhorn", "--moe-router-load-balancing-type"),
    ("--moe-router-load-balancing-type even", "--moe-router-load-balancing-type"),
    ("--moe-aux-loss-coeff -1e-2", "--moe-aux-loss-coeff"),
])
def test_router_values_the_tool_cannot_take_are_one_line_problems(flags, key):
    got = megatron.read(MOE + flags, "args.txt")
    assert [p.split(":")[0] for p in got.problems] == [key]
    assert "\n" not in got.problems[0]


def test_padding_to_a_capacity_the_script_leaves_unresolved_is_listed_not_refused():
    got = megatron.read(MOE + "--moe-expert-capacity-factor $CF --moe-pad-expert-input-to-capacity", "run.sh")
    assert got.problems == () and "model.moe.pad_to_capacity" not in stated(got)
    assert "--moe-expert-capacity-factor $CF (set outside the script)" in got.ignored
