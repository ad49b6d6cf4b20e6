"""A SentencePiece unigram tokenizer for the language-model chain (001 §6.5).

The paper retokenises WikiText-103 into 32,768 SentencePiece pieces (the reference code
calls torchtext's ``generate_sp_model``: unigram, SentencePiece's defaults). We keep the
unigram model and its defaults where they matter for the vocabulary (``character_coverage``
0.9995, so very rare characters map to ``<unk>``, no byte fallback) and fix what the
reference left implicit:

* ids: SentencePiece's unknown piece = 0, ``<s>`` (BOS) = 1, ``</s>`` (EOS) = 2, no padding
  piece — a batch is padded with id 0 and its lengths say where each paragraph ends (the
  reference also pads with its unknown id and leaves it out of the loss);
* WikiText's own ``<unk>`` word (every word seen fewer than 3 times in Wikipedia) becomes one
  piece, ``▁<unk>`` = 3 (and a bare ``<unk>`` = 4 for one glued to a neighbour), a word the
  model predicts like any other. Left alone, SentencePiece's trainer skips the literal
  ``<unk>`` (its default name for the unknown piece) while the encoder still splits it into
  ``▁ < unk >`` — with ``<`` and ``>`` rare enough to be unknown characters. So the unknown
  *character* piece is renamed ``<unk_char>`` and the literal is declared a user symbol;
  decoding then gives the text back exactly.
* a vocabulary of at most 65,536 pieces, because ``encode`` stores ids as ``uint16``;
* a corpus of ~500 MB on a small machine: at most ``input_sentence_size`` paragraphs
  (2,000,000 — all of WikiText-103's ~1.2 M) are sampled, shuffled, with a seeded sampler;
  paragraphs up to 64 KiB are kept whole (``max_sentence_length``), and training uses every
  core. Lower ``input_sentence_size`` to cap memory (SentencePiece's unigram trainer needs
  roughly 20 bytes of RAM per character it trains on).

SentencePiece's own log goes to ``<prefix>.log`` beside the model instead of the terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Optional

from ..common.errors import PosrnnError
from ..common.files.io import temp_beside

MAX_VOCAB = 1 << 16  # ids are stored as uint16 on disk
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
UNK_PIECE = "<unk_char>"  # SentencePiece's unknown piece: characters outside the coverage
WIKITEXT_UNK = "<unk>"  # WikiText's rare-word token, kept as a piece of its own
MODEL_NAME = "spm.model"  # the file name the CLI uses inside a tokenizer folder


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Send file descriptor 2 (where SentencePiece's C++ code logs) to ``path``.

    Works on the descriptor, not on ``sys.stderr``, so it also holds when pytest or Typer's
    test runner has replaced ``sys.stderr`` with an object that has no file descriptor.
    """
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "w") as log:
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _explain(message: str) -> str:
    """SentencePiece's multi-part C++ error → one actionable line."""
    if m := re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message):
        return (f"vocabulary size {m[1]} is too large for this corpus (SentencePiece can build at most "
                f"{m[2]} pieces from it); lower --vocab-size")
    if m := re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", message):
        return (f"vocabulary size {m[1]} is smaller than the {m[2]} characters (and special pieces) the "
                f"corpus needs; raise --vocab-size")
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    return f"SentencePiece failed: {re.sub(r'^[A-Z_]+: src/[^]]*] ?', '', first)}"


def _check_inputs(train_txt: Path, vocab_size: int, input_sentence_size: int, seed: int) -> int:
    """Refuse settings SentencePiece or the uint16 storage cannot take, and a missing or empty
    input; returns the input's size in bytes."""
    if vocab_size > MAX_VOCAB:
        raise PosrnnError(f"--vocab-size {vocab_size} exceeds {MAX_VOCAB:,}: token ids are stored as uint16")
    if vocab_size < 4:
        raise PosrnnError(f"--vocab-size {vocab_size} is too small: <unk>, <s> and </s> alone take 3 ids")
    if input_sentence_size < 1:
        raise PosrnnError(f"--input-sentence-size must be positive, got {input_sentence_size}")
    if not train_txt.is_file():
        raise PosrnnError(f"{train_txt} not found (run `posrnn lm prepare` first)")
    n_bytes = train_txt.stat().st_size
    if n_bytes == 0:
        raise PosrnnError(f"{train_txt} is empty")
    if not 0 <= seed < 2**32:
        raise PosrnnError(f"--seed must lie in 0 … 2^32 − 1 (SentencePiece's seed), got {seed}")
    return n_bytes


def make_parents(path: Path) -> Optional[Path]:
    """Make ``path``'s missing parent folders; returns the topmost one it made (None: all existed),
    so that a failure can remove what it made."""
    made = next((p for p in [path.parent, *path.parent.parents] if p.exists()), None)
    new_top = None if path.parent.exists() else next(q for q in [path.parent, *path.parent.parents]
                                                       if q.parent == made)
    path.parent.mkdir(parents=True, exist_ok=True)
    return new_top


def train_tokenizer(
    train_txt: str | os.PathLike,
    model_prefix: str | os.PathLike,
    vocab_size: int = 32768,
    input_sentence_size: int = 2_000_000,
    seed: int = 0,
    num_threads: int | None = None,
    character_coverage: float = 0.9995,
    byte_fallback: bool = False,
    max_sentence_length: int = 1 << 16,
    wikitext_unk: bool = True,
) -> dict:
    """Train a unigram SentencePiece model on ``train_txt`` (one paragraph per line). Writes
    ``<model_prefix>.model``, ``.vocab`` and ``.log``, each only once training has succeeded
    (temporary names, then ``os.replace``). Returns ``{"model", "vocab_size", "unk_id", "bos_id",
    "eos_id", "wikitext_unk_id", "seconds", "input_bytes"}``. ``wikitext_unk`` (default) makes
    WikiText's literal ``<unk>`` one piece (module docstring). Refuses (``PosrnnError``) a
    vocabulary over 65,536 (uint16 storage), a missing or empty input, or a vocabulary the corpus
    cannot fill (the message says to lower ``--vocab-size``)."""
    train_txt = Path(train_txt)
    n_bytes = _check_inputs(train_txt, vocab_size, input_sentence_size, seed)
    options = {"vocab_size": vocab_size, "character_coverage": character_coverage, "byte_fallback": byte_fallback,
               "input_sentence_size": input_sentence_size, "max_sentence_length": max_sentence_length,
               "num_threads": num_threads or os.cpu_count() or 1, **_pieces(wikitext_unk)}
    model, seconds = _train_into(train_txt, Path(model_prefix), seed, options)
    return {"model": str(model), "vocab_size": vocab_size, "unk_id": UNK_ID, "bos_id": BOS_ID,
            "eos_id": EOS_ID, "wikitext_unk_id": 3 if wikitext_unk else None, "seconds": seconds,
            "input_bytes": n_bytes}


def _pieces(wikitext_unk: bool) -> dict:
    """The trainer's special pieces: the fixed ids, no padding piece, and (``wikitext_unk``)
    WikiText's ``<unk>`` as pieces of its own beside a renamed unknown-character piece."""
    return {"unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID, "pad_id": -1,
            **({"unk_piece": UNK_PIECE, "user_defined_symbols": ["\u2581" + WIKITEXT_UNK, WIKITEXT_UNK]}
               if wikitext_unk else {})}


def _train_into(train_txt: Path, prefix: Path, seed: int, options: dict) -> tuple[Path, float]:
    """Run SentencePiece's unigram trainer (``options``) on ``train_txt`` under temporary names, then
    move ``.model``, ``.vocab`` and ``.log`` to ``prefix``; on a failure remove the temporary files
    and the folders it made → (the model's path, seconds spent training)."""
    import sentencepiece as spm

    new_top = make_parents(prefix)
    tmp = temp_beside(prefix)  # SentencePiece appends .model / .vocab to it
    finals = {ext: prefix.with_name(prefix.name + ext) for ext in (".model", ".vocab", ".log")}
    temps = {ext: tmp.with_name(tmp.name + ext) for ext in finals}

    spm.set_random_generator_seed(seed)  # the sentence sampler (shuffle_input_sentence)
    t0 = time.perf_counter()
    try:
        with _stderr_to(temps[".log"]):
            spm.SentencePieceTrainer.train(input=str(train_txt), model_prefix=str(tmp), model_type="unigram",
                                           shuffle_input_sentence=True, **options)
        seconds = time.perf_counter() - t0
        for ext in (".model", ".vocab", ".log"):
            os.replace(temps[ext], finals[ext])
    except RuntimeError as e:
        raise PosrnnError(_explain(str(e))) from e
    finally:
        for path in temps.values():
            path.unlink(missing_ok=True)
        if new_top is not None and not finals[".model"].exists():  # failed: remove the folders it made
            import shutil

            shutil.rmtree(new_top, ignore_errors=True)
    return finals[".model"], seconds


def load_tokenizer(path: str | os.PathLike):
    """Load a SentencePiece model from a ``.model`` file or a folder holding ``spm.model``.

    Checks what ``encode`` relies on: the file exists and parses, the vocabulary fits in
    uint16, and BOS / EOS are defined.
    """
    import sentencepiece as spm

    path = Path(path)
    model = path / MODEL_NAME if path.is_dir() else path
    if not model.is_file():
        raise PosrnnError(f"no tokenizer at {model} (run `posrnn lm tokenizer` first)")
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(str(model))
    except (RuntimeError, OSError) as e:
        raise PosrnnError(f"{model} is not a SentencePiece model") from e
    if sp.get_piece_size() > MAX_VOCAB:
        raise PosrnnError(f"{model} has {sp.get_piece_size():,} pieces; at most {MAX_VOCAB:,} fit in uint16")
    if sp.bos_id() < 0 or sp.eos_id() < 0:
        raise PosrnnError(f"{model} defines no BOS/EOS piece; train it with `posrnn lm tokenizer`")
    return sp
