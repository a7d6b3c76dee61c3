"""Process-group setup for ``torchrun`` (NCCL on GPUs, gloo on CPU); one process is world size 1.

The trainer runs the same code path with one process or many: everything distributed goes
through the helpers below, which are no-ops when the world size is 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import UserError


class DeviceError(UserError, RuntimeError):
    """A device asked for that this machine does not have, or a distributed run started without torchrun."""


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def resolve_device(preference: str, local_rank: int = 0) -> torch.device:
    """``auto`` picks CUDA when present, else CPU; ``cuda`` without a GPU is an error."""
    if preference == "cpu":
        return torch.device("cpu")
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DeviceError(
                "--device cuda was asked for but torch sees no CUDA GPU", todo="use --device cpu (or auto)"
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(device_preference: str = "auto") -> DistEnv:
    """Read torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and join the group."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    device = resolve_device(device_preference, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            raise DeviceError(
                f"WORLD_SIZE={world_size} but {', '.join(missing)} is not set",
                todo="launch with torchrun, which sets them",
            )
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistEnv(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def all_reduce_sum(values: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum a tensor over all processes (in place; returned for chaining)."""
    if env.enabled:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_reduce_min_int(value: int, env: DistEnv) -> int:
    if not env.enabled:
        return value
    t = torch.tensor([value], dtype=torch.long, device=env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def all_gather_object(obj, env: DistEnv) -> list:
    if not env.enabled:
        return [obj]
    out = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(env: DistEnv) -> None:
    if env.enabled:
        dist.barrier()


def destroy(env: DistEnv) -> None:
    if env.enabled and dist.is_initialized():
        dist.destroy_process_group()
