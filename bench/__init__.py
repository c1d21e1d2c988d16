"""tpo-bench's composition root: builds a run from the config, joins a task (groups of
scored candidates) with an algorithm (a loss) and records it. Nothing below imports it:
tasks and algorithms meet through `contract`.
"""
