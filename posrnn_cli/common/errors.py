"""The one exception type the CLI turns into a one-line error (no traceback)."""


class PosrnnError(Exception):
    """A user-facing problem: bad input, impossible config, missing or corrupt file.

    The message is one sentence naming the problem and the fix."""


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'lite'?)`` when one of ``choices`` is a near miss of ``word`` (a typo,
    another case), else ``""``: the hint an unknown-name error appends."""
    from rapidfuzz import fuzz, process

    choices = [str(c) for c in choices]
    folded = [c for c in choices if c.casefold() == str(word).casefold()]
    if folded:
        return f" (did you mean {folded[0]!r}?)"
    best = process.extractOne(str(word), choices, scorer=fuzz.ratio, score_cutoff=70)
    return f" (did you mean {best[0]!r}?)" if best else ""
