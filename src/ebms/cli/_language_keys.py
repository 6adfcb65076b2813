"""Private: which ``[language]`` keys a language run reads, and the check of ``language.discounts``.

A key of ``[language]`` set away from its default that the configured ``model.kind`` and
``objective.kind`` never read would be ignored without a word (``language.hidden`` on a
residual or Electric run, ``language.smoothing`` on an LSTM, ``language.base_run`` on anything
but ``residual``); :func:`reads` lists what a configuration reads, :func:`readers` who reads a
key, and :meth:`ebms.cli.language.LanguageTask.check` refuses the rest with
:func:`~ebms.cli._unread_keys.refuse_unread`.
"""

from __future__ import annotations

from ebms.cli.config import Config, ConfigError

__all__ = ["DATA_KEYS", "KIND_KEYS", "KN_SMOOTHINGS", "OBJECTIVE_KEYS", "TRF_KINDS", "check_discounts", "readers",
           "reads"]

TRF_KINDS = ("trf", "trf-cnn", "trf-bilstm")
KN_SMOOTHINGS = ("modified_kneser_ney", "kneser_ney")
#: ``[language]`` keys every kind reads: the text, its vocabulary and ``L``.
DATA_KEYS = ("level", "lower", "sentence_split", "train_path", "valid_path", "test_path", "limit", "min_count",
             "max_vocab", "max_length")
_NET = ("embedding_dim", "hidden", "layers", "dropout")
#: the further ``[language]`` keys each ``model.kind`` reads (``heads`` for ``residual`` with a Transformer
#: energy, ``step_clip`` for ``trf`` with ``feature_scaling``, and :data:`OBJECTIVE_KEYS`, are added).
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "kn": ("order", "smoothing", "discounts"),
    "lstm": (*_NET, "tie_weights"),
    "transformer": (*_NET, "heads", "tie_weights"),
    "trf": ("order", "features", "feature_cutoffs", "feature_boundaries", "trf_init", "classes", "trials",
            "logz_samples", "feature_scaling"),
    "trf-cnn": (*_NET, "trials", "logz_samples"),
    "trf-bilstm": (*_NET, "trials", "logz_samples"),
    "residual": ("base_run", "prefix_length", "horizon", "energy", "embedding_dim", "layers", "dropout", "negatives",
                 "joint_samples"),
    "electric": ("embedding_dim", "layers", "heads", "dropout", "mask_rate"),
}
#: keys read by an objective: ``earm`` (lstm, transformer) and the TRF objectives.
OBJECTIVE_KEYS: dict[str, tuple[str, ...]] = {
    "earm": ("earm_weight", "earm_start", "earm_truncate"),
    "ml": ("chains", "chain_groups", "workers", "zeta_tc", "zeta_beta", "zeta_t0"),
    "nce": ("noise_order", "smoothing", "discounts"), "dnce": ("noise_hidden",),
}
_CONDITIONAL = {"heads": "model.kind = residual with language.energy = 'transformer'",
                "step_clip": "language.feature_scaling = true", "smoothing": "language.trf_init = 'kn'",
                "discounts": "language.trf_init = 'kn'"}


def reads(cfg: Config) -> set[str]:
    """The ``[language]`` keys a run of ``cfg`` reads (:data:`DATA_KEYS`, :data:`KIND_KEYS`, :data:`OBJECTIVE_KEYS`)."""
    s, kind, obj = cfg.sections["language"], cfg.model.kind, cfg.objective.kind
    keys = {*DATA_KEYS, *KIND_KEYS.get(kind, ())}
    if obj == "earm" or kind in TRF_KINDS:
        keys |= set(OBJECTIVE_KEYS.get(obj, ()))
    if kind == "residual" and s.energy == "transformer":
        keys.add("heads")
    if kind == "trf" and s.feature_scaling:
        keys.add("step_clip")
    if kind == "trf" and s.trf_init == "kn":
        keys |= {"smoothing", "discounts"}
    return keys


def readers(key: str) -> list[str]:
    """The configurations that read ``key`` of ``[language]``, in words (for the message of an unread key)."""
    kinds = [k for k, keys in KIND_KEYS.items() if key in keys]
    out = [f"model.kind = {', '.join(kinds)}"] if kinds else []
    out += [f"objective.kind = {obj!r}" + (" (a TRF)" if obj != "earm" else "") for obj, keys in OBJECTIVE_KEYS.items()
            if key in keys]
    return out + ([_CONDITIONAL[key]] if key in _CONDITIONAL else [])


def check_discounts(cfg: Config) -> None:
    """``language.discounts`` of a Kneser–Ney n-gram (``kn``, or a TRF's ``nce`` noise): one per order, or
    three per order for modified Kneser–Ney (ranges are checked by the n-gram itself).

    Raises:
        ConfigError: discounts with another smoothing, or of another length.
    """
    s, kind, obj = cfg.sections["language"], cfg.model.kind, cfg.objective.kind
    if not s.discounts or not (kind == "kn" or (kind in TRF_KINDS and obj == "nce") or "smoothing" in reads(cfg)):
        return  # unread: refused as such
    order, key = (s.noise_order, "noise_order") if kind in TRF_KINDS and obj == "nce" else (s.order, "order")
    if s.smoothing not in KN_SMOOTHINGS:
        raise ConfigError(f"language.discounts: only Kneser-Ney smoothing takes discounts; language.smoothing="
                          f"{s.smoothing!r}: drop them or use 'modified_kneser_ney' / 'kneser_ney'")
    sizes = (order, 3 * order) if s.smoothing == "modified_kneser_ney" else (order,)
    if len(s.discounts) not in sizes:
        what = " or three (D1, D2, D3+) per order" if len(sizes) == 2 else ""
        raise ConfigError(f"language.discounts: expected one discount per order{what}, lowest order first: "
                          f"{' or '.join(map(str, sizes))} values for language.{key}={order}; got "
                          f"{len(s.discounts)} ({s.discounts})")
