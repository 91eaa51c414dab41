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


@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("spare", [1, 4, 48])
def test_the_static_cut_draws_cut_draws_tokens_and_flags_what_it_cannot_hold(keyed, spare):
    """cut_draw_static (no host read) against cut_draw: the same tokens for every row it holds, `over`
    exactly when more rows than `spare` need the full sort, and then only the rows beyond differ."""
    over_seen = set()
    for seed in range(4):
        for step in (None, 0.5):
            x = logits(seed, step=step)
            u = torch.rand(len(x), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
            kw = {"u": u} if keyed else {}
            g1, g2 = (
                (None, None) if keyed else (torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed))
            )
            ref, exact = cut_tail.cut_draw(x, 0, 0.9, gen=g1, cut=64, **kw)
            tok, over = cut_tail.cut_draw_static(x, 0, 0.9, gen=g2, cut=64, spare=spare, **kw)
            need = (~exact).nonzero().squeeze(-1)
            assert bool(over) == (len(need) > spare)
            held = torch.ones(len(x), dtype=torch.bool)
            held[need[spare:]] = False
            assert torch.equal(tok[held], ref[held])
            over_seen.add(bool(over))
    assert over_seen == ({True} if spare < 16 else {False})  # the 16 flat rows of 48 always need the full sort


def test_the_static_cut_reads_nothing_from_the_device_and_cut_draw_does():
    from method.sampler import count_host_reads

    x = logits(0)
    u = torch.rand(len(x), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    reads, (tok, over) = count_host_reads(lambda: cut_tail.cut_draw_static(x, 0, 0.9, u=u, cut=64, spare=len(x)))
    ref_reads, (ref, exact) = count_host_reads(lambda: cut_tail.cut_draw(x, 0, 0.9, u=u, cut=64))
    assert reads == 0 and ref_reads >= 1
    assert not bool(exact.all()) and not bool(over) and torch.equal(tok, ref)  # the fallback ran, on the device


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
    """sample_eager (the host-read fallback) and the static decode with its steps captured (EagerGraphs: the
    device-side fallback of cut_tail.cut_draw_static) under tail cut, with a cut of 2 tokens (most rows fall
    back), of 16 and the default, and 1, 8 or 64 fallback rows a step holds (1: calls are redone): the same tokens,
    so the fallback is exact inside a real decode, whichever path took it."""
    from method import sampler, static_decode
    from orchestration import config

    model, prompts, stops, pad = fitted
    s = config.SamplingCfg(temperature=1.3, top_p=0.9, top_k=0, max_new_tokens=12, tail="cut")
    seed = list(range(100, 100 + 3 * len(prompts))) if keyed else 5
    real, got, fell, redone = cut_tail.cut_candidates, [], [], []

    def counting(*a, **kw):
        idx, w, exact = real(*a, **kw)
        fell[-1] += int((~exact).sum())
        return idx, w, exact

    monkeypatch.setattr(cut_tail, "cut_candidates", counting)
    for cut, spare in ((2, 1), (2, 64), (16, 8), (cut_tail.CUT, 8)):
        monkeypatch.setattr(cut_tail, "CUT", cut)
        monkeypatch.setattr(cut_tail, "FALLBACK_ROWS", spare)
        fell.append(0)
        got.append(sampler.sample_eager(model, prompts, 3, s, seed, stops, pad).tokens)
        before = static_decode.REDONE["calls"]
        graphs = static_decode.EagerGraphs()
        got.append(static_decode.sample_static(model, prompts, 3, s, seed, stops, pad, graphs=graphs).tokens)
        redone.append(static_decode.REDONE["calls"] - before)
        assert graphs.captures > 0  # the cut's steps are captured
    assert all(g == got[0] for g in got)
    assert min(fell) == 0 < fell[1]  # both paths ran
    assert redone == [1, 0, 0, 0]  # one fallback row a step is too few for a cut of 2; 64 hold every row
    assert len({tuple(t) for t in got[0]}) > 1  # really sampled


def test_a_captured_cut_step_reads_nothing_from_the_device(fitted):
    """One decode step of the static decode under tail cut, as captured (EagerGraphs replays the recorded
    step) and as run without graphs: the captured one makes no host read, the one without reads the host
    for its fallback (the profiler counts item, nonzero and equal)."""
    from method import static_decode
    from method.sampler import count_host_reads
    from orchestration import config

    model, prompts, stops, pad = fitted
    s = config.SamplingCfg(temperature=1.3, top_p=0.9, top_k=0, max_new_tokens=12, tail="cut")
    seeds = list(range(100, 100 + 3 * len(prompts)))
    reads = {}
    for name, graphs in (("captured", static_decode.EagerGraphs()), ("eager", None)):
        static_decode.sample_static(model, prompts, 3, s, seeds, stops, pad, graphs=graphs)
        dec = static_decode._DECODERS["by_rows"][3 * len(prompts)]
        step = next(st for k, st in dec.steps.items() if k[7] == id(graphs))  # the key names its capture backend
        assert (step.replay is not None) == (graphs is not None)
        with torch.inference_mode():
            reads[name] = count_host_reads(lambda: step(model))[0]
    assert reads == {"captured": 0, "eager": reads["eager"]} and reads["eager"] >= 1
