"""DeepSpeed ZeRO-3 (CPU accelerator, fp32) on fsdp_model's transformer: the
setup shared by tests/torch/test_deepspeed.py and the DeepSpeed rows of
perf/torch-fsdp/torch_fsdp_bench.py, so that the test checks what the
benchmark times.

Every parameter is partitioned (stage3_param_persistence_threshold 0, as
fully_shard does per block in the FSDP runs); Adam; gradient clipping at 1.0,
so that DeepSpeed computes the global gradient norm every step. The caller has
run deepspeed.init_distributed (with DS_ACCELERATOR=cpu in the environment).
"""
import torch
import torch.nn.functional as F

import fsdp_model


def make_engine(zero_extra=None, d=256, layers=2, seq=64, micro_batch=8, lr=3e-3):
    """(engine, corpus): the model seeded the same on every rank and run."""
    import deepspeed

    zero = {"stage": 3, "stage3_param_persistence_threshold": 0}
    zero.update(zero_extra or {})
    config = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1,
              "gradient_clipping": 1.0, "zero_optimization": zero,
              "zero_allow_untested_optimizer": True, "steps_per_print": 1000}
    torch.manual_seed(0)
    data, vocab = fsdp_model.load_corpus()
    model = fsdp_model.CharLM(vocab, d=d, layers=layers, seq=seq)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    return engine, data


def train_step(engine, data, rank, step, micro_batch, seq):
    """One forward, backward and optimizer step on this rank's batch; the loss."""
    x, y = fsdp_model.batch(data, rank, step, micro_batch, seq)
    loss = F.cross_entropy(engine(x).flatten(0, 1), y.flatten())
    engine.backward(loss)
    engine.step()
    return loss
