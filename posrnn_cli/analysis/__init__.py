"""Tables, figures and the scorecard, from result files only (no training code)."""
