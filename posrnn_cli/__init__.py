"""posrnn — reproduce "Positional Encoding Helps Recurrent Neural Networks Handle a Large Vocabulary"."""

__version__ = "0.1.0"
