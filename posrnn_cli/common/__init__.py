"""The base layer every other part of posrnn builds on; nothing here imports torch. At the top, what
every room reads: the one error type (``errors``), the catalogue of names (``catalog``), the cores
from outside posrnn (``plugins``) and a run's identity (``numerics``). By what they hold: the files
posrnn writes and the run-directory format (``files``), what a run and a profile are set to
(``settings``), the DVC pipeline as declared (``stages``), what a result is and how far it is
trusted (``results``) and the machine and processes posrnn runs on (``host``)."""
