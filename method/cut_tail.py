"""The cut sampling tail (sampling.tail: cut): top-k / top-p and the draw over the top CUT tokens of
each row instead of a sort of the whole 151,936-entry row, with the full sort as the fallback for a
row whose nucleus the cut does not hold. Both paths compute one definition, so they give the same
tokens (tests/test_cut_tail.py, on random logits with ties, boundary tokens and fallback rows):

  p     = softmax(x) over the whole row, fp32, vocabulary order (x: tempered logits, top-k applied
          as decoding.filter_logits applies it): the same numbers whichever path follows;
  order = p descending, ties by token id ascending (a stable sort);
  keep  = the tokens whose mass_before (fp64 sum of p over the tokens ordered above) < top_p;
  draw  = over the kept tokens in vocabulary order with weights p (not renormalised: both draws
          are scale-free): decoding.keyed_draw's inverse CDF (fp64), or argmax p / q with q ~ Exp(1)
          drawn for the whole row from the generator (decoding.multinomial's generator calls).

The cut's (c+1)-th largest p (`border`) says whether the cut is exact: every token with p > border
is in the cut, in the same order as in the full sort, so a nucleus that ends at or before the
first cut token with p == border (and before the cut's end) is the full sort's; else, or with
top-p off when some token outside the cut has p > 0, the row takes the full sort.

This is not today's tail (decoding.filter_logits, the default sampling.tail: sort): that one
normalises p over the SORTED row in fp32 (a kernel-specific reduction order the cut never sees),
sums mass_before in fp32, and renormalises the kept probabilities before the draw, so a token
whose mass_before is within a rounding error of top_p, or a uniform within one of a boundary, can
fall the other way. Prefix sums: a CPU cumsum runs in order, so the cut's first c sums are the full
sort's; any order gives the same fp64 sums of nucleus probabilities while each is >= 2^-29 (a kept
token has p >= (1 - top_p) / V: top_p <= 0.999 at V = 151,936), adding zeros (dropped tokens) never
changes one.
"""

from __future__ import annotations

import torch

CUT = 1024  # candidates per row: a nucleus of top-p 0.95 rarely holds more in a trained model
FALLBACK_ROWS = 8  # cut_draw_static: rows per token redrawn through the full sort; more flags the token


def tail_probs(x: torch.Tensor, top_k: int) -> torch.Tensor:
    """p (b, V): the softmax of x (b, V) fp32 over the whole row with top-k applied (ties at the
    k-th value kept, as decoding.filter_logits)."""
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]  # (b, 1)
        x = x.masked_fill(x < kth, float("-inf"))
    return x.softmax(-1)


def in_order(vals: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidates (b, c) ordered by p descending, ties by token id ascending (torch.topk leaves
    the order of ties unspecified)."""
    idx, perm = idx.sort(-1)
    vals, perm2 = vals.gather(-1, perm).sort(dim=-1, descending=True, stable=True)
    return vals, idx.gather(-1, perm2)


def nucleus(vals: torch.Tensor, top_p: float) -> torch.Tensor:
    """keep (b, c) for candidates in order: mass_before (fp64, the sum of the ones above) < top_p."""
    if top_p >= 1.0:
        return torch.ones_like(vals, dtype=torch.bool)
    cum = vals.double().cumsum(-1)  # (b, c)
    before = torch.cat([torch.zeros_like(cum[:, :1]), cum[:, :-1]], -1)  # exclusive: no subtraction, no rounding
    return before < top_p


def by_vocab(idx: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidates (b, c) and their weights in vocabulary order (token id ascending)."""
    idx, perm = idx.sort(-1)
    return idx, w.gather(-1, perm)


def cut_candidates(
    p: torch.Tensor, top_p: float, cut: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(idx (b, c), w (b, c), exact (b,)): the top `cut` tokens of p (b, V) in vocabulary order, their
    draw weights (p where kept, else 0), and whether the row's nucleus is the full sort's. No host read."""
    b, V = p.shape
    c = min(cut or CUT, V - 1)
    vals, idx = torch.topk(p, c + 1, dim=-1, sorted=True)  # (b, c+1)
    border = vals[:, c]  # (b,) the (c+1)-th largest p
    vals, idx = in_order(vals[:, :c], idx[:, :c])
    keep = nucleus(vals, top_p)
    first_drop = keep.sum(-1)  # (b,) a nucleus is a prefix of the order
    exact = ((first_drop < c) & (first_drop <= (vals > border[:, None]).sum(-1))) | (border == 0)
    idx, w = by_vocab(idx, vals * keep)
    return idx, w, exact


def full_candidates(p: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(idx (b, V), w (b, V)): the same definition through a stable sort of the whole row."""
    vals, order = p.sort(dim=-1, descending=True, stable=True)  # (b, V): ties by token id
    w = torch.zeros_like(p).scatter(-1, order, vals * nucleus(vals, top_p))  # back in vocabulary order
    return torch.arange(p.shape[-1], device=p.device).expand_as(p), w


def draw(idx: torch.Tensor, w: torch.Tensor, u: torch.Tensor | None, q: torch.Tensor | None) -> torch.Tensor:
    """One token per row from candidates idx (b, c) in vocabulary order with weights w (b, c):
    keyed (u (b,) fp64 uniforms) by decoding.keyed_draw, else argmax w / q over the candidates, q
    (b, V) the row's Exp(1) draws (the first maximum wins, as argmax's does)."""
    from method.decoding import keyed_draw

    pos = keyed_draw(w, u) if u is not None else (w / q.gather(-1, idx)).argmax(-1)  # (b,)
    return idx.gather(-1, pos[:, None]).squeeze(-1)


def cut_draw(
    x: torch.Tensor,
    top_k: int,
    top_p: float,
    u: torch.Tensor | None = None,
    gen: torch.Generator | None = None,
    cut: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (b,), exact (b,)): the cut tail's draw from tempered logits x (b, V) fp32, the rows
    the cut does not hold redrawn through the full sort (one host read: whether any row needs it).
    u: each row's uniform (keyed); else gen draws the row's Exp(1) numbers, b x V of them, as
    decoding.multinomial draws them, whichever path a row takes."""
    p, q, tok, exact = cut_pass(x, top_k, top_p, u, gen, cut)
    if not bool(exact.all()):
        rows = (~exact).nonzero().squeeze(-1)
        tok[rows] = full_rows(p, rows, top_p, u, q)
    return tok, exact


def cut_pass(x: torch.Tensor, top_k: int, top_p: float, u, gen, cut: int | None):
    """(p (b, V), q (b, V) or None when keyed, the cut's tokens (b,), exact (b,)): what both fallbacks start from."""
    p = tail_probs(x, top_k)  # (b, V)
    q = None if u is not None else torch.empty_like(p).exponential_(1, generator=gen)
    idx, w, exact = cut_candidates(p, top_p, cut)
    return p, q, draw(idx, w, u, q), exact


def full_rows(p: torch.Tensor, rows: torch.Tensor, top_p: float, u, q) -> torch.Tensor:
    """The full sort's tokens for the rows `rows` (indices) of p."""
    fidx, fw = full_candidates(p[rows], top_p)
    return draw(fidx, fw, u[rows] if u is not None else None, q[rows] if q is not None else None)


def cut_draw_static(
    x: torch.Tensor,
    top_k: int,
    top_p: float,
    u: torch.Tensor | None = None,
    gen: torch.Generator | None = None,
    cut: int | None = None,
    spare: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (b,), over ()): cut_draw's tokens with no host read. The first `spare` rows (default
    FALLBACK_ROWS) that the cut does not hold are redrawn through the full sort, found on the device
    (torch.nonzero_static: a fixed shape); over is True when more rows needed it, and then the tokens
    of the rows beyond are the cut's, not cut_draw's: the caller must redraw the token with cut_draw."""
    p, q, tok, exact = cut_pass(x, top_k, top_p, u, gen, cut)
    b = p.shape[0]
    f = min(spare or FALLBACK_ROWS, b)
    need = ~exact  # (b,)
    rows = torch.nonzero_static(need, size=f, fill_value=0).squeeze(-1)  # (f,) the first f rows that need it
    full = full_rows(p, rows, top_p, u, q)  # (f,)
    slot = need.long().cumsum(0) - 1  # (b,) a row's place among the rows that need the full sort
    take = need & (slot < f)
    tok = torch.where(take, full.gather(0, slot.clamp(0, f - 1)), tok)
    return tok, need.sum() > f


def full_draw(
    x: torch.Tensor, top_k: int, top_p: float, u: torch.Tensor | None = None, gen: torch.Generator | None = None
) -> torch.Tensor:
    """The same draw with every row through the full sort: the reference the cut equals."""
    p = tail_probs(x, top_k)
    q = None if u is not None else torch.empty_like(p).exponential_(1, generator=gen)
    return draw(*full_candidates(p, top_p), u, q)
