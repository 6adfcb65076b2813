"""Self-training on a deterministic toy: a count-table tagger (no transitions), so every confidence
is known in closed form and checked against enumeration over taggings; only sentences at or above
the threshold are added, with their Viterbi tags, round by round."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor, nn

from ebms.fit import SelfTrainingResult, self_train
from ebms.models.jrf import JRF
from ebms.sequences import Sequences
from ebms.structured.linear_chain import LinearChainCRF

V, K = 5, 2


class TableTagger(nn.Module):
    """Node potentials log p(tag | word) from smoothed counts, zero transitions."""

    table: Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.full((V, K), -float(torch.log(torch.tensor(float(K))))))

    def forward(self, words: Tensor, lengths: Tensor) -> LinearChainCRF:
        return LinearChainCRF(self.table[words], torch.zeros(K, K), lengths)


class Trainer:
    """Records each training run's size and the tagger it produced."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.taggers: list[TableTagger] = []

    def __call__(self, tagger: nn.Module, x: Sequences, tags: Tensor) -> None:
        assert isinstance(tagger, TableTagger)
        counts = torch.zeros(V, K)
        m = x.mask()
        counts.index_put_((x.tokens[m], tags[m]), torch.ones(int(m.sum())), accumulate=True)
        tagger.table.copy_(((counts + 1) / (counts.sum(1, keepdim=True) + K)).log())
        self.sizes.append(x.batch_size)
        self.taggers.append(tagger)


LABELLED = (Sequences.from_lists([[1, 1], [1], [2, 2], [2], [3, 3]]),
            torch.tensor([[0, 0], [0, -1], [1, 1], [1, -1], [0, 1]]))
POOL = Sequences.from_lists([[1, 1], [2], [3], [4], [1, 3], [2, 2, 2], [1, 2, 1]])


def _brute(tagger: TableTagger, x: Sequences) -> tuple[Tensor, Tensor, Tensor]:
    """Sequence posterior of the best tagging, its least token marginal, and the tagging, by enumeration."""
    conf, least, best = [], [], []
    for words in x.tolist():
        rows = tagger.table[torch.tensor(words)]
        ys = list(itertools.product(range(K), repeat=len(words)))
        scores = torch.stack([rows[torch.arange(len(words)), torch.tensor(y)].sum() for y in ys])
        p = scores.softmax(0)
        j = int(p.argmax())
        marg = [sum(float(p[i]) for i, y in enumerate(ys) if y[t] == ys[j][t]) for t in range(len(words))]
        conf.append(float(p[j]))
        least.append(min(marg))
        best.append(ys[j])
    return torch.tensor(conf, dtype=torch.float64), torch.tensor(least, dtype=torch.float64), best  # type: ignore[return-value]


@pytest.mark.parametrize("confidence", ["sequence", "min_marginal"])
def test_adds_exactly_the_sentences_at_or_above_the_threshold(confidence):
    train = Trainer()
    threshold = 0.6
    res = self_train(TableTagger, train, LABELLED, POOL, rounds=5, threshold=threshold, confidence=confidence)
    assert isinstance(res, SelfTrainingResult)
    pool = list(range(POOL.batch_size))
    for r, info in enumerate(res.rounds):
        tagger = train.taggers[r]  # the tagger of the previous training run labelled this round
        seq, least, best = _brute(tagger, POOL[torch.tensor(pool)])
        conf = seq if confidence == "sequence" else least
        expected = [pool[i] for i in range(len(pool)) if conf[i] >= threshold]
        assert info.added.tolist() == expected and info.pool == len(pool)
        torch.testing.assert_close(info.confidence, conf[[pool.index(i) for i in expected]], atol=1e-6, rtol=0)
        for i in expected:
            row = (res.pseudo_index == i).nonzero()[0, 0]
            n = int(POOL.lengths[i])
            assert res.pseudo_tags[row, :n].tolist() == list(best[pool.index(i)])
            assert res.pseudo_tags[row, n:].eq(0).all()
        pool = [i for i in pool if i not in expected]
    assert len(res.rounds[-1].added) == 0 or len(res.rounds) == 5  # stops early once nothing passes
    assert train.sizes[0] == LABELLED[0].batch_size
    assert train.sizes[1:] == [LABELLED[0].batch_size + n
                               for n in itertools.accumulate(len(r.added) for r in res.rounds if len(r.added))]
    assert res.tagger is train.taggers[-1]


def test_the_toy_is_not_trivial():
    """At 0.6 the first round adds some sentences but not all (so the test above checks a real cut)."""
    res = self_train(TableTagger, Trainer(), LABELLED, POOL, rounds=1, threshold=0.6)
    assert 0 < len(res.rounds[0].added) < POOL.batch_size


def test_min_marginal_is_at_least_the_sequence_posterior():
    tagger = TableTagger()
    Trainer()(tagger, *LABELLED)
    seq, least, _ = _brute(tagger, POOL)
    assert bool((least >= seq - 1e-12).all())


def test_max_add_keeps_the_most_confident_in_pool_order():
    train = Trainer()
    res = self_train(TableTagger, train, LABELLED, POOL, rounds=1, threshold=0.0, max_add=2)
    seq, _, _ = _brute(train.taggers[0], POOL)
    top = sorted(torch.sort(-seq, stable=True).indices[:2].tolist())
    assert res.rounds[0].added.tolist() == top


def test_zero_rounds_is_the_supervised_tagger():
    train = Trainer()
    res = self_train(TableTagger, train, LABELLED, POOL, rounds=0)
    assert res.rounds == () and res.pseudo_index.numel() == 0 and train.sizes == [5]


@pytest.mark.parametrize("script,best", [([0.5, 0.9, 0.7], 1), ([0.5, 0.4, 0.3], 0), ([0.2, 0.6, 0.6], 1),
                                         ([0.1, 0.2, 0.8], 2)])
def test_score_keeps_the_best_training_run(script, best):
    """``score`` is called once per training run in order; the best (the earliest on ties) is returned."""
    train, seen = Trainer(), []

    def score(tagger: nn.Module) -> float:
        seen.append(tagger)
        return script[len(seen) - 1]

    res = self_train(TableTagger, train, LABELLED, POOL, rounds=2, threshold=0.0, max_add=2, score=score)
    assert len(train.taggers) == 3 and seen == train.taggers  # threshold 0 and max_add 2: every round adds two
    assert res.scores == tuple(script) and res.best_run == best and res.tagger is train.taggers[best]


def test_without_score_the_last_run_is_returned():
    train = Trainer()
    res = self_train(TableTagger, train, LABELLED, POOL, rounds=2, threshold=0.0, max_add=2)
    assert res.scores == () and res.best_run == len(train.taggers) - 1 == 2 and res.tagger is train.taggers[-1]
    res = self_train(TableTagger, Trainer(), LABELLED, POOL, rounds=3, threshold=1.0)  # nothing passes: run 0 only
    assert res.best_run == 0 and res.pseudo_index.numel() == 0


def test_a_jrf_can_be_the_tagger():
    def make() -> JRF:
        torch.manual_seed(0)
        return JRF(V, K, max_length=3, embed=4, hidden=3)

    res = self_train(make, lambda m, x, y: None, LABELLED, POOL, rounds=1, threshold=0.0,
                     conditional=lambda m, x: m.crf(x), batch_size=3)  # type: ignore[attr-defined]
    assert res.rounds[0].added.tolist() == list(range(POOL.batch_size))


@pytest.mark.parametrize("kwargs,error,match", [
    ({"confidence": "entropy"}, ValueError, "confidence: expected one of sequence, min_marginal; got 'entropy'"),
    ({"threshold": 1.5}, ValueError, "threshold"),
    ({"rounds": -1}, ValueError, "rounds"),
    ({"max_add": 0}, ValueError, "max_add"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"labelled": (POOL.tokens, POOL.tokens)}, TypeError, r"labelled: expected a \(Sequences, tags \(N, T\)\) tuple"),
    ({"labelled": (LABELLED[0], torch.zeros(5, 3, dtype=torch.long))}, ValueError, "labelled tags"),
    ({"unlabelled": POOL.tokens}, TypeError, "unlabelled: expected an ebms.sequences.Sequences; got Tensor"),
    ({"score": 0.5}, TypeError, "score: expected a callable tagger -> float or None; got float"),
    ({"score": lambda m: float("nan")}, ValueError, "score\\(tagger\\) of training run 0: expected a finite number"),
])
def test_bad_arguments_name_themselves(kwargs, error, match):
    args = {"labelled": LABELLED, "unlabelled": POOL, **kwargs}
    with pytest.raises(error, match=match):
        self_train(TableTagger, Trainer(), **args)  # type: ignore[arg-type]


def test_a_conditional_that_is_not_a_crf_is_refused():
    with pytest.raises(TypeError, match="conditional\\(tagger, x\\): expected a LinearChainCRF; got Tensor"):
        self_train(TableTagger, Trainer(), LABELLED, POOL, rounds=1, conditional=lambda m, x: x.tokens)  # type: ignore[arg-type,return-value]
