"""The cut sampling tail (method/cut_tail.py): the top-CUT pre-cut gives exactly the full sort's
nucleus and tokens on random logits (ties, a boundary token at top_p, rows that need the fallback,
top-k combined, both draws); the nucleus against a plain-Python reading of its definition; and
that it is not today's tail (decoding.filter_logits), which is why it is not the default."""

import pytest
import torch

from method import cut_tail, decoding

V = 3000


def logits(seed: int, rows: int = 48, scale: float = 3.0, step: float | None = None) -> torch.Tensor:
    """(rows, V) random logits; step: rounded to multiples of it (many ties)."""
    x = torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * scale
    x[: rows // 3] *= 4  # peaked rows: the cut holds their nucleus
    x[-rows // 3 :] /= 30  # flat rows: it does not
    return (x / step).round() * step if step else x


def both_draws(x, top_k, top_p, cut, seed):
    """(cut tokens, full tokens, exact) for the keyed draw and for the one-generator draw."""
    u = torch.rand(len(x), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out = []
    for keyed in (True, False):
        kw = {"u": u} if keyed else {}
        tok, exact = cut_tail.cut_draw(
            x, top_k, top_p, gen=None if keyed else torch.Generator().manual_seed(seed), cut=cut, **kw
        )
        ref = cut_tail.full_draw(x, top_k, top_p, gen=None if keyed else torch.Generator().manual_seed(seed), **kw)
        out.append((tok, ref, exact))
    return out


@pytest.mark.parametrize("top_k", [0, 40, 700])
@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.95, 1.0])
@pytest.mark.parametrize("step", [None, 0.5])
def test_the_cut_draws_the_full_sorts_tokens(top_k, top_p, step):
    if top_k == 0 and top_p == 1.0:
        pytest.skip("no filter: the tail is not used")
    exact_seen = set()
    for seed in range(4):
        x = logits(seed, step=step)
        for tok, ref, exact in both_draws(x, top_k, top_p, 64, seed + 100):
            assert torch.equal(tok, ref)
            exact_seen |= set(exact.tolist())
    assert (True in exact_seen) == (top_k != 700 or top_p < 1.0)  # 700 tokens with p > 0 never fit a cut of 64
    assert (False in exact_seen) == (top_k != 40 or step is not None)  # 40 always do, unless ties at the k-th pass 64


def test_the_cut_keeps_the_full_sorts_nucleus_with_ties_at_its_border():
    """Ties straddling the cut's border, and a nucleus that ends inside the tie: the row must fall
    back (topk keeps an arbitrary subset of tied tokens), and its kept set is the full sort's."""
    x = torch.zeros(3, 200)
    x[:, :5] = 4.0  # five strong tokens, then 195 tied ones
    p = cut_tail.tail_probs(x, 0)
    for top_p in (0.3, 0.99):
        idx, w, exact = cut_tail.cut_candidates(p, top_p, cut=16)
        fidx, fw = cut_tail.full_candidates(p, top_p)
        kept_full = [set(torch.nonzero(r).flatten().tolist()) for r in fw]
        if bool(exact.all()):
            assert [set(i[ww > 0].tolist()) for i, ww in zip(idx, w)] == kept_full
        else:
            assert top_p == 0.99  # the nucleus runs into the tie at the border
        assert kept_full[0] <= set(range(5)) if top_p == 0.3 else len(kept_full[0]) > 5


def test_a_token_whose_mass_before_is_exactly_top_p_is_dropped():
    vals = torch.tensor([[0.5, 0.25, 0.125, 0.125]])
    assert cut_tail.nucleus(vals, 0.75).tolist() == [[True, True, False, False]]
    assert cut_tail.nucleus(vals, 0.75 + 2**-40).tolist() == [[True, True, True, False]]
    # at random logits: top_p set to a token's own fp64 mass_before, cut and full agree on both sides of it
    x = logits(7)
    p = cut_tail.tail_probs(x, 0)
    vals, _ = p.sort(dim=-1, descending=True, stable=True)
    before = vals.double().cumsum(-1) - vals.double()
    for j in (1, 3, 10):
        for row in range(0, len(x), 5):
            top_p = float(before[row, j])
            if not 0 < top_p < 1:
                continue
            _, w, exact = cut_tail.cut_candidates(p[row : row + 1], top_p, cut=64)
            _, fw = cut_tail.full_candidates(p[row : row + 1], top_p)
            assert int((fw > 0).sum()) == j  # the token at position j is dropped: its mass_before equals top_p
            if bool(exact):
                assert int((w > 0).sum()) == j


def test_the_nucleus_is_its_definition_read_in_plain_python():
    x = logits(3, rows=6, step=0.25)
    p = cut_tail.tail_probs(x, 0)
    _, w = cut_tail.full_candidates(p, 0.9)
    for r in range(len(x)):
        order = sorted(range(V), key=lambda v: (-p[r, v].item(), v))
        kept, mass = set(), 0.0
        for v in order:
            if mass >= 0.9:
                break
            kept.add(v)
            mass += p[r, v].item()  # Python floats are fp64: the same sums in the same order
        assert set(torch.nonzero(w[r]).flatten().tolist()) == {v for v in kept if p[r, v] > 0}


def test_the_keyed_draw_over_the_cut_takes_each_kept_token_with_its_probability():
    from scipy import stats

    x = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.06, 0.04]]))
    n = 40_000
    u = torch.rand(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tok, exact = cut_tail.cut_draw(x.expand(n, -1), 0, 0.85, u=u, cut=4)
    assert bool(
        exact.all()
    )  # 0.4 + 0.3 < 0.85 <= 0.9: the nucleus is the first three tokens, the fourth (dropped) in the cut
    counts = torch.bincount(tok, minlength=5)
    assert counts[3:].sum() == 0
    want = torch.tensor([0.4, 0.3, 0.2], dtype=torch.float64)
    assert stats.chisquare(counts[:3].numpy(), (want / want.sum() * n).numpy()).pvalue > 1e-3


def test_the_cut_tail_is_not_todays_tail():
    """filter_logits normalises over the sorted row in fp32 and renormalises the kept set before the
    draw: on random logits a few rows' nuclei differ from the cut tail's (why sampling.tail: sort,
    today's, stays the default, and the cut is a registered change before any run uses it)."""
    differ = 0
    for seed in range(10):
        x = logits(seed, rows=64)
        old = decoding.filter_logits(x, 0, 0.95) > float("-inf")
        _, w = cut_tail.full_candidates(cut_tail.tail_probs(x, 0), 0.95)
        differ += int((old != (w > 0)).any(-1).sum())
    assert 0 < differ < 20  # rare, and not never


@pytest.fixture(scope="module")
def fitted(fitted_dir, smoke_cfg):
    import countdown
    from helpers import CPU, cfg_for
    from method.model import load_model, pad_id, render_prompts, stop_ids

    model, tok = load_model(cfg_for(smoke_cfg), str(fitted_dir), CPU)
    prompts = render_prompts(tok, countdown.make_splits("arith-1x1", 10, 4, 0)[1], "bare")
    return model, prompts, stop_ids(model, tok), pad_id(tok)


@pytest.mark.parametrize("keyed", [True, False])
def test_a_decode_under_tail_cut_does_not_depend_on_the_cut_nor_on_the_decode(fitted, monkeypatch, keyed):
    """sample_eager and the static decode under tail cut, with a cut of 2 tokens (most rows fall back),
    of 16 and the default: the same tokens, so the fallback is exact inside a real decode too."""
    from method import sampler, static_decode
    from orchestration import config

    model, prompts, stops, pad = fitted
    s = config.SamplingCfg(temperature=1.3, top_p=0.9, top_k=0, max_new_tokens=12, tail="cut")
    seed = list(range(100, 100 + 3 * len(prompts))) if keyed else 5
    got, fell = [], []
    real = cut_tail.cut_draw
    for cut in (2, 16, None):

        def counting(*a, _cut=cut, **kw):
            tok, exact = real(*a, **{**kw, "cut": _cut})
            fell.append(int((~exact).sum()))
            return tok, exact

        monkeypatch.setattr(sampler, "cut_draw", counting)
        monkeypatch.setattr(static_decode, "cut_draw", counting)
        got.append(sampler.sample_eager(model, prompts, 3, s, seed, stops, pad).tokens)
        got.append(
            static_decode.sample_static(
                model, prompts, 3, s, seed, stops, pad, graphs=static_decode.EagerGraphs()
            ).tokens
        )
    assert all(g == got[0] for g in got)
    assert sum(fell) > 0 and min(fell) == 0  # both paths ran
    assert len({tuple(t) for t in got[0]}) > 1  # really sampled
