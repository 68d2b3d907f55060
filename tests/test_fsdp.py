"""FSDP2 on two CPU processes (gloo): the backbone sharded the way examples/accelerate/fsdp.yaml shards it
(each LangSpecEncoderLayer / LangSpecDecoderLayer a unit, then the root) trains like one process on the same
global batch, and its gathered weights save and load with `from_pretrained`.

accelerate itself does not apply its FSDP plugin to CPU processes (see the second test), so the sharding is
done here with torch's `fully_shard`, what the plugin calls on GPUs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = r"""
import json, sys
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

sys.path.insert(0, sys.argv[1])
from conftest import tiny_config
from hf_langspec import LAAConfig, LAAForConditionalGeneration
from hf_langspec.modeling.backbone import LangSpecDecoderLayer, LangSpecEncoderLayer
from hf_langspec.training.processes import end_process_group

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = LAAForConditionalGeneration(tiny_config(LAAConfig, laa_points=["dec_self_attn"], lee_points=[4]))
batch = torch.load(sys.argv[2])
for module in model.modules():
    if isinstance(module, (LangSpecEncoderLayer, LangSpecDecoderLayer)):
        fully_shard(module)
fully_shard(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
half = {k: v[rank::world] for k, v in batch.items()}
losses = []
for step in range(4):
    loss = model(**half).loss
    loss.backward()  # FSDP2 averages the gradients over the processes
    optimizer.step()
    optimizer.zero_grad()
    total = loss.detach().clone()
    dist.all_reduce(total)
    losses.append(total.item() / world)
state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
if rank == 0:
    torch.manual_seed(0)
    plain = LAAForConditionalGeneration(tiny_config(LAAConfig, laa_points=["dec_self_attn"], lee_points=[4]))
    plain.load_state_dict(state)
    plain.save_pretrained(sys.argv[3])
    json.dump({"losses": losses, "sharded": type(model).__name__}, open(sys.argv[3] + "/fsdp.json", "w"))
end_process_group()  # every rank waits for rank 0's save before the group ends
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fixed_batch():
    from conftest import LANGUAGES, random_batch

    batch = random_batch(batch=8)
    batch["input_ids"][batch["input_ids"] == 1] = 7  # no padding: every example has the same token count,
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])  # so two halves' mean losses average to the whole's
    batch["labels"] = torch.randint(
        5, 100, batch["decoder_input_ids"].shape, generator=torch.Generator().manual_seed(3)
    )
    del batch["decoder_attention_mask"], batch["decoder_input_ids"]
    batch["src_lang_ids"] = torch.arange(8) % len(LANGUAGES)
    batch["tgt_lang_ids"] = (torch.arange(8) + 1) % len(LANGUAGES)
    return batch


@pytest.mark.slow
def test_fsdp2_on_two_cpu_processes_trains_like_one_process_and_saves_a_loadable_model(tmp_path):
    from conftest import tiny_config
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec import LAAConfig, LAAForConditionalGeneration

    batch = fixed_batch()
    torch.save(batch, tmp_path / "batch.pt")
    (tmp_path / "model").mkdir()
    tests = str(Path(__file__).resolve().parent)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), str(_script(tmp_path)), tests, str(tmp_path / "batch.pt"), str(tmp_path / "model")]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    sharded = json.loads((tmp_path / "model" / "fsdp.json").read_text())
    assert sharded["sharded"] == "FSDPLAAForConditionalGeneration"  # fully_shard applied
    # one process, the whole batch, the same initial weights and optimizer
    torch.manual_seed(0)
    model = LAAForConditionalGeneration(tiny_config(LAAConfig, laa_points=["dec_self_attn"], lee_points=[4]))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(4):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert sharded["losses"] == pytest.approx(losses, rel=1e-4)
    assert losses[-1] < losses[0]  # it learned something, so equal losses mean equal updates
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model").eval()
    model.eval()
    with torch.no_grad():
        assert torch.allclose(loaded(**batch).logits, model(**batch).logits, atol=1e-4)


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "fsdp_worker.py"
    path.write_text(WORKER)
    return path


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_accelerate_with_the_shipped_fsdp_config_on_cpu_says_it_trains_with_ddp(tmp_path):
    import yaml
    from test_training import tiny_run_config

    root = Path(__file__).resolve().parents[1]
    config = tiny_run_config(
        tmp_path, training={"max_steps": 2, "per_device_train_batch_size": 4}, evaluation={"splits": []}
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(root / "examples" / "accelerate" / "fsdp.yaml"), "--mixed_precision", "no",
               "--num_processes", "2", "--main_process_port", str(free_port()),
               str(root / "examples" / "train_translation.py"), "--config", str(tmp_path / "config.yaml")]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert "accelerate was launched with FSDP, but it applies FSDP only on GPUs" in out.stderr
    assert json.loads((tmp_path / "run" / "run_info.json").read_text())["world_size"] == 2


@pytest.mark.slow
@pytest.mark.reliability
def test_processes_that_do_not_join_one_group_are_refused_with_the_fix(tmp_path):
    import yaml
    from test_training import tiny_run_config

    root = Path(__file__).resolve().parents[1]
    config = tiny_run_config(tmp_path, training={"max_steps": 2, "use_cpu": False}, evaluation={"splits": []})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(root / "examples" / "accelerate" / "fsdp.yaml"), "--mixed_precision", "no",
               "--num_processes", "2", "--main_process_port", str(free_port()),
               str(root / "examples" / "train_translation.py"), "--config", str(tmp_path / "config.yaml")]  # fmt: skip
    if torch.cuda.is_available():
        pytest.skip("with a GPU the processes do join")
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_env())
    assert out.returncode != 0
    assert "did not join one process group (no GPU here, and training.use_cpu is false)" in out.stderr
    assert "Traceback" not in out.stderr.split("did not join")[0][-2000:]


@pytest.mark.parametrize("checkpoints", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_the_final_model_of_an_fsdp_run_is_saved_whole_whatever_its_checkpoints_state_dict_type(
    tmp_path, monkeypatch, checkpoints
):
    """The Trainer's `save_model` under FSDP writes nothing with the SHARDED_STATE_DICT of the shipped fsdp.yaml
    (on an H100 the run then failed without a model folder). `save_loadable_model` gathers the full state dict for
    that one save and gives the plugin back its type. accelerate applies FSDP only on GPUs, so the Trainer is told
    it runs under FSDP here, with accelerate's own plugin: the Trainer's and accelerate's save code run unchanged.
    The test sets are then decoded with that saved model, not with the shards (one process would wait for all)."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from conftest import tiny_model
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.training.trainer import LangSpecSeq2SeqTrainer
    from hf_langspec.training.training_args import LangSpecTrainingArguments

    model = tiny_model()
    args = LangSpecTrainingArguments(output_dir=str(tmp_path / "checkpoints"), use_cpu=True, report_to="none")
    trainer = LangSpecSeq2SeqTrainer(model=model, args=args)
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type=checkpoints)
    monkeypatch.setattr(trainer.accelerator.state, "fsdp_plugin", plugin, raising=False)
    monkeypatch.setattr(trainer, "is_fsdp_enabled", True)

    trainer.save_model(str(tmp_path / "plain"))  # the Trainer alone: the sharded type writes no weights
    assert (tmp_path / "plain" / "model.safetensors").exists() == (checkpoints == "FULL_STATE_DICT")

    trainer.save_loadable_model(tmp_path / "model")
    assert checkpoints in str(plugin.state_dict_type)  # the checkpoints keep their type
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model")
    evaluated = trainer.model_for_evaluation(model, tmp_path / "model")  # not the shards: the saved whole model
    assert evaluated is not model and type(evaluated) is type(model)
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
        assert torch.equal(evaluated.state_dict()[name], tensor), name
    monkeypatch.setattr(trainer, "is_fsdp_enabled", False)
    assert trainer.model_for_evaluation(model, tmp_path / "model") is model
