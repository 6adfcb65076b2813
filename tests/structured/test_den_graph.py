"""DenominatorGraph: structure of the CTC x n-gram composition, checked path by path."""

from __future__ import annotations

import itertools

import pytest
import torch
from _ctc_paths import collapse

from ebms.sequences import Sequences
from ebms.structured.den_graph import DenominatorGraph
from ebms.structured.ngram import LabelNGram


def _walk(graph, path):
    """Follow the (deterministic) graph along ``path``; returns the summed weight or None."""
    arcs = {}
    for a, b, s, w in zip(graph.src.tolist(), graph.dst.tolist(), graph.symbol.tolist(),
                          graph.weight.tolist()):
        assert (a, s) not in arcs, "graph must be deterministic"
        arcs[(a, s)] = (b, w)
    state, total = graph.start, 0.0
    for s in path:
        if (state, s) not in arcs:
            return None
        state, w = arcs[(state, s)]
        total += w
    return total + float(graph.final[state])


@pytest.mark.parametrize("order", [1, 2, 3])
def test_every_frame_path_has_one_path_weighted_by_lm_of_itscollapse(order):
    lm = LabelNGram.fit([[1, 2], [2, 2, 1], [1]], 3, order)
    graph = DenominatorGraph.from_ngram(lm)
    for t in range(0, 5):
        for path in itertools.product(range(3), repeat=t):
            y = list(collapse(path))
            got = _walk(graph, path)
            tgt = torch.tensor([y + [1]])
            assert got == pytest.approx(float(lm.log_prob(Sequences(tgt, torch.tensor([len(y)])))[0]),
                                        abs=1e-12)


def test_bigram_sizes_and_symbols_follow_destination_states():
    graph = DenominatorGraph.from_ngram(LabelNGram.zeros(11, 2))
    k = 10
    assert graph.n_states == 2 * k + 1
    # blank(h): 1 + K arcs (K + 1 states); label(h): 1 + 1 + (K - 1) arcs (K states).
    assert graph.n_arcs == (k + 1) * (k + 1) + k * (k + 1)
    assert torch.equal(graph.symbol, graph.state_symbol[graph.dst])
    assert int(graph.state_symbol[graph.start]) == 0
    assert repr(graph) == "DenominatorGraph(n_symbols=11, order=2, n_states=21, n_arcs=231)"
    trigram = DenominatorGraph.from_ngram(LabelNGram.zeros(4, 3))
    assert trigram.n_states == 2 * (1 + 3 + 9) - 1


def test_repeated_label_needs_a_blank():
    lm = LabelNGram.fit([[1, 1], [1]], 3, 2)
    graph = DenominatorGraph.from_ngram(lm)
    # "1 1" (two frames) stays one label; "1 0 1" is two labels.
    one = lm.log_prob(Sequences(torch.tensor([[1]])))[0]
    two = lm.log_prob(Sequences(torch.tensor([[1, 1]])))[0]
    assert _walk(graph, (1, 1)) == pytest.approx(float(one), abs=1e-12)
    assert _walk(graph, (1, 0, 1)) == pytest.approx(float(two), abs=1e-12)


def test_incoming_arc_table_lists_every_arc_once():
    graph = DenominatorGraph.from_ngram(LabelNGram.fit([[1, 2, 3]], 4, 3))
    got = sorted((int(d), int(s), round(float(w), 12))
                 for d in range(graph.n_states)
                 for s, w in zip(graph.in_src[d].tolist(), graph.in_weight[d].tolist())
                 if w != float("-inf"))
    want = sorted((d, s, round(w, 12)) for s, d, w in zip(graph.src.tolist(), graph.dst.tolist(),
                                                         graph.weight.tolist()))
    assert got == want


def test_transition_matrix_dense_and_sparse_agree():
    import ebms.structured.den_graph as dg

    graph = DenominatorGraph.from_ngram(LabelNGram.fit([[1, 2, 3]], 4, 3))
    x = torch.rand(2, graph.n_states, dtype=torch.float64)
    dense = graph.transition_matrix(torch.float64, torch.device("cpu"))
    old = dg._DENSE_MAX
    try:
        dg._DENSE_MAX = 0
        sparse_graph = DenominatorGraph.from_ngram(graph.lm)
        for tr in (False, True):
            m = sparse_graph.transition_matrix(torch.float64, torch.device("cpu"), transpose=tr)
            assert m.layout == torch.sparse_csr
            want = x @ (dense.t() if tr else dense)
            torch.testing.assert_close((m @ x.t()).t(), want)
    finally:
        dg._DENSE_MAX = old


def test_from_ngram_rejects_non_lm():
    with pytest.raises(TypeError, match="lm: expected a LabelNGram"):
        DenominatorGraph.from_ngram("bigram")
