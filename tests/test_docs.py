"""The documentation holds: the README stays an entry point whose links resolve, every docs page is on the
site's nav, and the examples the pages show run as shown (the search space loads; the Python API block runs
once `maya.api` is there). The site's own links are checked by `scripts/docs` (`mkdocs build --strict`)."""

import re
import shlex
import subprocess
import sys

import pytest
import yaml
from paths import REPO

from maya.search import load_space
from maya.search.space import ROLES

DOCS = REPO / "docs"
README_MAX_LINES = 200
LINK = re.compile(r"\]\(([^)\s]+)\)")


def marked_block(page: str, marker: str) -> str:
    """The fenced code block that follows `<!-- docs-test: MARKER ...-->` on a docs page."""
    text = (DOCS / page).read_text()
    found = re.search(rf"<!-- docs-test: {re.escape(marker)}\b[^>]*-->\n```\w*\n(.*?)\n```", text, re.S)
    assert found, f"docs/{page}: no code block marked `docs-test: {marker}`"
    return found.group(1)


def nav_pages(entries: list) -> list[str]:
    """The page files of the nav in mkdocs.yml, nested sections flattened."""
    pages = []
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_readme_is_an_entry_point():
    """At most 200 lines, and the two commands come before anything else."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    first_block = "\n".join(lines[: lines.index("```", lines.index("```bash") + 1)])
    assert "scripts/setup && .venv/bin/maya demo" in first_block
    assert "scripts/test" in first_block


def test_readme_links_resolve():
    """Every relative link of the README names a file of the checkout (MkDocs checks only docs/)."""
    text = (REPO / "README.md").read_text()
    targets = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    assert targets, "the README links to nothing"
    missing = [t for t in targets if not (REPO / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_every_docs_page_is_on_the_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == pages, "mkdocs.yml's nav and docs/*.md differ"
    assert len(nav) == len(set(nav)), "a page is on the nav twice"


def test_search_page_example_loads_as_the_page_says():
    """The space of docs/search.md loads for the page's command, with the point counts the page states."""
    command = shlex.split(marked_block("search.md", "search-command").replace("\\\n", " "))
    script = command[command.index("--") + 1 :]
    space = load_space(yaml.safe_load(marked_block("search.md", "search-space")), script)
    assert (space.size, len(space.valid_points())) == (1152, 756)
    text = (DOCS / "search.md").read_text()
    assert "1,152 points, of which 756" in text
    argv, env = space.render(space.valid_points()[-1])
    assert argv[-2:] == ["--sequence-parallel", "--use-distributed-optimizer"] and env == {"NCCL_ALGO": "Tree"}


@pytest.mark.slow
@pytest.mark.e2e
def test_python_api_page_example_runs(tmp_path):
    """The end-to-end block of docs/python-api.md runs as written (it emulates the bundled example)."""
    pytest.importorskip("maya.api", reason="maya.api is not in this checkout yet")
    code = marked_block("python-api.md", "python-api")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "iteration_ms" in out.stdout and "stored as" in out.stdout


def test_search_page_megatron_space_loads_for_its_command():
    """benchmarks/workloads/megatron_gpt_space.yaml loads for docs/search.md's Megatron command with the counts the
    page states, declares every role the pruning rules read, and renders Megatron's own flags."""
    command = shlex.split(marked_block("search.md", "megatron-search-command").replace("\\\n", " "))
    path = REPO / command[command.index("--space") + 1].split("/path/to/maya/", 1)[1]
    script = command[command.index("--") + 1 :]
    space = load_space(path, script)
    assert (space.size, len(space.valid_points())) == (432, 180)
    assert "432 points, of which 180" in " ".join((DOCS / "search.md").read_text().split())
    assert {p.role for p in space.parameters} - {None} == set(ROLES)
    point = {"tp": 4, "pp": 2, "vp": 2, "microbatches": 4, "recompute": "full", "sp": True, "dist_opt": False}
    argv, env = space.render(space.point(point))
    assert argv[argv.index("--tensor-model-parallel-size") :] == [
        *("--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2"),
        *("--num-virtual-stages-per-pipeline-rank", "2", "--micro-batch-size", "4"),
        *("--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"),
        "--sequence-parallel",
    ]
    plain = space.render(space.point(point | {"tp": 2, "pp": 1, "vp": 1, "recompute": "none", "sp": False}))[0]
    assert plain[plain.index("--tensor-model-parallel-size") :] == [
        *("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1", "--micro-batch-size", "1")
    ]
