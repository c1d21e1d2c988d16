"""The ground floor: what tasks, algorithms, the runner and the analysis share, and
nothing else. It imports none of them.

    batch     the Batch a task hands an algorithm, the Request, the two Protocols
    registry  name -> implementation tables, TASKS and ALGORITHMS (a module registers itself)
    identity  a run's config hash (its science, the preset names left out)
    rng       a run's three random streams
    schema    what a run leaves on disk: layout, file names, status words, metric columns
    io        the one atomic writer, and the provenance a record carries
"""
if __name__ == "contract":  # the top-level name: this module is tpo_bench.contract
    import tpo_bench

    tpo_bench.alias(__name__)
    __package__ = f"tpo_bench.{__name__}"  # what follows resolves its imports there
