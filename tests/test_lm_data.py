"""The LM data chain on the shipped mini corpus: prepare → tokenizer → encode → batches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
from typer.testing import CliRunner

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.lm import data as lm_data
from posrnn_cli.cli.lm_commands import lm_app
from posrnn_cli.lm.encode import LMCorpus, cap_paragraph, encode
from posrnn_cli.lm.tokenizer import train_tokenizer

from conftest import ROOT


def build_splits(seed: int) -> dict:
    """The shipped corpus's generator (tools/make_mini_corpus.py, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_mini_corpus", ROOT / "tools" / "make_mini_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_splits(seed)

MINI = Path(__file__).resolve().parents[1] / "data" / "wikitext-mini"
VOCAB = 500
runner = CliRunner()


def direct_paragraphs(raw: Path) -> list[str]:
    """The filter written out independently: non-blank lines not starting with ' ='."""
    lines = raw.read_text(encoding="utf-8").split("\n")
    return [line.strip() for line in lines if line.strip() and not line.startswith(" =")]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """prepare → tokenizer → encode once for the whole module (about 2 s)."""
    root = tmp_path_factory.mktemp("lm")
    stats = lm_data.prepare(root / "txt", data_dir=MINI)
    tok = train_tokenizer(root / "txt" / "train.txt", root / "tok" / "spm", vocab_size=VOCAB)
    meta = encode(root / "txt", tok["model"], root / "enc")
    return {"root": root, "stats": stats, "tok": tok, "meta": meta}


# --- the shipped corpus --------------------------------------------------------------------
def test_mini_corpus_is_wikitext_shaped_and_reproducible():
    files = {s: (MINI / f"wiki.{s}.raw").read_text(encoding="utf-8") for s in ("train", "valid", "test")}
    assert 300_000 <= len(files["train"].encode()) <= 600_000
    assert all(30_000 <= len(files[s].encode()) <= 60_000 for s in ("valid", "test"))
    lines = files["train"].split("\n")
    assert lines[0] == " " and lines[1].startswith(" = ") and lines[1].endswith(" = ")
    assert any(x.startswith(" = = ") for x in lines) and any(x.startswith(" = = = ") for x in lines)
    for token in (" @-@ ", " @,@ ", " @.@ ", "<unk>"):
        assert token in files["train"]
    body = [x for x in lines if x.strip() and not x.startswith(" =")]
    assert all(x.startswith(" ") and x.endswith(" ") for x in body)
    # the generator is a pure function of its seed and wrote exactly these files
    assert build_splits(0) == files
    titles = {s: {x for x in files[s].split("\n") if x.startswith(" = ") and not x.startswith(" = = ")}
              for s in files}
    assert not (titles["train"] & titles["valid"]) and not (titles["train"] & titles["test"])


# --- prepare ---------------------------------------------------------------------------------
def test_prepare_drops_headings_and_empty_lines(chain):
    txt = chain["root"] / "txt"
    for split in ("train", "valid", "test"):
        got = (txt / f"{split}.txt").read_text(encoding="utf-8").split("\n")
        assert got[-1] == ""  # newline-terminated
        got = got[:-1]
        want = direct_paragraphs(MINI / f"wiki.{split}.raw")
        assert got == want and chain["stats"]["splits"][split]["paragraphs"] == len(want)
        assert all(p and not p.startswith("=") and p == p.strip() for p in got)
    s = chain["stats"]["splits"]["train"]
    assert s["lines"] == s["empty"] + s["headings"] + s["paragraphs"] and s["headings"] > 0


def test_prepare_reads_hub_parquet_layout(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    cfg = tmp_path / "hub" / "wikitext-103-raw-v1"
    cfg.mkdir(parents=True)
    rows = ["", " = Title = \n", "", " First paragraph , with 1 @,@ 000 words . \n", " Second one . \n",
            "", " = = Section = = \n", "", " Third . \n"]
    pq.write_table(pa.table({"text": rows[:4]}), cfg / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"text": rows[4:]}), cfg / "train-00001-of-00002.parquet")
    pq.write_table(pa.table({"text": rows}), cfg / "validation-00000-of-00001.parquet")
    pq.write_table(pa.table({"text": [" Only . \n"]}), cfg / "test-00000-of-00001.parquet")
    out = tmp_path / "out"
    res = lm_data.prepare(out, data_dir=tmp_path / "hub")
    want = "First paragraph , with 1 @,@ 000 words .\nSecond one .\nThird .\n"
    assert (out / "train.txt").read_text() == want and (out / "valid.txt").read_text() == want
    assert (out / "test.txt").read_text() == "Only .\n"
    assert res["splits"]["train"] == {"lines": 9, "empty": 4, "headings": 2, "paragraphs": 3, "bytes": len(want)}


def test_prepare_errors_leave_outputs_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.txt").write_text("good\n")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PosrnnError, match="no WikiText files"):
        lm_data.prepare(out, data_dir=tmp_path / "empty")
    partial = tmp_path / "partial"
    partial.mkdir()
    for s in ("train", "valid"):
        (partial / f"wiki.{s}.raw").write_text(" = T = \n \n text . \n")
    with pytest.raises(PosrnnError, match=r"lacks the test split \(wiki\.test\.raw"):
        lm_data.prepare(out, data_dir=partial)
    (partial / "wiki.test.raw").write_text(" \n = Only a heading = \n \n")
    with pytest.raises(PosrnnError, match="test split .* holds no paragraph"):
        lm_data.prepare(out, data_dir=partial)
    assert sorted(p.name for p in out.iterdir()) == ["train.txt"]  # no temp files, nothing replaced
    assert (out / "train.txt").read_text() == "good\n"


def test_prepare_offline_hub_is_one_line_error(tmp_path, monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'Salesforce/wikitext' on the Hub (LocalEntryNotFoundError)\nmore")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(PosrnnError, match="--data-dir") as e:
        lm_data.prepare(tmp_path / "out")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


# --- tokenizer -------------------------------------------------------------------------------
def test_tokenizer_ids_and_vocab(chain):
    sp = spm.SentencePieceProcessor(model_file=chain["tok"]["model"])
    assert sp.get_piece_size() == VOCAB
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    # WikiText's literal <unk> is one piece and decodes back to itself
    ids = sp.encode("near <unk> .")
    assert sp.piece_to_id("\u2581<unk>") in ids and sp.unk_id() not in ids and sp.decode(ids) == "near <unk> ."
    tok = Path(chain["tok"]["model"]).parent
    assert sorted(p.name for p in tok.iterdir()) == ["spm.log", "spm.model", "spm.vocab"]


def test_tokenizer_refuses_vocab_over_uint16_and_too_large_for_corpus(chain, tmp_path):
    train = chain["root"] / "txt" / "train.txt"
    with pytest.raises(PosrnnError, match="65,536"):
        train_tokenizer(train, tmp_path / "a" / "spm", vocab_size=65537)
    with pytest.raises(PosrnnError, match="lower --vocab-size") as e:
        train_tokenizer(train, tmp_path / "b" / "spm", vocab_size=32768)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())  # no half files


# --- encode ----------------------------------------------------------------------------------
def test_encode_arrays_bos_eos_and_round_trip(chain):
    enc, meta = chain["root"] / "enc", chain["meta"]
    sp = spm.SentencePieceProcessor(model_file=str(enc / "spm.model"))
    for split in ("train", "valid", "test"):
        ids = np.load(enc / split / "ids.npy")
        offsets = np.load(enc / split / "offsets.npy")
        paras = (chain["root"] / "txt" / f"{split}.txt").read_text(encoding="utf-8").splitlines()
        assert ids.dtype == np.uint16 and offsets.dtype == np.int64
        assert len(offsets) == len(paras) + 1 == meta["splits"][split]["paragraphs"] + 1
        assert offsets[0] == 0 and offsets[-1] == len(ids) and np.all(np.diff(offsets) >= 2)
        assert np.all(ids[offsets[:-1]] == 1) and np.all(ids[offsets[1:] - 1] == 2)  # BOS … EOS
        assert ids.max() < VOCAB
        # decoding gives the text back, except where a character too rare for the
        # tokenizer (character_coverage) became <unk>: check every paragraph without one
        exact = 0
        for p, text in enumerate(paras):
            body = ids[offsets[p] + 1 : offsets[p + 1] - 1]
            if not np.any(body == sp.unk_id()):
                assert sp.decode(body.tolist()) == text
                exact += 1
        assert exact >= 0.9 * len(paras)
    assert meta["splits"]["train"]["truncated"] == 0 and meta["tokenize_mb_per_s"] > 0
    assert json.loads((enc / "meta.json").read_text())["splits"]["train"]["tokens"] == meta["splits"]["train"]["tokens"]


def test_cap_keeps_first_tokens_and_drops_eos_when_cut(chain, tmp_path):
    assert cap_paragraph([7, 8, 9], 1, 2, 5) == [1, 7, 8, 9, 2]
    assert cap_paragraph([7, 8, 9, 10], 1, 2, 5) == [1, 7, 8, 9, 10]
    assert cap_paragraph([7, 8, 9, 10, 11], 1, 2, 5) == [1, 7, 8, 9, 10]
    meta = encode(chain["root"] / "txt", chain["tok"]["model"], tmp_path / "enc16", max_tokens=16, splits=["valid"])
    full = LMCorpus(chain["root"] / "enc", "valid")
    cut = LMCorpus(tmp_path / "enc16", "valid")
    assert len(cut) == len(full) and cut.lengths.max() == 16 and meta["splits"]["valid"]["truncated"] > 0
    for i in range(len(cut)):
        a, b = full[i], cut[i]
        if len(a) <= 16:
            assert np.array_equal(a, b)
        else:  # BOS + the first 15 pieces, no EOS
            assert np.array_equal(b, a[:16]) and b[-1] != 2


def test_encode_refuses_oversized_or_bad_tokenizer(chain, tmp_path):
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(PosrnnError, match="not a SentencePiece model"):
        encode(chain["root"] / "txt", bad, tmp_path / "enc")
    with pytest.raises(PosrnnError, match="not found"):
        encode(tmp_path, chain["tok"]["model"], tmp_path / "enc")
    assert not (tmp_path / "enc").exists()


# --- batches ---------------------------------------------------------------------------------
def test_collate_pads_and_the_corpus_covers_every_paragraph_once(chain):
    corpus = LMCorpus(chain["root"] / "enc", "valid")
    ids, lengths = corpus.collate(range(len(corpus)))
    assert ids.dtype == torch.long and ids.shape == (len(corpus), int(lengths.max()))
    for i, (row, n) in enumerate(zip(ids, lengths)):
        assert (row[:n].tolist() == corpus[i].tolist() and row[0] == corpus.bos_id
                and torch.all(row[n:] == corpus.pad_id))
    assert int(lengths.sum()) == corpus.n_tokens == chain["meta"]["splits"]["valid"]["tokens"]
    with pytest.raises(PosrnnError, match="not an encoded corpus"):
        LMCorpus(chain["root"] / "txt", "valid")


# --- the Typer sub-app -------------------------------------------------------------------------
def test_cli_chain_and_one_line_errors(tmp_path):
    txt, tok, enc = tmp_path / "txt", tmp_path / "tok", tmp_path / "enc"
    r = runner.invoke(lm_app, ["prepare", "--out", str(txt), "--data-dir", str(MINI)])
    assert r.exit_code == 0, r.output
    assert "paragraphs" in r.output and (txt / "train.txt").is_file()
    r = runner.invoke(lm_app, ["tokenizer", "--data", str(txt), "--out", str(tok), "--vocab-size", "300"])
    assert r.exit_code == 0, r.output
    assert (tok / "spm.model").is_file()
    r = runner.invoke(lm_app, ["encode", "--data", str(txt), "--tokenizer", str(tok), "--out", str(enc),
                               "--max-tokens", "64"])
    assert r.exit_code == 0, r.output
    assert "MB/s" in r.output and json.loads((enc / "meta.json").read_text())["max_tokens"] == 64

    (tmp_path / "empty").mkdir()
    for args, needle in [
        (["prepare", "--out", str(tmp_path / "x"), "--data-dir", str(tmp_path / "empty")], "no WikiText files"),
        (["tokenizer", "--data", str(txt), "--out", str(tmp_path / "t2"), "--vocab-size", "70000"], "65,536"),
        (["tokenizer", "--data", str(txt), "--out", str(tmp_path / "t3")], "lower --vocab-size"),
        (["encode", "--data", str(tmp_path / "empty"), "--tokenizer", str(tok), "--out", str(tmp_path / "e")],
         "not found"),
        (["encode", "--data", str(txt), "--tokenizer", str(tmp_path / "empty"), "--out", str(tmp_path / "e")],
         "no tokenizer"),
    ]:
        r = runner.invoke(lm_app, args)
        assert r.exit_code == 1, (args, r.output)
        err = r.stderr.strip()
        assert err.startswith("error: ") and needle in err and "\n" not in err, err
        assert "Traceback" not in r.output


@pytest.mark.parametrize("cmd", [[], ["prepare"], ["tokenizer"], ["encode"]])
def test_cli_help(cmd):
    r = runner.invoke(lm_app, [*cmd, "--help"])
    assert r.exit_code == 0 and "Usage" in r.output


def test_the_pipelines_tokenizer_trains_with_its_recorded_thread_count(tmp_path, monkeypatch):
    """SentencePiece's pieces depend on its thread count, so the lm_data job passes the profile's
    `threads`, never the machine's core count, and a new count redoes the corpus."""
    from posrnn_cli.lm import tokenizer
    from posrnn_cli.sweep import jobs
    from posrnn_cli.sweep.plan import Job

    seen = []
    real = tokenizer.train_tokenizer
    monkeypatch.setattr(tokenizer, "train_tokenizer", lambda *a, **k: seen.append(k["num_threads"]) or real(*a, **k))
    root = Path(__file__).resolve().parents[1]
    for threads in (1, 1, 2):
        opts = {"data_dir": str(root / "data" / "wikitext-mini"), "vocab_size": 300, "max_tokens": 32,
                "threads": threads}
        jobs.run_lm_data(Job("lm_data", "corpus", "lm_data", str(tmp_path / "lm_data"), None, opts))
    assert seen == [1, 2]  # the second call was up to date; a new count is a new corpus
