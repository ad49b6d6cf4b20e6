"""The refusal benchmark runs both commands and prints their figures (it checks no speed: the
figures live in docs/performance.md, beside the command that printed them)."""

from __future__ import annotations

from posrnn_cli.measure import refusal_bench


def test_the_refusal_benchmark_times_help_and_a_refused_model(capsys):
    refusal_bench.main(["--repeat", "1"])
    out = capsys.readouterr().out
    assert "posrnn --help" in out and "exit 0" in out
    assert "posrnn train --model no_such_core" in out and "exit 2" in out  # refused, not run
    assert "a bad --model against --help: wall" in out
