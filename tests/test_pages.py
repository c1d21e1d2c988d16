"""The docs pages' generated blocks (analysis/paper/pages.py) are what the committed data
gives: a number on docs/reproducing.md or docs/leaderboard.md cannot drift from it."""
import pytest

from tpo_bench.analysis.paper import pages


def committed_blocks(name):
    text = pages.PAGES[name].read_text()
    return {m.group(2): m.group(3).rstrip() for m in pages.BLOCK.finditer(text)}


def _check(name, block):
    committed = committed_blocks(name)
    assert block in committed, f"{pages.PAGES[name]} lacks the block {block}"
    assert committed[block] == pages.BLOCKS[name][block]().rstrip(), (
        f"{pages.PAGES[name]}: block {block} is stale; run `python -m analysis.paper.pages`")


@pytest.mark.parametrize("block", ["verdicts", "paired", "status", "cost", "margins"])
def test_reproducing_page_is_generated_from_the_committed_report_and_runs(block):
    _check("reproducing", block)


@pytest.mark.parametrize("block", ["board", "readings"])
def test_leaderboard_page_is_generated_from_the_committed_board(block):
    _check("leaderboard", block)


@pytest.mark.slow
def test_the_power_table_is_the_rules_on_the_papers_seeds():
    _check("reproducing", "power")


def test_every_block_a_page_names_has_a_generator():
    for name in pages.PAGES:
        assert set(committed_blocks(name)) - set(pages.FOREIGN) == set(pages.BLOCKS[name])
    with pytest.raises(KeyError, match="no generator for block 'nope'"):
        pages.fill("<!-- generated:nope -->\nx\n<!-- /generated:nope -->", {})


def test_fill_rewrites_only_the_blocks():
    text = "prose 1\n<!-- generated:a -->\nold\n<!-- /generated:a -->\nprose 2\n"
    assert pages.fill(text, {"a": lambda: "new"}) == (
        "prose 1\n<!-- generated:a -->\nnew\n<!-- /generated:a -->\nprose 2\n")


def test_the_margins_block_lists_every_family_the_rules_declare():
    from tpo_bench.analysis.paper import verdicts as V
    block = committed_blocks("reproducing")["margins"]
    for name, m in V.MARGINS.items():
        assert f"`{name}`" in block and f"{m.delta:g}" in block, name
