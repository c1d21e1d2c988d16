"""Tasks: each module produces groups of scored candidates (`contract.batch.Batch`) from a
policy it owns. They never import algorithms.

A task is a frozen dataclass registered under a name; its fields are its config
(`conf/task/<preset>.yaml`) and it exposes

    episodes: int                                   run length (updates)
    check_algorithm(request) -> None                refuse what has no meaning here (ValueError)
    make_policy(gen) -> torch.nn.Module             SPEC's model and initialisation
    rollout(policy, request, streams) -> Rollout    sample and score one episode
    logprobs(policy, batch) -> Tensor               current log-probs, like batch.logp_old
    evaluate(policy) -> dict | None                 optional held-out metrics
"""
from contract.registry import Registry

TASKS = Registry("task", "tasks")
register = TASKS.register
