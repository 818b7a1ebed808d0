"""Run under `torchrun --nproc_per_node 4` with a patched megatron-core first on the path: TP 2 x PP 2 over gloo on
CPU, each case sends a known tensor forward and another backward between the two stages (batched, one operation at
a time, and with the interleaved schedule's overlapped receives) and prints, per rank, one JSON line: the case, whether both received
tensors are exact and how many all-gathers the exchange ran."""

import json

import torch
import torch.distributed as dist

torch.cuda.current_device = lambda: "cpu"  # the receive buffers' device: gloo runs on CPU
torch.cuda.synchronize = lambda *args: None
GATHERS = [0]
_all_gather_into_tensor = dist.all_gather_into_tensor


def _counted(*args, **kwargs):
    GATHERS[0] += 1
    return _all_gather_into_tensor(*args, **kwargs)


dist.all_gather_into_tensor = _counted

from megatron.core import parallel_state  # noqa: E402 (after the stand-ins above)
from megatron.core.model_parallel_config import ModelParallelConfig  # noqa: E402
from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator  # noqa: E402

CASES = {
    "divisible": dict(shape=(4, 2, 8)),
    "divisible, one operation at a time": dict(shape=(4, 2, 8), batched=False),
    "divisible, overlapped": dict(shape=(4, 2, 8), batched=False, overlap=True),
    "not divisible by TP": dict(shape=(3, 1, 3)),
    "sequence parallel": dict(shape=(4, 2, 8), sequence_parallel=True),
    "TP 1 in the config": dict(shape=(4, 2, 8), tp=1),
    "another pipeline group": dict(shape=(4, 2, 8), own_group=True),
}


def exchange(shape, batched=True, overlap=False, sequence_parallel=False, tp=2, own_group=False) -> bool:
    """Stage 0 sends `1 + arange` forward, stage 1 sends `7 + arange` backward; whether both arrive exact."""
    group = parallel_state.get_pipeline_model_parallel_group()
    if own_group:  # same ranks, another group object (every rank makes both, as new_group asks)
        groups = [dist.new_group(ranks) for ranks in ([0, 2], [1, 3])]
        group = groups[dist.get_rank() % 2]
    config = ModelParallelConfig(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=2,
        pipeline_dtype=torch.float32,
        sequence_parallel=sequence_parallel,
        batch_p2p_comm=batched,
        overlap_p2p_comm=overlap,
    )
    p2p = P2PCommunicator(group, config)
    numel = torch.Size(shape).numel()

    def known(offset: int) -> torch.Tensor:
        return torch.arange(numel, dtype=torch.float32).reshape(shape) + offset

    def waited(result):
        received, handles = result
        for handle in handles.values():
            handle.wait()
        return received

    if parallel_state.get_pipeline_model_parallel_rank() == 0:
        if overlap:
            waited(p2p.send_forward_recv_forward(known(1), False, shape, overlap_p2p_comm=True))
            grad = waited(p2p.send_backward_recv_backward(None, True, shape, overlap_p2p_comm=True))
        else:
            p2p.send_forward(known(1), is_last_stage=False)
            grad = p2p.recv_backward(shape, is_last_stage=False)
        return torch.equal(grad, known(7))
    if overlap:
        activation = waited(p2p.send_forward_recv_forward(None, True, shape, overlap_p2p_comm=True))
        waited(p2p.send_backward_recv_backward(known(7), False, shape, overlap_p2p_comm=True))
    else:
        activation = p2p.recv_forward(shape, is_first_stage=False)
        p2p.send_backward(known(7), is_first_stage=False)
    return torch.equal(activation, known(1))


def main() -> None:
    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
    for case, kwargs in CASES.items():
        before = GATHERS[0]
        exact = exchange(**kwargs)
        print(json.dumps({"rank": dist.get_rank(), "case": case, "exact": exact, "gathers": GATHERS[0] - before}))
    dist.destroy_process_group()


main()
