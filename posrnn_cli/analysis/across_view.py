"""The table across profiles (``posrnn scorecard --across``) laid out for the terminal's width:
one line a claim where it fits (within 120 columns for the committed profiles), else each claim's
id on a line of its own above its verdicts (within 80). Profile names break after each "_" so
the verdicts' columns stay narrow."""

from __future__ import annotations

#: the mark of a claim two profiles decide differently
DISAGREE = "≠"


def _head(profile: str) -> list[str]:
    return profile.replace("_", "_ ").split()


class AcrossView:
    """``profiles``' names and, per claim, (its id, each profile's short verdict in ``profiles``'
    order, whether two profiles disagree); a rich renderable that picks its layout when drawn."""

    def __init__(self, profiles: list[str], rows: list[tuple[str, list[str], bool]]):
        self.profiles, self.rows = profiles, rows

    def table(self):
        from rich import box
        from rich.table import Table
        from rich.text import Text

        # no padding: the box's separator is the one space between columns
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0))
        t.add_column("claim", no_wrap=True)
        for p in self.profiles:
            t.add_column("\n".join(_head(p)), no_wrap=True)
        t.add_column("", no_wrap=True)
        for claim, cells, disagree in self.rows:
            t.add_row(claim, *(Text(c, style="dim" if c == "—" else "") for c in cells),
                      Text(DISAGREE, style="bold red") if disagree else "")
        return t

    def stacked(self) -> list:
        """Each claim's id on its own line (folded when longer than the terminal), its verdicts
        indented below it under the profiles' names."""
        from rich.text import Text

        heads = [_head(p) for p in self.profiles]
        widths = [max(4, *map(len, h)) for h in heads]
        out = [Text("claim, then each profile's verdict below it", style="bold")]
        for k in range(max(map(len, heads))):
            out.append(Text("  " + " ".join(f"{(h[k] if k < len(h) else ''):<{w}}" for h, w in zip(heads, widths)),
                            style="bold"))
        for claim, cells, disagree in self.rows:
            line = " ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip()
            out += [Text(claim, overflow="fold"), Text(f"  {line}" + (f" {DISAGREE}" if disagree else ""))]
        return out

    def __rich_console__(self, console, options):
        from rich.measure import Measurement

        t = self.table()
        if Measurement.get(console, options.update_width(10_000), t).maximum <= options.max_width:
            yield t
        else:
            yield from self.stacked()
