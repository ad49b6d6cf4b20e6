"""Language modelling on WikiText-103 (001 §6.5): the data chain.

``data.prepare`` (raw WikiText → one paragraph per line) → ``tokenizer.train_tokenizer``
(SentencePiece unigram) → ``encode.encode`` (uint16 id arrays + paragraph offsets) →
``encode.LMCorpus`` (the memory-mapped splits, read by the ``lm`` task). ``cli.lm_app`` exposes the three steps as
``posrnn lm prepare|tokenizer|encode``; ``make_mini_corpus`` regenerates the small synthetic corpus in
``data/wikitext-mini``.
"""
