"""WikiText-103 (raw) → one paragraph per line (001 §6.5, the first step of the LM chain).

WikiText's raw files hold one line per paragraph, `` = Title = `` / `` = = Section = = ``
heading lines and blank lines between blocks. The paper (and the reference
``preprocess_wikitext.py``) keeps every line that is neither empty nor a heading; each kept
line is one paragraph and, later, one training sample whose absolute positions start at its
first token.

``prepare`` reads the corpus from one of three places:

* the HuggingFace hub (``datasets.load_dataset("Salesforce/wikitext", "wikitext-103-raw-v1")``,
  or whatever is in the local ``datasets`` cache) when no ``data_dir`` is given;
* ``data_dir`` holding the hub's parquet shards (``[config/]{train,validation,test}-*.parquet``
  with a ``text`` column), as ``huggingface-cli download`` or a copy of the repository leaves
  them;
* ``data_dir`` holding the classic ``wiki.{train,valid,test}.raw`` text files (from the
  original zip, or ``data/wikitext-mini`` shipped with this repository).

It writes ``out_dir/{train,valid,test}.txt`` — one paragraph per line, without WikiText's
leading space and trailing `` \\n`` — and returns per-split counts. The three files are first
written beside their targets under temporary names and only then renamed over them, so a
failure (a missing split, a full disk, Ctrl-C) leaves no half file and never replaces a good
one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Iterator

from ..common.errors import PosrnnError
from ..common.files.io import temp_beside, undo_new_dirs

SPLITS = ("train", "valid", "test")
# Our split name → the names other layouts use for it.
HUB_SPLIT = {"train": "train", "valid": "validation", "test": "test"}
RAW_FILE = {"train": "wiki.train.raw", "valid": "wiki.valid.raw", "test": "wiki.test.raw"}

DEFAULT_DATASET = "Salesforce/wikitext"
DEFAULT_CONFIG = "wikitext-103-raw-v1"


# ---------------------------------------------------------------------------------------------
# Filtering
# ---------------------------------------------------------------------------------------------
def is_heading(line: str) -> bool:
    """WikiText headings start with `` =`` (`` = Title = ``, `` = = Section = = `` ...)."""
    return line.startswith(" =")


def paragraphs(lines: Iterable[str], counts: dict | None = None) -> Iterator[str]:
    """Yield the paragraphs among raw WikiText lines, stripped of surrounding whitespace.

    Empty / whitespace-only lines and heading lines are dropped (their numbers are added to
    ``counts["empty"]`` and ``counts["headings"]`` when a dict is given). A stray carriage
    return inside a paragraph becomes a space, so that every paragraph stays on one line.
    """
    counts = counts if counts is not None else {}
    for key in ("lines", "empty", "headings", "paragraphs"):
        counts.setdefault(key, 0)
    for line in lines:
        counts["lines"] += 1
        if not line.strip():
            counts["empty"] += 1
        elif is_heading(line):
            counts["headings"] += 1
        else:
            counts["paragraphs"] += 1
            text = line.strip()
            yield text.replace("\r", " ") if "\r" in text else text


# ---------------------------------------------------------------------------------------------
# Sources: each maps a split name to an iterator over raw lines.
# ---------------------------------------------------------------------------------------------
def _raw_lines(path: Path) -> Iterator[str]:
    # newline="\n": split on \n only, exactly like the hub's loader and SentencePiece do.
    with open(path, encoding="utf-8", newline="\n") as f:
        yield from f


def _parquet_lines(paths: list[Path]) -> Iterator[str]:
    import pyarrow.parquet as pq

    for path in paths:
        pf = pq.ParquetFile(path)
        if "text" not in pf.schema_arrow.names:
            raise PosrnnError(f"{path} has no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
        for batch in pf.iter_batches(columns=["text"], batch_size=65536):
            yield from (t or "" for t in batch.column(0).to_pylist())


def _arrow_errors() -> tuple[type[BaseException], ...]:
    try:
        import pyarrow

        return (pyarrow.ArrowException,)
    except ImportError:  # pragma: no cover - pyarrow comes with datasets
        return ()


def _find_local(data_dir: Path, config: str) -> tuple[str, Path, dict[str, list[Path]]]:
    """Locate the corpus files under ``data_dir``.

    Looks in ``data_dir`` itself, then ``data_dir/<config>`` (the hub's layout) and
    ``data_dir/<config without -v1>`` (the old zip's ``wikitext-103-raw/``), and finally in
    the other immediate sub-folders if exactly one of them holds WikiText files. Returns
    (kind, folder, {split: [files]}); kind is ``"parquet"`` or ``"raw"``. Splits may be
    missing from the returned dict — the caller names them.
    """
    if not data_dir.is_dir():
        raise PosrnnError(f"--data-dir {data_dir} is not a directory")

    def scan(folder: Path):
        shards = {s: sorted(folder.glob(f"{HUB_SPLIT[s]}-*.parquet")) for s in SPLITS}
        if any(shards.values()):
            return "parquet", folder, {s: v for s, v in shards.items() if v}
        raws = {s: [folder / RAW_FILE[s]] for s in SPLITS if (folder / RAW_FILE[s]).is_file()}
        return ("raw", folder, raws) if raws else None

    preferred = [data_dir, data_dir / config, data_dir / config.removesuffix("-v1")]
    for folder in preferred:
        if folder.is_dir() and (found := scan(folder)):
            return found
    others = [f for p in sorted(data_dir.iterdir()) if p.is_dir() and p not in preferred and (f := scan(p))]
    if len(others) == 1:
        return others[0]
    if others:
        names = ", ".join(f[1].name for f in others)
        raise PosrnnError(f"{data_dir} holds several WikiText folders ({names}); pass one of them as --data-dir "
                          f"or name it with --config")
    raise PosrnnError(
        f"no WikiText files in {data_dir}: expected wiki.{{train,valid,test}}.raw or "
        f"{{train,validation,test}}-*.parquet (optionally under {config}/)"
    )


def _local_sources(data_dir: Path, config: str) -> tuple[str, dict[str, Iterator[str]]]:
    kind, folder, files = _find_local(data_dir, config)
    missing = [s for s in SPLITS if s not in files]
    if missing:
        names = [RAW_FILE[s] if kind == "raw" else f"{HUB_SPLIT[s]}-*.parquet" for s in missing]
        raise PosrnnError(f"{folder} lacks the {', '.join(missing)} split ({', '.join(names)} not found)")
    if kind == "raw":
        return f"{folder} (raw)", {s: _raw_lines(files[s][0]) for s in SPLITS}
    return f"{folder} (parquet)", {s: _parquet_lines(files[s]) for s in SPLITS}


def _hub_sources(dataset: str, config: str) -> tuple[str, dict[str, Iterator[str]]]:
    """Load through ``datasets`` (network or local cache); any failure → a one-line error."""
    try:
        import datasets  # imports huggingface_hub, which configures its logger
    except ImportError as e:
        raise PosrnnError("loading from the hub needs the `datasets` package; or pass --data-dir DIR") from e
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # offline, the hub client logs every retry; we report once
    try:
        ds = datasets.load_dataset(dataset, config)
    except Exception as e:  # offline, unknown name, broken cache: all the same to the user
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise PosrnnError(
            f"cannot load {dataset}/{config} from the HuggingFace hub or cache ({reason}); "
            f"download it elsewhere and pass --data-dir DIR (wiki.*.raw or *.parquet files)"
        ) from e
    finally:
        hub_log.setLevel(level)
    missing = [HUB_SPLIT[s] for s in SPLITS if HUB_SPLIT[s] not in ds]
    if missing:
        raise PosrnnError(f"{dataset}/{config} has no {', '.join(missing)} split (it has {', '.join(ds)})")

    def lines(split: str) -> Iterator[str]:
        part = ds[HUB_SPLIT[split]]
        if "text" not in part.column_names:
            raise PosrnnError(f"{dataset}/{config} has no 'text' column")
        for batch in part.iter(batch_size=65536):
            yield from (t or "" for t in batch["text"])

    return f"{dataset}/{config} (hub)", {s: lines(s) for s in SPLITS}


# ---------------------------------------------------------------------------------------------
# The step
# ---------------------------------------------------------------------------------------------
def prepare(
    out_dir: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    dataset: str = DEFAULT_DATASET,
    config: str = DEFAULT_CONFIG,
) -> dict:
    """Filter WikiText into ``out_dir/{train,valid,test}.txt``, one paragraph per line.

    Returns ``{"source": str, "splits": {split: {"lines", "empty", "headings", "paragraphs",
    "bytes"}}}`` where ``bytes`` is the size of the written file. Raises ``PosrnnError`` for
    an unreachable hub, a folder without WikiText files, a missing split or an empty one.
    """
    out = Path(out_dir)
    if data_dir is not None:
        source, sources = _local_sources(Path(data_dir), config)
    else:
        source, sources = _hub_sources(dataset, config)
    with undo_new_dirs(out):
        out.mkdir(parents=True, exist_ok=True)
        return _write_splits(out, source, sources)


def _write_splits(out: Path, source: str, sources: dict) -> dict:
    stats: dict[str, dict] = {}
    tmps: dict[str, Path] = {}
    try:
        for split in SPLITS:
            tmps[split] = temp_beside(out / f"{split}.txt")
            counts: dict = {}
            with open(tmps[split], "x", encoding="utf-8", newline="\n") as f:
                try:
                    for para in paragraphs(sources[split], counts):
                        f.write(para)
                        f.write("\n")
                except UnicodeDecodeError as e:
                    raise PosrnnError(
                        f"the {split} split of {source} is not UTF-8 text ({e.reason} at byte {e.start})") from e
                except _arrow_errors() as e:
                    raise PosrnnError(f"the {split} split of {source} is not a readable parquet file ({e})") from e
            if counts["paragraphs"] == 0:
                raise PosrnnError(f"the {split} split of {source} holds no paragraph")
            counts["bytes"] = tmps[split].stat().st_size
            stats[split] = counts
        for split in SPLITS:  # every split is complete: now swap them in
            os.replace(tmps[split], out / f"{split}.txt")
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)
    return {"source": source, "splits": stats}
