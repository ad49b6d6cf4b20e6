"""The reproduction scorecard: every claim of the papers (docs/papers.md lists the versions
000–004) against what one profile of the pipeline measured, with a verdict from a test declared
in advance as data.

``claims.yaml`` (beside this module) lists the claims: an id, the claim, the paper's words and
section, the aggregated tables it reads, the *regime* the paper states it at, the models it
names, a test kind with its parameters, and the test in plain words. The test kinds are the
functions registered in ``claims.KINDS``; the YAML only names them. A claim that no profile can measure yet
says why in ``unscored`` instead of a test.

How a claim is scored:

- **Seeds are the unit of replication.** Every table row lists its seeds and each seed's value.
  Two arms are compared only on identical seed sets and training budgets (iterations, batch
  size, warm-up); otherwise the claim is not measured, with the reason. A difference is read per
  seed (paired), and its 95% interval is Student's t over the seeds
  (``common.results.stats.t_interval``). With fewer than ``MIN_SEEDS`` seeds per arm the verdict is
  ``too few seeds``, never ``reproduced``.
- **Regime.** ``regime`` is a filter on the table rows (e.g. L = 64, H = 512, V in the paper's
  range). The *verdict* is read on the cells inside it; cells outside it give an *indication*,
  shown beside the verdict and counted apart, never as reproduced or refuted.
- **Models.** A claim that names several models is scored on each; a model with no cell makes
  the claim *partial*, counted apart.
- **Fair tests.** "Reproduced" and "not reproduced" need the interval of the difference to lie
  on one side of the claim's bound; an interval across it is ``inconclusive``. "Direction only"
  means the difference is shown (its interval excludes 0) but the size the paper states is not.
  A contrast claim is scored only where its baseline effect is shown; a null claim needs an
  equivalence margin and a power guard (the reference learned something, and the interval is
  narrower than the margin); a decay speed needs at least 5 checkpoints, the first at step 0.
- **Floors and ceiling.** A token-accuracy comparison with any compared arm not shown above its
  floor (``tasks.floors``: chance and the baselines a reader would name) reads ``not testable``,
  naming the line; so does one whose every arm's mean is at or above ``score.CEILING`` (0.98),
  counted apart as a ceiling read.

Everything here reads CSV files only: no torch, no training code, so the pipeline stage that
writes the scorecard depends on the result tables alone.

Filters: a filter maps a column to a value, a list of values (any of them) or ``{min, max}``
(an inclusive numeric range); ``null`` matches an empty cell. Rows of two *arms* (e.g.
``pe: sinusoidal`` vs ``pe: none``) are paired on the ``match`` columns; by default all the cell
columns the rows share, less those the arms set.

Modules: ``core`` (verdicts, per-seed values, cells), ``result_tables`` (reading the result tables),
``kinds``, ``contrasts`` and ``exact`` (the test kinds), ``claims`` (the registry of kinds and
claims.yaml), ``score`` (scoring, Holm's step, seeds needed, counts) and ``render`` (markdown,
JSON, rich).
"""

from .claims import (AUTHORS, GROUPS, KINDS, PAPER_NUMBER, REGIME_WORDS, claim_group, SCHEMAS, SECTIONS, TESTS,
                     load_claims, validate_claim, validate_power)
from .core import CLAIMS_PATH
from .contrasts import MIN_CHECKPOINTS, check_gap_contrast, check_robust, check_stability_decay
from .core import (DIRECTION_ONLY, EVAL_TABLES, INCONCLUSIVE, MIN_SEEDS, NOT_MEASURED, NOT_REPRODUCED, NOT_TESTABLE,
                   OPEN, REPRODUCED, REQUIRED_COLUMNS, SCOPE_NAMES, SCOPES, TABLES, TOO_FEW_SEEDS, UNDERPOWERED,
                   VERDICTS, NotMeasured, Outcome, Reading, Seeded, sort_key)
from .exact import check_permutation_invariant, check_permutation_sensitive
from .kinds import check_ahead, check_decline, check_lm_no_gain, check_no_gain, check_threshold, check_trend
from .render import count_lines, count_text, scorecard_markdown, scorecard_rich_table, seeds_text, write_scorecard
from .score import at_ceiling, evaluate_claim, holm_rejected, scorecard, summarize
from .result_tables import Table, TableSet, load_table

__all__ = [
    "AUTHORS", "CLAIMS_PATH", "GROUPS", "KINDS", "PAPER_NUMBER", "REGIME_WORDS", "claim_group", "SCHEMAS", "SECTIONS",
    "TESTS", "load_claims", "validate_claim", "validate_power",
    "MIN_CHECKPOINTS", "check_gap_contrast", "check_robust", "check_stability_decay", "DIRECTION_ONLY", "EVAL_TABLES",
    "INCONCLUSIVE", "MIN_SEEDS", "NOT_MEASURED", "NOT_REPRODUCED", "NOT_TESTABLE", "OPEN", "REPRODUCED",
    "REQUIRED_COLUMNS", "SCOPE_NAMES", "SCOPES", "TABLES", "TOO_FEW_SEEDS", "UNDERPOWERED", "VERDICTS", "Outcome",
    "NotMeasured", "Reading", "Seeded", "sort_key",
    "check_permutation_invariant", "check_permutation_sensitive", "check_ahead", "check_decline",
    "check_lm_no_gain", "check_no_gain", "check_threshold", "check_trend", "scorecard_markdown",
    "scorecard_rich_table", "seeds_text", "count_lines", "count_text", "write_scorecard", "evaluate_claim",
    "holm_rejected", "scorecard", "summarize", "at_ceiling", "Table",
    "TableSet", "load_table",
]
