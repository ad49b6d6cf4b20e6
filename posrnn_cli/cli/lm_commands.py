"""``posrnn lm …``: the language-model chain (001 §6.5), as thin Typer commands.

    posrnn lm prepare   --out data/wikitext103                 (or --data-dir for local files)
    posrnn lm tokenizer --data data/wikitext103 --out data/wikitext103/tokenizer
    posrnn lm encode    --data data/wikitext103 --tokenizer data/wikitext103/tokenizer --out data/wikitext103/encoded
    posrnn lm train     --data data/wikitext103/encoded --pe sinusoidal --out runs/lm/pe
    posrnn lm eval      runs/lm/pe

Each command parses its options, calls one library function and prints a table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..common import catalog
from ..common.errors import PosrnnError
from .common import (DeviceOpt, JsonOpt, ParamsOpt, SetOpt, ThreadsOpt, advise_on_interrupt, cli_errors, console,
                     given_keys, note, threads_for_run)
from .options import config_options, run_options

from ..lm.data import DEFAULT_CONFIG, DEFAULT_DATASET  # these two modules import nothing heavy
from ..lm.tokenizer import MAX_VOCAB, MODEL_NAME

lm_app = typer.Typer(
    help="Language modelling on WikiText-103 (001 §6.5): prepare paragraphs, train a SentencePiece "
    "tokenizer, encode the splits, train the LSTM ± PE, evaluate perplexity.",
    no_args_is_help=True,
)


@lm_app.command(short_help="WikiText → one paragraph per line, per split.")
@cli_errors
def prepare(
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR",
        help="Folder for train.txt, valid.txt, test.txt (one paragraph per line).")] = Path("data/wikitext103"),
    data_dir: Annotated[Optional[Path], typer.Option(
        "--data-dir", metavar="DIR", help="Local WikiText: wiki.{train,valid,test}.raw or the hub's "
                                          "{train,validation,test}-*.parquet (optionally under CONFIG/). Without it, "
                                          "load from the HuggingFace hub or its cache.")] = None,
    dataset: Annotated[str, typer.Option(
        "--dataset", metavar="NAME", help="HuggingFace dataset id (used without --data-dir).")] = DEFAULT_DATASET,
    config: Annotated[str, typer.Option(
        "--config", metavar="NAME",
        help="Dataset configuration (the sub-folder name in a parquet download).")] = DEFAULT_CONFIG,
):
    """Drop empty and heading lines from WikiText; write one paragraph per line per split."""
    from rich.table import Table

    from ..lm import data as lm_data

    res = lm_data.prepare(out, data_dir=data_dir, dataset=dataset, config=config)
    table = Table(title=f"paragraphs from {res['source']} → {out}")
    for col in ("split", "lines", "headings", "empty", "paragraphs", "MB"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for split, s in res["splits"].items():
        table.add_row(split, f"{s['lines']:,}", f"{s['headings']:,}", f"{s['empty']:,}", f"{s['paragraphs']:,}",
                      f"{s['bytes'] / 1e6:.2f}")
    console().print(table)


@lm_app.command(short_help="Train a SentencePiece unigram tokenizer.")
@cli_errors
def tokenizer(
    data: Annotated[Path, typer.Option(
        "--data", metavar="DIR", help="Folder with train.txt (from `posrnn lm prepare`).")] = Path("data/wikitext103"),
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR",
        help=f"Folder for {MODEL_NAME}, spm.vocab and spm.log.")] = Path("data/wikitext103/tokenizer"),
    vocab_size: Annotated[int, typer.Option(
        "--vocab-size", metavar="N", help="Number of SentencePiece pieces (the paper: 32,768; at most "
                                          f"{MAX_VOCAB:,}).")] = 32768,
    input_sentence_size: Annotated[int, typer.Option(
        "--input-sentence-size", metavar="N",
        help="Paragraphs sampled for training; lower it to cap memory.")] = 2_000_000,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of SentencePiece's paragraph sampler.")] = 0,
    threads: Annotated[int, typer.Option(
        "--threads", metavar="N", min=1, help="SentencePiece's training threads; its pieces depend on this count, so "
                                              "it is fixed, not the machine's cores.")] = 8,
):
    """Train a SentencePiece unigram tokenizer on the training paragraphs."""
    from ..lm.tokenizer import train_tokenizer

    info = train_tokenizer(data / "train.txt", out / Path(MODEL_NAME).stem, vocab_size=vocab_size,
                           input_sentence_size=input_sentence_size, seed=seed, num_threads=threads)
    console().print(f"[green]tokenizer[/green] {info['model']}: {info['vocab_size']:,} pieces "
                  f"(unknown character {info['unk_id']}, <s> {info['bos_id']}, </s> {info['eos_id']}, WikiText <unk> "
                  f"{info['wikitext_unk_id']}), trained on "
                  f"{info['input_bytes'] / 1e6:.1f} MB in {info['seconds']:.1f} s")


@lm_app.command(short_help="Tokenise every split into uint16 id arrays.")
@cli_errors
def encode(
    data: Annotated[Path, typer.Option(
        "--data", metavar="DIR", help="Folder with train.txt, valid.txt, test.txt.")] = Path("data/wikitext103"),
    tokenizer: Annotated[Path, typer.Option(
        "--tokenizer", metavar="PATH",
        help=f"A SentencePiece .model file or a folder holding {MODEL_NAME}.")] = Path("data/wikitext103/tokenizer"),
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR",
        help="Folder for meta.json and {split}/ids.npy, offsets.npy.")] = Path("data/wikitext103/encoded"),
    max_tokens: Annotated[int, typer.Option(
        "--max-tokens", metavar="N", help="Longest stored paragraph, BOS and EOS included (longer ones keep their "
                                          "first tokens).")] = 1024,
):
    """Tokenise every split into uint16 id arrays with paragraph offsets; report MB/s."""
    from rich.table import Table

    from ..lm.encode import encode as encode_corpus

    meta = encode_corpus(data, tokenizer, out, max_tokens=max_tokens)
    table = Table(title=f"encoded → {out} (vocabulary {meta['vocab_size']:,}, ≤ {max_tokens} tokens per paragraph)")
    for col in ("split", "paragraphs", "tokens", "truncated", "MB", "tokenise MB/s", "total MB/s"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for split, s in meta["splits"].items():
        table.add_row(split, f"{s['paragraphs']:,}", f"{s['tokens']:,}", f"{s['truncated']:,}",
                      f"{s['input_bytes'] / 1e6:.2f}", f"{s['tokenize_mb_per_s']:.1f}", f"{s['mb_per_s']:.1f}")
    console().print(table)
    console().print(f"tokenisation: {meta['tokenize_mb_per_s']:.1f} MB/s with {meta['num_threads']} threads "
                  f"(whole step {meta['mb_per_s']:.1f} MB/s)")


@lm_app.command("train", short_help="Train the LSTM language model ± PE (001 §6.5).")
@cli_errors
@run_options("pe", "model", "hidden_size", "embed_size", "state_size", "iterations", "batch_size", "lr", "warmup",
             "seed",
             "device", "checkpoint_every", "threads", after="out")
def train_lm(
    data: Annotated[Path, typer.Option(
        "--data", metavar="DIR", help="The encoded corpus (the --out of `posrnn lm encode`).", show_default=False)],
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR", help="Run directory (config.yaml, metrics.jsonl, checkpoints/).", show_default=False)],
    params: ParamsOpt = None,
    set_: SetOpt = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in --out from its last checkpoint.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace whatever run --out holds.")] = False,
    stop_after: Annotated[Optional[int], typer.Option(
        metavar="N", help="Stop after N iterations in this invocation (checkpointed).", show_default=False)] = None,
    opts: Optional[dict] = None,
):
    """Train the LSTM language model (001 §6.5) on an encoded corpus, with or without PE —
    the papers' recipe through the same training loop as every other task. Several GPUs or nodes:
    `torchrun --nproc-per-node N $(which posrnn) lm train ...` (DistributedDataParallel; each
    process trains its slice of every global batch)."""
    from ..engine.paths import check_out_dir_of_run
    from ..engine.recipe import check_train_config
    from ..lm.encode import lm_config

    options = config_options(opts)
    cfg = lm_config(data, options, params, set_)  # the corpus, the config and the recipe: refused before torch loads
    check_train_config(cfg.train)
    check_out_dir_of_run(out)
    from ..engine.train import train

    with advise_on_interrupt(out, None if force else f"posrnn lm train --data {data} --out {out} --resume"):
        s = train(cfg, out, resume=resume, force=force, stop_after=stop_after, on_start=note,
                  given=given_keys(options, set_, params))
    if s["world_size"] == 1 or int(os.environ.get("RANK", "0")) == 0:
        last = s["last"]
        console().print(f"[bold]{'finished' if s['finished'] else 'stopped'}[/] at step {s['step']}/{s['iterations']} "
                        f"in {s['seconds']:.1f}s ({s['it_per_s']:.1f} it/s, {s['world_size']} process(es)) → {out}"
                        + (f"  loss {last['loss']:.4f}" if last else ""))


def _measure(task: str) -> str:
    return catalog.TASKS[task].measure if task in catalog.TASKS else "accuracy"


@lm_app.command("eval", short_help="Test perplexity and the NLL per position.")
@cli_errors
def eval_lm(
    run: Annotated[Path, typer.Argument(
        metavar="RUN", help="An LM run directory (latest checkpoint) or a checkpoint file.", show_default=False)],
    batch_size: Annotated[int, typer.Option(metavar="N", help="Paragraphs per evaluation batch.")] = 16,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    json_out: JsonOpt = False,
):
    """Test perplexity (exp of the mean token NLL over the test split) and the NLL per position
    (RUN/nll_by_position.csv), to see where along the paragraph PE matters."""
    import json

    from ..engine.paths import check_eval_batch, resolve_checkpoint
    from ..common.files.rundir import read_run_config
    from ..lm.encode import LMCorpus

    cfg = read_run_config(resolve_checkpoint(run)[1])
    if cfg is not None and _measure(cfg.task.name) != "perplexity":
        raise PosrnnError(f"{run} is a {cfg.task.name!r} run, not a language model; use `posrnn eval`")
    if cfg is not None and cfg.task.data:  # its corpus, read as evaluation reads it: refused before torch loads
        if not Path(cfg.task.data).is_dir():
            raise PosrnnError(f"encoded corpus {cfg.task.data} does not exist; run `posrnn lm encode` first or fix "
                              "--data")
        LMCorpus(cfg.task.data, "test")
    check_eval_batch(batch_size)
    threads_for_run(threads, run)
    from ..engine.evaluate import evaluate

    r = evaluate(run, device=device, batch_size=batch_size, n_resamples=1000)
    if _measure(r["task"]) != "perplexity":
        raise PosrnnError(f"{run} is a {r['task']!r} run, not a language model; use `posrnn eval`")
    csv_path = Path(r["run_dir"]) / "nll_by_position.csv"
    summary = {k: r[k]
               for k in ("run_dir", "step", "model", "pe", "perplexity", "token_nll", "n_tokens", "n_paragraphs")}
    summary["nll_by_position_csv"] = str(csv_path)
    if json_out:
        typer.echo(json.dumps(summary))
        return
    from rich.table import Table

    t = Table(title="language model, test split")
    for col in ("run", "step", "model", "pe", "perplexity", "tokens", "paragraphs"):
        t.add_column(col)
    t.add_row(Path(r["run_dir"]).name, str(r["step"]), r["model"], r["pe"], f"{r['perplexity']:.2f}",
              str(r["n_tokens"]),
              str(r["n_paragraphs"]))
    console().print(t)
    console().print(f"NLL per position → {csv_path}")
