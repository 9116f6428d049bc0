"""Every link of the documentation resolves: pages, files and #anchors of docs/**/*.md and README.md.

The strict site build (``mkdocs build --strict`` in .ci/run) refuses a broken link or anchor too, but it
needs the docs extra and runs after the whole suite; this check reads the Markdown itself, in well under a
second, so a heading renamed under a link fails in the unit tier. It follows what the site's Markdown does
(mkdocs.yml): heading ids as Python-Markdown's ``toc`` makes them (``_1`` for a repeated one, ``{#id}`` of
``attr_list``), the sections ``pymdownx.snippets`` pulls in (``--8<-- "file:section"``) and the object ids
of mkdocstrings' ``::: module.Object`` blocks. Links inside code are not links.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SNIPPET_BASES = (DOCS, ROOT)  # mkdocs.yml: pymdownx.snippets base_path

FENCE = re.compile(r"^\s*(```|~~~)")
SNIPPET = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$')
SECTION = re.compile(r"--8<--\s+\[(start|end):([\w-]+)\]")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
EXPLICIT_ID = re.compile(r"\s*\{:?\s*#([\w-]+)[^}]*\}\s*$")
HTML_ID = re.compile(r"""<[a-z][^>]*\sid=["']([^"']+)["']""")
AUTODOC = re.compile(r"^:::\s+([\w.]+)\s*$")
INLINE_CODE = re.compile(r"(`+).+?\1")
COMMENT = re.compile(r"<!--.*?-->", re.S)
# [text](target "title") and ![alt](target); the text may hold one level of brackets ([`x`][y] is not matched)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)", re.M)


def slugify(text: str) -> str:
    """A heading's id as Python-Markdown's ``toc`` extension makes it (its default ``slugify``)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _snippet_text(spec: str, seen: tuple[str, ...]) -> str:
    name, _, section = spec.partition(":")
    path = next((base / name for base in SNIPPET_BASES if (base / name).is_file()), None)
    if path is None:
        raise FileNotFoundError(f"snippet {name!r} is in none of docs/ and the repository root")
    text = path.read_text(encoding="utf-8")
    if section:
        start = re.search(rf"--8<--\s+\[start:{re.escape(section)}\].*\n", text)
        end = re.search(rf".*--8<--\s+\[end:{re.escape(section)}\]", text)
        if start is None or end is None:
            raise ValueError(f"snippet {spec!r}: section {section!r} is not marked in {name}")
        text = text[start.end():end.start()]
    return expand(text, (*seen, spec))


def expand(text: str, seen: tuple[str, ...] = ()) -> str:
    """``text`` with every ``--8<-- "file[:section]"`` line replaced by what it includes."""
    out = []
    for line in text.splitlines(keepends=True):
        match = SNIPPET.match(line)
        if match and match.group(1) not in seen:
            out.append(_snippet_text(match.group(1), seen))
        elif not SECTION.search(line):
            out.append(line)
    return "".join(out)


def prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks, with comments removed."""
    lines, fenced = [], None
    for line in COMMENT.sub("", text).splitlines():
        fence = FENCE.match(line)
        if fence and fenced is None:
            fenced = fence.group(1)
        elif fence and fence.group(1) == fenced:
            fenced = None
        elif fenced is None:
            lines.append(line)
    return lines


def _object_exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr) and attr not in getattr(obj, "__annotations__", {}):
                return False
            obj = getattr(obj, attr, None)
        return True
    return False


@dataclass
class Page:
    """A Markdown file's links and the anchors it offers, read from its text with snippets expanded."""

    path: Path
    links: list[str]
    anchors: set[str]
    autodoc: list[str]

    @classmethod
    def read(cls, path: Path, text: str | None = None) -> Page:
        """The page at ``path``; ``text``: its Markdown in place of the file's."""
        text = expand(path.read_text(encoding="utf-8") if text is None else text)
        anchors: set[str] = set()
        counts: dict[str, int] = {}
        autodoc = []
        for line in prose_lines(text):
            anchors.update(HTML_ID.findall(INLINE_CODE.sub("", line)))
            if match := AUTODOC.match(line):
                autodoc.append(match.group(1))
            if not (heading := HEADING.match(line)):
                continue
            title = heading.group(2)
            if explicit := EXPLICIT_ID.search(title):
                anchors.add(explicit.group(1))
                continue
            slug = slugify(title)
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}_{n}")
        body = INLINE_CODE.sub("", "\n".join(prose_lines(text)))  # no link inside inline code
        links = LINK.findall(body) + REFERENCE_DEF.findall(body)
        return cls(path, links, anchors, autodoc)

    def has_anchor(self, anchor: str) -> bool:
        """An id of a heading or element of the page, or an object inside one of its ``:::`` blocks."""
        if anchor in self.anchors or anchor in self.autodoc:
            return True
        return any(anchor.startswith(f"{ident}.") and _object_exists(anchor) for ident in self.autodoc)


def broken_links(files: list[Path], site_root: Path | None, texts: dict[Path, str] | None = None) -> list[str]:
    """``file: target (why)`` for every link of ``files`` that does not resolve.

    ``site_root``: the site's docs folder; a link from a page in it must stay in it (mkdocs copies only
    that folder). ``None``: any file of the repository is a target (README.md, as GitHub shows it).
    ``texts``: Markdown read in place of these files' own (a page that exists only in a test).
    """
    pages: dict[Path, Page] = {path: Page.read(path, text) for path, text in (texts or {}).items()}

    def page(path: Path) -> Page:
        if path not in pages:
            pages[path] = Page.read(path)
        return pages[path]

    problems = []
    for path in files:
        source = page(path)  # (its ::: objects exist: tests/project/test_docs_generated.py checks the API list)
        for link in source.links:
            if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto: ...
                continue
            target, _, anchor = link.partition("#")
            resolved = (path.parent / target).resolve() if target else path
            where = f"{path.relative_to(ROOT)}: {link}"
            if site_root is not None and not resolved.is_relative_to(site_root):
                problems.append(f"{where} (outside {site_root.relative_to(ROOT)}/: not part of the site)")
            elif not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif site_root is not None and resolved.is_dir():
                problems.append(f"{where} (a folder: link to its page)")
            elif anchor and resolved.suffix == ".md" and not page(resolved).has_anchor(anchor):
                problems.append(f"{where} (no heading or id #{anchor} in {resolved.name})")
    return problems


def nav_pages(nav: list) -> list[str]:
    """The page paths of mkdocs.yml's ``nav`` (nested sections flattened)."""
    out = []
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            out += nav_pages(value) if isinstance(value, list) else [value]
    return [p for p in out if not re.match(r"^[a-z]+:", p)]


def site_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_every_link_and_anchor_of_the_site_resolves():
    problems = broken_links(site_pages(), site_root=DOCS)
    assert not problems, "broken documentation links:\n" + "\n".join(problems)


def test_every_link_and_anchor_of_the_readme_resolves():
    problems = broken_links([ROOT / "README.md"], site_root=None)
    assert not problems, "broken README links:\n" + "\n".join(problems)


def mkdocs_config() -> dict:
    """mkdocs.yml, its ``!ENV [NAME, default]`` values read as their defaults."""
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!ENV", lambda load, node: load.construct_sequence(node)[-1]
                           if isinstance(node, yaml.SequenceNode) else None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=loader)


def test_the_nav_and_the_pages_are_the_same_files():
    nav = nav_pages(mkdocs_config()["nav"])
    missing = [p for p in nav if not (DOCS / p).is_file()]
    left_out = sorted({str(p.relative_to(DOCS)) for p in site_pages()} - set(nav))
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    assert not left_out, f"pages in docs/ that mkdocs.yml's nav leaves out: {left_out}"


@pytest.mark.parametrize(("link", "why"), [
    ("training.md#no-such-heading", "no heading or id #no-such-heading"),
    ("no-such-page.md", "no such file"),
    ("../README.md", "not part of the site"),
    ("#the-first-run", None),  # a heading of the page itself: fine
    ("training.md#the-run-directory", None),
    ("reference/api/estimators.md#estimators.batch.StepBatch", None),  # an object of a ::: block
    ("reference/api/estimators.md#estimators.batch.StepBatch.layout", None),  # one of its members
    ("reference/api/estimators.md#estimators.batch.NoSuchThing", "no heading or id"),
])
def test_a_planted_link_is_judged(link, why):
    """The check can fail: a broken anchor or page planted in a real page's text is reported."""
    page = DOCS / "getting-started.md"
    planted = page.read_text(encoding="utf-8") + f"\nSee [this]({link}).\n"
    problems = [p for p in broken_links([page], site_root=DOCS, texts={page: planted}) if link in p]
    if why is None:
        assert not problems
    else:
        assert len(problems) == 1 and why in problems[0], problems


@pytest.mark.parametrize(("heading", "slug"), [
    ("The first run", "the-first-run"),
    ("`gagpo train`", "gagpo-train"),
    ("Table 1, ALFWorld (`lab-alfworld`, 64 `valid_unseen` episodes, success in %)",
     "table-1-alfworld-lab-alfworld-64-valid_unseen-episodes-success-in"),
    ("bow-mlp: a policy that learns on a CPU", "bow-mlp-a-policy-that-learns-on-a-cpu"),
    ("GiGPO (w/ std) & [PPO](x.md)", "gigpo-w-std-ppo"),
])
def test_heading_ids_are_the_toc_extensions(heading, slug):
    assert slugify(heading) == slug


def test_a_heading_repeated_on_a_page_gets_a_numbered_id(tmp_path):
    text = "# A\n\n## Options\n\n```\n## Options\n```\n\n## Options {#custom}\n\n## Options\n"
    assert Page.read(tmp_path / "page.md", text).anchors == {"a", "options", "custom", "options_1"}


def test_site_search_splits_names_at_dots_and_underscores():
    """`lora_rank` and `rollout.group_size` are found by their parts (Material's search splits the index
    and the query with mkdocs.yml's separator; without it, `lora_rank` found nothing)."""
    plugins = mkdocs_config()["plugins"]
    search = next((p["search"] for p in plugins if isinstance(p, dict) and "search" in p), None) or {}
    separator = search.get("separator", r"[\s\-]+")  # Material's default: spaces and hyphens only
    words = [w for w in re.split(separator, "rollout.group_size and model.lora_rank, v0.95") if w]
    assert words == ["rollout", "group", "size", "and", "model", "lora", "rank", "v0.95"]
