"""The base layer every other part of posrnn builds on: errors, file I/O, statistics, the
typed config, the catalogue of names, and the profiles. Nothing here imports torch."""
