"""Paragraphs → compact token arrays on disk, and the batches a language model trains on.

Layout written by ``encode`` (one folder per split, NumPy ``.npy`` files)::

    out_dir/meta.json           vocab size, special ids, max_tokens, per-split counts
    out_dir/spm.model           a copy of the tokenizer, so the folder is self-contained
    out_dir/{split}/ids.npy     uint16 (N_tokens,)       every paragraph's ids, concatenated
    out_dir/{split}/offsets.npy int64  (N_paragraphs+1,) paragraph p is ids[offsets[p]:offsets[p+1]]

**What one stored paragraph is.** ``[BOS] + pieces + [EOS]`` when that fits in
``max_tokens`` (1,024) ids; otherwise ``[BOS]`` followed by the paragraph's first
``max_tokens − 1`` pieces and *no* EOS — the paragraph did not end there, and an EOS would
teach the model a false ending. So the cap counts BOS and EOS: no stored paragraph is longer
than ``max_tokens``, position 0 is always BOS at the paragraph's start (001 §6.5: absolute PE
aligned with the paragraph), and a model trained on ``ids[:-1] → ids[1:]`` sees at most
``max_tokens − 1`` input steps. (The reference truncated the SentencePiece pieces to 1,025
and fed the first 1,024; the difference is one position in the rare >1,000-piece paragraph.)

For WikiText-103 (~540 MB, ~1.2 M paragraphs, ~130 M tokens) ``ids.npy`` is ~260 MB; it is
memory-mapped, never loaded, so DDP ranks and data-loader workers share the page cache.

Torch-free but for ``LMCorpus.collate``: ``posrnn lm encode`` and the checks of ``posrnn lm train``
and ``posrnn lm eval`` (the corpus and the run config it gives, ``lm_config``) refuse bad input
before torch loads.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from ..common.settings.config import RunConfig, resolve_config
from ..common.errors import PosrnnError
from ..common.files.io import temp_beside, undo_new_dirs
from ..common.results.provenance import file_sha256
from .data import SPLITS
from .tokenizer import MAX_VOCAB, MODEL_NAME, load_tokenizer

if TYPE_CHECKING:
    import torch

META_NAME = "meta.json"
FORMAT_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------
def cap_paragraph(pieces: Sequence[int], bos: int, eos: int, max_tokens: int) -> list[int]:
    """``[BOS] + pieces + [EOS]`` if it fits in ``max_tokens``, else ``[BOS] + pieces[:max_tokens-1]``."""
    if len(pieces) + 2 <= max_tokens:
        return [bos, *pieces, eos]
    return [bos, *pieces[: max_tokens - 1]]


def _read_batches(path: Path, n: int) -> Iterator[list[str]]:
    with open(path, encoding="utf-8", newline="\n") as f:
        lines = (line.rstrip("\n") for line in f)
        while batch := list(itertools.islice(lines, n)):
            yield batch


def _raw_to_npy(raw: Path, npy: Path, n: int, chunk: int = 1 << 25) -> None:
    """Copy ``n`` raw little-endian uint16 values from ``raw`` into a new ``.npy`` file."""
    out = np.lib.format.open_memmap(npy, mode="w+", dtype=np.uint16, shape=(n,))
    with open(raw, "rb") as f:
        for start in range(0, n, chunk):
            block = np.fromfile(f, dtype="<u2", count=min(chunk, n - start))
            out[start : start + len(block)] = block
    out.flush()
    del out




def _encode_split(sp, txt: Path, ids_npy: Path, offsets_npy: Path, max_tokens: int, batch_paragraphs: int,
                  num_threads: int) -> dict:
    """Tokenise one split into temporary ``ids_npy`` / ``offsets_npy`` files; return its stats."""
    bos, eos = sp.bos_id(), sp.eos_id()
    raw = temp_beside(ids_npy)
    offsets = [0]
    n_tokens = n_truncated = n_bytes = 0
    t_tok = 0.0
    t0 = time.perf_counter()
    try:
        with open(raw, "xb") as f:
            for batch in _read_batches(txt, batch_paragraphs):
                n_bytes += sum(len(s.encode("utf-8")) for s in batch) + len(batch)  # + the newlines
                t = time.perf_counter()
                pieces = sp.encode(batch, out_type=int, num_threads=num_threads)  # list of B lists
                t_tok += time.perf_counter() - t
                seqs = [cap_paragraph(p, bos, eos, max_tokens) for p in pieces]
                n_truncated += sum(len(p) + 2 > max_tokens for p in pieces)
                lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
                flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype="<u2", count=int(lens.sum()))
                f.write(flat.tobytes())
                offsets.extend((n_tokens + np.cumsum(lens)).tolist())
                n_tokens += int(lens.sum())
        if len(offsets) == 1:
            raise PosrnnError(f"{txt} holds no paragraph")
        _raw_to_npy(raw, ids_npy, n_tokens)
        with open(offsets_npy, "wb") as f:  # a file object: np.save adds no .npy to the temporary name
            np.save(f, np.asarray(offsets, dtype=np.int64))
    finally:
        raw.unlink(missing_ok=True)
    seconds = time.perf_counter() - t0
    return {"paragraphs": len(offsets) - 1, "tokens": n_tokens, "truncated": n_truncated, "input_bytes": n_bytes,
            "tokenize_seconds": t_tok, "seconds": seconds,
            "tokenize_mb_per_s": n_bytes / max(t_tok, 1e-9) / 1e6, "mb_per_s": n_bytes / max(seconds, 1e-9) / 1e6}


def encode(
    data_dir: str | os.PathLike,
    tokenizer: str | os.PathLike,
    out_dir: str | os.PathLike,
    max_tokens: int = 1024,
    batch_paragraphs: int = 8192,
    num_threads: int | None = None,
    splits: Sequence[str] = SPLITS,
) -> dict:
    """Encode ``data_dir/{split}.txt`` with the SentencePiece model ``tokenizer`` into ``out_dir``.

    ``tokenizer`` is a ``.model`` file or a folder holding ``spm.model``. Paragraphs are encoded
    ``batch_paragraphs`` at a time by SentencePiece's multithreaded batch encoder
    (``num_threads``, default every core). Every file is written under a temporary name and
    renamed into place only after all splits have been encoded, ``meta.json`` last.

    Returns the metadata written to ``meta.json``: vocabulary, special ids, ``max_tokens`` and
    per split ``paragraphs``, ``tokens``, ``truncated``, ``input_bytes`` and the throughput,
    ``tokenize_mb_per_s`` (SentencePiece alone) and ``mb_per_s`` (the whole split: reading,
    tokenising, capping, writing), in MB (10^6 bytes) of input text per second.
    """
    if max_tokens < 2:
        raise PosrnnError(f"--max-tokens must be at least 2 (BOS and one token), got {max_tokens}")
    unknown = [s for s in splits if s not in SPLITS]
    if unknown or not splits:
        raise PosrnnError(f"unknown split(s) {unknown or '[]'}; choose from {', '.join(SPLITS)}")
    data_dir, out = Path(data_dir), Path(out_dir)
    missing = [str(data_dir / f"{s}.txt") for s in splits if not (data_dir / f"{s}.txt").is_file()]
    if missing:
        raise PosrnnError(f"{', '.join(missing)} not found (run `posrnn lm prepare` first)")
    sp = load_tokenizer(tokenizer)
    model = Path(tokenizer) / MODEL_NAME if Path(tokenizer).is_dir() else Path(tokenizer)
    vocab_size = sp.get_piece_size()
    assert vocab_size <= MAX_VOCAB  # load_tokenizer refuses larger ones

    threads = num_threads or os.cpu_count() or 1
    finals: list[tuple[Path, Path]] = []  # (temporary, final) pairs, swapped in at the end
    stats: dict[str, dict] = {}
    with undo_new_dirs(out):
        return _encode_into(out, splits, sp, model, data_dir, max_tokens, batch_paragraphs, threads, finals, stats,
                            vocab_size)


def _encode_into(out, splits, sp, model, data_dir, max_tokens, batch_paragraphs, threads, finals, stats,
                 vocab_size) -> dict:
    try:
        for split in splits:
            (out / split).mkdir(parents=True, exist_ok=True)
            ids_npy, offsets_npy = out / split / "ids.npy", out / split / "offsets.npy"
            # .tmp names: remove_stale_temps clears them
            tmp_ids, tmp_off = temp_beside(ids_npy), temp_beside(offsets_npy)
            finals += [(tmp_ids, ids_npy), (tmp_off, offsets_npy)]
            stats[split] = _encode_split(sp, data_dir / f"{split}.txt", tmp_ids, tmp_off, max_tokens,
                                         batch_paragraphs, threads)
        tmp_model = temp_beside(out / MODEL_NAME)
        finals.append((tmp_model, out / MODEL_NAME))
        if model.resolve() != (out / MODEL_NAME).resolve():
            shutil.copyfile(model, tmp_model)
        else:
            finals.pop()
        total_bytes = sum(s["input_bytes"] for s in stats.values())
        meta = {
            "format": FORMAT_VERSION,
            "vocab_size": vocab_size,
            "unk_id": sp.unk_id(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(),
            "pad_id": sp.unk_id(),  # batches are padded with the unknown id; lengths mark the real tokens
            "wikitext_unk_id": sp.piece_to_id("\u2581<unk>") if sp.piece_to_id("\u2581<unk>") != sp.unk_id() else None,
            "max_tokens": max_tokens,
            "cap": "stored paragraph = [BOS] + pieces + [EOS] if it fits in max_tokens, "
                   "else [BOS] + first max_tokens-1 pieces (no EOS)",
            "tokenizer": MODEL_NAME,
            "tokenizer_sha256": file_sha256(model),
            "splits": stats,
            "tokenize_mb_per_s": total_bytes / max(sum(s["tokenize_seconds"] for s in stats.values()), 1e-9) / 1e6,
            "mb_per_s": total_bytes / max(sum(s["seconds"] for s in stats.values()), 1e-9) / 1e6,
            "num_threads": threads,
        }
        tmp_meta = temp_beside(out / META_NAME)
        tmp_meta.write_text(json.dumps(meta, indent=2) + "\n")
        finals.append((tmp_meta, out / META_NAME))
        # Swap in: drop the old meta first, so an interruption mid-swap leaves a folder that
        # LMCorpus refuses ("no meta.json") rather than one whose arrays disagree with it.
        (out / META_NAME).unlink(missing_ok=True)
        for tmp, final in finals:
            os.replace(tmp, final)
    finally:
        for tmp, _ in finals:
            tmp.unlink(missing_ok=True)
    return meta


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
class LMCorpus:
    """One encoded split, memory-mapped: ``corpus[i]`` is paragraph i's ids (uint16 array).
    (Under data parallelism every rank reads all of it and takes its slice of each global
    batch: ``tasks.lm.LMTask``.)"""

    def __init__(self, root: str | os.PathLike, split: str = "train"):
        self.root = Path(root)
        meta_path = self.root / META_NAME
        if not meta_path.is_file():
            raise PosrnnError(f"{meta_path} not found: {self.root} is not an encoded corpus (run `posrnn lm encode`)")
        try:
            self.meta = json.loads(meta_path.read_text())
            self.meta["splits"], self.meta["vocab_size"]
        except (ValueError, UnicodeDecodeError, KeyError, TypeError):
            raise PosrnnError(
                f"{meta_path} is not an encoded corpus's metadata (corrupt); re-run `posrnn lm encode`") from None
        if split not in self.meta["splits"]:
            raise PosrnnError(f"{self.root} has no {split} split (it has {', '.join(self.meta['splits'])})")
        self.split = split
        try:
            self.ids = np.load(self.root / split / "ids.npy", mmap_mode="r")  # (N_tokens,) uint16
            self.offsets = np.load(self.root / split / "offsets.npy")  # (N_paragraphs+1,) int64
        except (OSError, ValueError) as e:
            raise PosrnnError(f"cannot read {self.root / split}: {e} (re-run `posrnn lm encode`)") from e
        want = self.meta["splits"][split]
        if self.ids.ndim != 1 or self.offsets.ndim != 1 or not isinstance(want, dict):
            raise PosrnnError(f"{self.root / split} is not an encoded split (ids and offsets must be 1-D); "
                              f"re-run `posrnn lm encode`")
        if (self.ids.dtype != np.uint16 or self.offsets.dtype != np.int64 or len(self.ids) != want["tokens"]
                or len(self.offsets) != want["paragraphs"] + 1 or self.offsets[0] != 0
                or self.offsets[-1] != len(self.ids)):
            raise PosrnnError(f"{self.root / split} does not match {meta_path} (re-run `posrnn lm encode`)")
        if not np.all(np.diff(self.offsets) > 0):
            raise PosrnnError(f"{self.root / split / 'offsets.npy'} is corrupt (the paragraph offsets do not rise from "
                              f"0 to the token count, one paragraph at least one token); re-run `posrnn lm encode`")
        V = self.meta["vocab_size"]
        specials = [self.meta.get(k) for k in ("bos_id", "eos_id", "unk_id", "pad_id", "max_tokens")]
        if not isinstance(V, int) or isinstance(V, bool) or not 2 <= V <= 2**16 or not all(
                isinstance(x, int) and not isinstance(x, bool) and -1 <= x for x in specials):
            raise PosrnnError(f"{meta_path} is not an encoded corpus's metadata (vocab_size or special ids malformed); "
                              f"re-run `posrnn lm encode`")
        top = int(self.ids.max()) if len(self.ids) else -1
        if top >= V or any(x >= V for x in specials[:4]):
            raise PosrnnError(f"{meta_path} says vocab_size {V}, but {self.root / split} holds token id "
                              f"{max(top, *specials[:4])} (the metadata does not match the corpus); re-run `posrnn lm "
                              "encode`")
        self.vocab_size: int = self.meta["vocab_size"]
        self.bos_id: int = self.meta["bos_id"]
        self.eos_id: int = self.meta["eos_id"]
        self.unk_id: int = self.meta["unk_id"]
        self.pad_id: int = self.meta["pad_id"]
        self.max_tokens: int = self.meta["max_tokens"]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        """Stored length (BOS and EOS included) of every paragraph, (N,) int64."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    def collate(self, rows: Sequence[int], pad_id: int | None = None) -> tuple["torch.Tensor", "torch.Tensor"]:
        """Paragraphs ``rows`` → (ids (B, T_max) int64 padded, lengths (B,) int64)."""
        import torch  # here only: encoding and reading a corpus's metadata need no torch
        pad = self.pad_id if pad_id is None else pad_id
        paras = [self[int(r)] for r in rows]
        lengths = np.fromiter((len(p) for p in paras), dtype=np.int64, count=len(paras))  # (B,)
        out = np.full((len(paras), int(lengths.max(initial=0))), pad, dtype=np.int64)  # (B, T_max)
        for b, p in enumerate(paras):
            out[b, : len(p)] = p
        return torch.from_numpy(out), torch.from_numpy(lengths)


def lm_config(data: Path, options: dict, params: Path | None = None, sets: list[str] | None = None) -> RunConfig:
    """The config of a language-model run on the encoded corpus ``data``: the vocabulary and
    paragraph length come from the corpus (read once), the rest from params → options → sets."""
    corpus = LMCorpus(data, "train")
    fixed = {"task.name": "lm", "task.data": str(data), "task.vocab_size": corpus.vocab_size,
             "task.length": corpus.max_tokens}
    cfg = resolve_config(params, {**fixed, **options}, sets)
    flat = cfg.flat()
    changed = [k for k, v in fixed.items() if flat[k] != v]
    if changed:
        raise PosrnnError(f"{', '.join(changed)} come from the encoded corpus {data}; drop them from --set/--params")
    return cfg
