"""Generated blocks inside a hand-written page (README.md, docs/results.md): each between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``, each marker a line of its own and
outside every code fence (a marker quoted in prose or shown in a fenced example never delimits
one). A page whose markers nest, do not pair up or repeat a block is refused in one line naming
the line, and nothing is written; otherwise every block is replaced in one atomic write of the
page, never through a link, and a page that is not a regular file is never opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping, Optional

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import atomic_write_text, read_bounded

_MARK = re.compile(r"^<!-- (/?)results:(\S+) -->[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _fence_closes(line: str, fence: str) -> bool:
    s = line.strip()
    return len(s) >= len(fence) and set(s) == {fence[0]} and len(line) - len(line.lstrip(" ")) <= 3


def blocks_at(text: str, page: object = "the page") -> dict[str, tuple[int, int]]:
    """Each block's name → (its opening line, its closing line), 0-based; refused in one line when
    markers nest, do not pair up or a name repeats."""
    lines, fence, opened, found = text.split("\n"), None, None, {}
    fix = "fix the markers by hand (each block: one opening line, one closing line), then re-run"
    for i, line in enumerate(lines):
        if fence is not None:
            fence = None if _fence_closes(line, fence) else fence
            continue
        f = _FENCE.match(line)
        if f:
            fence = f.group(1)
            continue
        m = _MARK.match(line)
        if not m:
            continue
        closing, name = m.group(1) == "/", m.group(2)
        if not closing and opened is not None:
            raise PosrnnError(f"{page} line {i + 1} opens {name} inside {opened[0]} (opened at line {opened[1] + 1}): "
                              f"blocks do not nest; {fix}")
        if closing and (opened is None or opened[0] != name):
            raise PosrnnError(f"{page} line {i + 1} closes {name}, which is not open there (unbalanced markers); {fix}")
        if not closing and name in found:
            raise PosrnnError(f"{page} line {i + 1} opens {name} a second time (first at line {found[name][0] + 1}); "
                              f"{fix}")
        if closing:
            found[name], opened = (opened[1], i), None
        else:
            opened = (name, i)
    if opened is not None:
        raise PosrnnError(f"{page} line {opened[1] + 1} opens {opened[0]}, which is never closed; {fix}")
    return found


def block_in(text: str, name: str) -> Optional[str]:
    """The block ``name`` as the page holds it (its markers included), or None."""
    at = blocks_at(text).get(name)
    return None if at is None else "\n".join(text.split("\n")[at[0]:at[1] + 1])


def read_page(page: Path) -> str:
    """The page's text: a regular file (a link, FIFO or device is refused before it is opened)."""
    page = Path(page)
    if page.is_symlink():
        raise PosrnnError(f"--page {page} is a symbolic link (to {os.readlink(page)}); posrnn does not write through "
                          f"links: pass the page itself")
    if page.exists() and not page.is_file():
        raise PosrnnError(f"--page {page} is not a regular file (a directory, FIFO or device); it is never opened: "
                          "pass the page to update (docs/results.md)")
    try:
        return read_bounded(page, "page").decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PosrnnError(f"cannot read {page} ({type(e).__name__}); pass the page to update") from None


def rewrite_blocks(page: Path, offered: Mapping[str, str], missing: str) -> list[str]:
    """Replace each block of ``offered`` the page holds, in one write; the names that changed.
    A page holding none of them is refused with ``missing``; a refused page is left as it was."""
    text = read_page(page)
    at = blocks_at(text, page)
    names = [k for k in offered if k in at]
    if not names:
        raise PosrnnError(missing)
    lines = text.split("\n")
    changed = []
    for k in sorted(names, key=lambda k: at[k][0], reverse=True):
        a, b = at[k]
        new = offered[k].split("\n")
        if lines[a:b + 1] != new:
            lines[a:b + 1] = new
            changed.append(k)
    if changed:
        atomic_write_text(Path(page), "\n".join(lines))
    return [k for k in offered if k in changed]
