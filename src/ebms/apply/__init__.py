"""A trained model applied to new input: what ``ebms score``, ``rescore``, ``tag``, ``decode`` and
``classify`` (and :class:`ebms.runs.Run`'s methods of those names) compute.

Each object here is built from a trained model and what its run stored (vocabularies, feature maps,
normalisers) and is called on a batch of the user's input:

* :mod:`ebms.apply.text`: per-sentence log-probabilities of a language model, and n-best rescoring
  with several models and interpolation weights;
* :mod:`ebms.apply.tagging`: tags of token sequences;
* :mod:`ebms.apply.speech`: transcripts of waveforms;
* :mod:`ebms.apply.images`: labels, probabilities and out-of-distribution scores of images.
"""
