"""The table across profiles (``posrnn scorecard --across``) laid out for the terminal's width:
one line a claim where every claim fits; else one line a claim whose id fits beside the verdicts,
a longer id on a line of its own above them (within 120 columns for the committed profiles);
else each claim's id on a line of its own above its verdicts; and where even those columns do
not fit (80 columns, a dozen profiles), each claim's id above the profiles that measured it, by
name, with their verdicts. Profile names break after each "_" so the verdicts' columns stay
narrow."""

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

    def _widths(self, least: int = 0) -> list[int]:
        """Each profile's column: its name's longest part, its longest verdict, at least ``least``."""
        return [max(least, *map(len, _head(p)), *(len(cells[k]) for _, cells, _ in self.rows))
                for k, p in enumerate(self.profiles)]

    def _header(self, widths: list[int], first: str, rest: str) -> list:
        """The profiles' names broken after each "_", a part a line over its column, each line led
        by ``first`` (the first) or ``rest``."""
        from rich.text import Text

        heads = [_head(p) for p in self.profiles]
        return [Text(((first if k == 0 else rest) + " ".join(f"{(h[k] if k < len(h) else ''):<{w}}"
                                                             for h, w in zip(heads, widths))).rstrip(), style="bold")
                for k in range(max(map(len, heads)))]

    @staticmethod
    def _verdicts(cells: list[str], widths: list[int], disagree: bool):
        """The verdicts under their columns ("—" dimmed), then the mark of a disagreement."""
        from rich.text import Text

        line = Text()
        for c, w in zip(cells, widths):
            line.append(" " + c.ljust(w), style="dim" if c == "—" else "")
        line.rstrip()
        if disagree:
            line.append(" " + DISAGREE, style="bold red")
        return line

    def mixed(self, width: int) -> list | None:
        """One line a claim whose id fits beside the verdicts within ``width``, a longer id on a line
        of its own above them; ``None`` when no id would fit beside them."""
        from rich.text import Text

        widths = self._widths()
        room = width - sum(widths) - len(widths) - 1 - len(DISAGREE)
        fits = [len(claim) for claim, _, _ in self.rows if len(claim) <= room]
        if room < len("claim") or not fits:
            return None
        idw = max(*fits, len("claim"))
        out = self._header(widths, f"{'claim':<{idw}} ", " " * (idw + 1))
        for claim, cells, disagree in self.rows:
            if len(claim) > idw:
                out.append(Text(claim))
            out.append(Text(f"{claim if len(claim) <= idw else '':<{idw}}") + self._verdicts(cells, widths, disagree))
        return out

    def stacked(self) -> list:
        """Each claim's id on its own line (folded when longer than the terminal), its verdicts
        indented below it under the profiles' names."""
        from rich.text import Text

        widths = self._widths(4)
        out = [Text("claim, then each profile's verdict below it", style="bold"), *self._header(widths, "  ", "  ")]
        for claim, cells, disagree in self.rows:
            out += [Text(claim, overflow="fold"), Text(" ") + self._verdicts(cells, widths, disagree)]
        return out

    def listed(self, width: int) -> list:
        """Each claim's id on its own line, below it each profile that measured it, by name, with its
        verdict ("—" elsewhere is left out), wrapped at ``width``."""
        from rich.text import Text

        def wrapped(words: list[str], indent: str) -> list[str]:
            lines = [indent]
            for w in words:
                if len(lines[-1]) > len(indent) and len(lines[-1]) + 2 + len(w) > width:
                    lines.append(indent)
                lines[-1] += ("  " if len(lines[-1]) > len(indent) else "") + w
            return lines

        out = [Text("claim, then each profile that measured it, with its verdict; the profiles:", style="bold")]
        out += [Text(line, style="bold") for line in wrapped(self.profiles, "  ")]
        for claim, cells, disagree in self.rows:
            pairs = [f"{p} {c}" for p, c in zip(self.profiles, cells) if c != "—"] or ["measured nowhere"]
            out.append(Text(claim, overflow="fold"))
            out += [Text(line) for line in wrapped(pairs + ([DISAGREE] if disagree else []), "  ")]
        return out

    def __rich_console__(self, console, options):
        from rich.measure import Measurement

        t = self.table()
        if Measurement.get(console, options.update_width(10_000), t).maximum <= options.max_width:
            yield t
        else:
            yield from self.mixed(options.max_width) or self._narrow(options.max_width)

    def _narrow(self, width: int) -> list:
        """The stacked layout where its columns fit ``width``, else the listed one."""
        stacked = self.stacked()
        return stacked if max(map(len, stacked)) <= width else self.listed(width)
