"""MkDocs hook: pages that show what the repository holds, generated at build time so
they cannot go stale. `<!-- generated: NAME -->` in a page is replaced by NAME's output:
`algorithm-docstrings` (each algorithm module's docstring, its equation) and
`paper-numbers` (analysis/paper/paper_numbers.csv, the paper's numbers the report judges).
The figures are kept once, in reproduction/figures/: a page links them there (which GitHub
shows as well) and the site serves them as figures/ beside the pages."""
import ast
import csv
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIGURES = REPO / "reproduction" / "figures"
FIGURE_LINK = "](../reproduction/figures/"  # from a page in docs/


def algorithm_docstrings() -> str:
    parts = []
    for path in sorted((REPO / "algorithms").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if path.stem == "__init__" or not doc:
            continue
        parts += [f"### `{path.stem}`", "", f"`algorithms/{path.name}`", "", "```text", doc, "```", ""]
    return "\n".join(parts)


def paper_numbers() -> str:
    rows = list(csv.DictReader((REPO / "analysis" / "paper" / "paper_numbers.csv").open()))
    out = ["| experiment | where in the paper | method | setting | metric | value |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        setting = ", ".join(f"{k} {r[k]}" for k in ("H", "V", "K", "B", "epochs", "eta", "match", "D")
                            if r.get(k))
        value = r["value"] or (f"{r['at_least']} of {r['out_of']}" if r.get("at_least") else "")
        cells = [r["experiment"], r["citation"], r["algo"], setting, r["metric"], value]
        out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(out) + f"\n\n{len(rows)} numbers and claims, from `analysis/paper/paper_numbers.csv`."


GENERATORS = {"algorithm-docstrings": algorithm_docstrings, "paper-numbers": paper_numbers}


def on_files(files, config):
    from mkdocs.structure.files import File

    for png in sorted(FIGURES.glob("*.png")):
        files.append(File(f"figures/{png.name}", str(FIGURES.parent), config["site_dir"],
                          config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    markdown = markdown.replace(FIGURE_LINK, "](figures/")
    return re.sub(r"<!-- generated: ([\w-]+) -->", lambda m: GENERATORS[m.group(1)](), markdown)
