"""`exactspec audit`: is a running engine's speculative decoding exact, and what acceptance does its rule leave?

The data path, one module each:

- ``laws.py``: the law an engine samples from at the settings sent (each engine's own order of temperature,
  top-k, top-p, min-p and penalties, read from its source), and the probability-integral transform;
- ``engines.py``: each engine's HTTP dialect: detection, the request with neutral values for what is not
  modelled, the sampled token ids in the response, its counters;
- ``client.py``: the samples, fetched in parallel over HTTP (``httpx``), Ctrl-C keeping what arrived;
- ``stats.py``: the verdicts (``exact`` / ``not exact`` / ``inconclusive``) with their error rates;
- ``acceptance.py``: the engine's rule and exactspec's best exact rule replayed on the same sampled texts;
- ``run.py``: one audit, end to end; ``report.py``: its Markdown, plot and files.

The audit never imports an engine: it speaks to one over HTTP as a user's client does.
"""
