"""Data: seeded 2-D toy distributions and the location of real data sets.

* :class:`ToyDataset` / :func:`get_toy` — seven 2-D toy sets; ``sample(n,
  generator=g) -> (n, 2)`` float32, ``bounds`` (a square holding essentially
  all the mass) and, for ``checkerboard``, ``eight_gaussians`` and ``rings``,
  the exact ``log_prob(x) -> (n,)``.
* :func:`data_root` / :func:`data_path` — where vendored data sets live
  (``$EBMS_DATA``, else ``../shared/data`` beside the checkout, else ``./data``).

* :func:`load_mnist` / :func:`binarized_mnist` — MNIST and Fashion-MNIST from ``$EBMS_DATA``, a
  user's folder, Debian's ``dataset-fashion-mnist`` or a checked download; fixed-seed binarisation.
* :func:`binarized_digits` — scikit-learn's 8x8 digits, binarised.
* :func:`load_continuous_images` — MNIST, Fashion-MNIST and the digits as ``(N, 1, H, W)`` in
  ``[-1, 1]``; :func:`load_image_splits` adds a seeded validation split and withheld labels
  (semi-supervised learning); :func:`ood_images` builds out-of-distribution sets (another image
  set, noise, flips, quarter turns); :func:`dequantize`, :func:`label_subset`.
* :func:`read_conll` / :func:`load_conll2000` / :func:`load_conll2002` — CoNLL column files
  (chunking, NER), read from the NLTK zips with an md5 check; tag-scheme helpers in
  :mod:`ebms.data.conll`.
* :func:`read_wav` / :func:`log_mel` / :func:`cmvn` — the speech front end (PCM wav, log-mel
  filterbanks with ``torch.stft``, mean and variance normalisation).
* :func:`load_fsdd` / :func:`connected_digits` — the Free Spoken Digit recordings and the
  connected-digit task built from them (fixed seed, speaker-disjoint test set).
* :func:`lag_copy_tagging` — a synthetic tagging task with long-range label dependencies.
* :func:`nce_batches` / :func:`tagged_batches` — the trainer's batch streams of residual-EBM training
  (pairs with cached negatives) and of (semi-supervised) tagging (:mod:`ebms.data.batch_streams`).
* :mod:`ebms.data.text` — language-model text: :func:`ptb`, :func:`tiny_shakespeare`, a user's
  files (:func:`read_sentences`, streamed by :func:`iter_sentences`), the LM
  :class:`Vocabulary` (``0`` = the sentence boundary ``</s>``/``<s>``, ``1`` = ``<unk>``; not the
  tagger's :class:`WordVocabulary`, where ``0`` is padding), length-bucketed
  :func:`sentence_batches` and the truncated-BPTT stream :func:`bptt_batches`.
* :class:`NBest` — n-best lists of a recogniser in Kaldi's text + cost files
  (:func:`read_kaldi_nbest`) or a TSV (:func:`read_nbest_tsv`), with reference transcripts
  (:func:`read_references`); rescored by :mod:`ebms.metrics.rescoring`.

Randomness comes only from the ``generator`` argument.
* :class:`Augment` and :func:`random_shift`, :func:`random_flip`, :func:`gaussian_noise`, :func:`color_jitter` —
  seeded image augmentations ``(B, C, H, W)`` (improved contrastive divergence).
"""

from ebms.data.addition import AdditionTask, addition_corpus, corrupted_corpus
from ebms.data.audio import CMVNStats, cmvn, log_mel, mel_filterbank, read_wav
from ebms.data.augment import Augment, color_jitter, gaussian_noise, random_flip, random_shift, shift_images
from ebms.data.batch_streams import nce_batches, tagged_batches
from ebms.data.binarize import binarize, binarized_mnist
from ebms.data.binary_images import IMAGE_SETS, BinaryImages, load_binary_images
from ebms.data.conll import Sentence, load_conll2000, load_conll2002, read_conll
from ebms.data.digits import binarized_digits
from ebms.data.fsdd import ConnectedDigits, connected_digits, load_fsdd
from ebms.data.image_sets import OOD_SETS, ImageSplits, load_image_splits, ood_images
from ebms.data.images import (
    CONTINUOUS_IMAGE_SETS,
    ContinuousImages,
    dequantize,
    flip_images,
    label_subset,
    load_continuous_images,
    noise_images,
    rotate_images,
)
from ebms.data.mnist import ChecksumError, ImageDataset, load_mnist, read_idx
from ebms.data.nbest import (
    TSV_HEADER,
    NBest,
    read_kaldi_nbest,
    read_nbest_tsv,
    read_references,
    write_kaldi_nbest,
    write_nbest_tsv,
    write_references,
)
from ebms.data.negative_cache import NegativeCache
from ebms.data.paths import DATA_ENV_VAR, data_path, data_root
from ebms.data.points import POINT_SUFFIXES, PointCloud, load_points, read_points
from ebms.data.synthetic_tagging import SyntheticTagging, lag_copy_tagging
from ebms.data.text import (
    Vocabulary,
    bptt_batches,
    iter_sentences,
    ptb,
    read_sentences,
    sentence_batches,
    split_sentences,
    tiny_shakespeare,
)
from ebms.data.toy import TOY_NAMES, ToyDataset, get_toy
from ebms.data.toy_translation import (
    TranslationPairs,
    TranslationSplits,
    target_log_prob,
    toy_translation,
    toy_translation_splits,
)
from ebms.data.vocab import WordVocabulary

__all__ = [
    "NBest",
    "TSV_HEADER",
    "read_kaldi_nbest",
    "write_kaldi_nbest",
    "read_nbest_tsv",
    "write_nbest_tsv",
    "read_references",
    "write_references",
    "tiny_shakespeare",
    "split_sentences",
    "sentence_batches",
    "read_sentences",
    "ptb",
    "iter_sentences",
    "bptt_batches",
    "Vocabulary",
    "BinaryImages",
    "CMVNStats",
    "ChecksumError",
    "ConnectedDigits",
    "DATA_ENV_VAR",
    "IMAGE_SETS",
    "ImageDataset",
    "POINT_SUFFIXES",
    "PointCloud",
    "Sentence",
    "SyntheticTagging",
    "TOY_NAMES",
    "ToyDataset",
    "WordVocabulary",
    "binarize",
    "binarized_digits",
    "binarized_mnist",
    "cmvn",
    "connected_digits",
    "data_path",
    "data_root",
    "get_toy",
    "lag_copy_tagging",
    "nce_batches",
    "tagged_batches",
    "load_binary_images",
    "load_conll2000",
    "load_conll2002",
    "load_fsdd",
    "load_mnist",
    "load_points",
    "log_mel",
    "mel_filterbank",
    "read_conll",
    "read_idx",
    "read_points",
    "read_wav",
    "AdditionTask",
    "NegativeCache",
    "addition_corpus",
    "corrupted_corpus",
    "TranslationPairs",
    "TranslationSplits",
    "target_log_prob",
    "toy_translation",
    "toy_translation_splits",
    "OOD_SETS",
    "ImageSplits",
    "load_image_splits",
    "ood_images",
    "CONTINUOUS_IMAGE_SETS",
    "ContinuousImages",
    "dequantize",
    "flip_images",
    "label_subset",
    "load_continuous_images",
    "noise_images",
    "rotate_images",
    "Augment",
    "color_jitter",
    "gaussian_noise",
    "random_flip",
    "random_shift",
    "shift_images",
]
