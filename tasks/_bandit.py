"""What every one-step bandit task refuses (SPEC 3.2, 3.3)."""
from __future__ import annotations

from contract.batch import GROUP_NEEDS, Request


def check_bandit_request(task, req: Request) -> None:
    if req.level != "sequence":
        raise ValueError(f"{req.name} (algo.level={req.level}) has no meaning on task "
                         f"{task.name!r}, a one-step bandit")
    if req.k_explicit and req.needs in GROUP_NEEDS:
        raise ValueError(f"algo.k: on task {task.name!r} the group of {req.name} is fixed by "
                         "the task (the action set, or the sampled batch); do not set algo.k")
