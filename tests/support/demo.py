"""The demo base's searches (`./dev setup` seeds it): query -> the document a person would expect first.

Shared by the live demo test (real Open WebUI) and the fake embedding server's unit tests (the same table, offline).
`README_SEARCHES` is the README's list of examples; both test modules hold the README to it.
"""

from __future__ import annotations

# Every search of the demo base that README.md shows (and `./dev inspect`'s default): query -> expected first document.
README_SEARCHES = {
    "yellow bananas": "fruit.md",  # `./dev inspect` (its default query in `dev`)
    "Москва столица": "moscow.md",  # `./dev inspect "Москва столица"`
    "bananas": "fruit.md",  # the MCP Inspector by hand: `--tool-arg query=bananas`
}

# More searches of the demo base, in each of its scripts; not in the README, held to the same rule.
OTHER_SEARCHES = {
    "longest river in Europe": "rivers.md",
    "столица России": "moscow.md",
    "北京的历史": "beijing.md",
    "中国的首都": "beijing.md",
}


def shown_in_readme(query: str, readme: str) -> bool:
    """Whether ``readme`` shows ``query`` as a search: quoted, or as an Inspector ``query=`` argument."""
    return any(form in readme for form in (f'"{query}"', f"'{query}'", f"«{query}»", f"query={query}"))
