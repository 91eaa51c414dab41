"""A base whose every response's probability is exact: per problem, a full tree of depth L over V tokens
(V^L responses), each node a softmax over its V children, each response correct or not. Policies are
distributions over the responses; any of them is read token by token (the subtree masses) and sampled at
any temperature and top-p exactly as method/decoding.py's filter does: a token is dropped when the mass
ranked before it reaches top_p. The within-correct measures (analysis/within_correct.py) and change 57's
primary are calibrated on it (bench/within_correct_calibration.py) and checked on it in the tests.
numpy only; every draw from a generator seeded by explicit arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp


@dataclass(frozen=True)
class TreeWorld:
    """N problems' trees: node logits (N, nodes, V) in breadth-first order, correct (N, V^L) per response."""

    V: int
    L: int
    logits: np.ndarray
    correct: np.ndarray

    @property
    def leaves(self) -> int:
        return self.V**self.L


def make_world(N: int, V: int, L: int, scale: float, rates: np.ndarray, seed: int) -> TreeWorld:
    """Node logits ~ Normal(0, scale); each response correct with its problem's probability rates[i]."""
    rng = np.random.default_rng([seed, 1])
    nodes = (V**L - 1) // (V - 1)
    logits = rng.normal(0.0, scale, size=(N, nodes, V))
    correct = rng.random((N, V**L)) < np.asarray(rates, float)[:, None]
    return TreeWorld(V, L, logits, correct)


def path_steps(V: int, L: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per depth d: (node index, token) on every response's path, each (V^L,), breadth-first node order."""
    leaf = np.arange(V**L)
    out, first = [], 0
    for d in range(L):
        prefix = leaf // V ** (L - d)  # the node's position among depth d's V^d nodes
        out.append((first + prefix, (leaf // V ** (L - 1 - d)) % V))
        first += V**d
    return out


def node_log_probs(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """(..., V) log-probabilities a sampler draws each child with: logits / T, then the top-p nucleus
    (a token is kept when the mass ranked strictly before it is below top_p), renormalised; -inf outside."""
    z = logits / temperature
    with np.errstate(invalid="ignore"):  # a node a policy never reaches (every child -inf) reads nan, never drawn
        logp = z - logsumexp(z, axis=-1, keepdims=True)
    if top_p >= 1.0:
        return logp
    order = np.argsort(-logp, axis=-1, kind="stable")
    sorted_p = np.exp(np.take_along_axis(logp, order, axis=-1))
    before = np.cumsum(sorted_p, axis=-1) - sorted_p
    keep = np.empty_like(before, dtype=bool)
    np.put_along_axis(keep, order, before < top_p, axis=-1)
    kept = np.where(keep, logp, -np.inf)
    return kept - logsumexp(kept, axis=-1, keepdims=True)


def response_log_probs(world: TreeWorld, node_logp: np.ndarray) -> np.ndarray:
    """(N, V^L) each response's log-probability from per-node child log-probabilities (N, nodes, V)."""
    return sum(node_logp[:, node, tok] for node, tok in path_steps(world.V, world.L))


def outside(world: TreeWorld, temperature: float, top_p: float) -> np.ndarray:
    """(N, V^L) responses with a token the base's sampler at (temperature, top_p) never draws."""
    return ~np.isfinite(response_log_probs(world, node_log_probs(world.logits, temperature, top_p)))


def as_node_logits(world: TreeWorld, logp: np.ndarray) -> np.ndarray:
    """(N, nodes, V) node logits of a policy given by its response log-probabilities (N, V^L): each child's
    log subtree mass (the token-level conditionals of that policy, up to a constant per node)."""
    N, V, L = logp.shape[0], world.V, world.L
    out = np.empty((N, (V**L - 1) // (V - 1), V))
    mass, first = logp, (V ** (L - 1) - 1) // (V - 1)
    for d in range(L - 1, -1, -1):  # from the deepest nodes up
        out[:, first : first + V**d, :] = mass.reshape(N, V**d, V)
        mass = logsumexp(mass.reshape(N, V**d, V), axis=-1)
        first -= V ** (d - 1) if d > 0 else 0
    return out


def sampler_log_probs(world: TreeWorld, logp: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """(N, V^L) a policy's response log-probabilities (T 1, untruncated) re-read at another sampler."""
    return response_log_probs(world, node_log_probs(as_node_logits(world, logp), temperature, top_p))


# ----------------------------------------------------------------------------- policies of the responses


def normalised(logp: np.ndarray) -> np.ndarray:
    return logp - logsumexp(logp, axis=-1, keepdims=True)


def base_log_probs(world: TreeWorld) -> np.ndarray:
    """(N, V^L) log pi_base at T 1."""
    return response_log_probs(world, node_log_probs(world.logits, 1.0, 1.0))


def reweighting(base_logp: np.ndarray, correct: np.ndarray, w) -> np.ndarray:
    """pi ∝ pi_base w^r: every correct response tilted by w (a scalar or one per problem (N,))."""
    return normalised(base_logp + np.log(np.asarray(w, float)).reshape(-1, 1) * correct)


def power(base_logp: np.ndarray, a: float) -> np.ndarray:
    """pi ∝ pi_base^a."""
    return normalised(a * base_logp)


def policy_gradient_flow(base_logp: np.ndarray, correct: np.ndarray, target: float, dt: float = 0.05) -> np.ndarray:
    """The exact softmax policy-gradient flow over responses, dz_y/dt = pi(y) (r(y) - J), from the base, run per
    problem until its pass@1 J reaches `target` (a problem with no correct response never moves): log pi at the
    end. Each problem's step is divided by its largest pi(y): the same path, at another speed."""
    z = base_logp.copy()
    r = correct.astype(float)
    for _ in range(100_000):
        p = np.exp(normalised(z))
        J = (p * r).sum(-1, keepdims=True)
        live = (J < target) & correct.any(-1, keepdims=True)
        if not live.any():
            break
        z = z + dt * np.where(live, p * (r - J) / np.maximum(p.max(-1, keepdims=True), 1e-300), 0.0)
    return normalised(z)


def draw(logp: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(N, n) response indices drawn from each row's distribution exp(logp) (N, V^L)."""
    cdf = np.cumsum(np.exp(logp), axis=-1)
    u = rng.random((logp.shape[0], n)) * cdf[:, -1:]
    return np.minimum(np.stack([np.searchsorted(c, x, side="right") for c, x in zip(cdf, u)]), logp.shape[1] - 1)


def draw_keyed(world: TreeWorld, logp: np.ndarray, u: np.ndarray) -> np.ndarray:
    """(N, n) responses drawn token by token from a policy (N, V^L) by the inverse CDF of each node's children in
    token order, with the given uniforms u (N, n, L): as the evaluations' keyed draw does, so policies drawn with
    the same u (the `matched` set's training seeds) give dependent responses."""
    node_logp = node_log_probs(as_node_logits(world, logp), 1.0, 1.0)  # (N, nodes, V)
    N, n, L = u.shape
    rows, prefix, first = np.arange(N)[:, None], np.zeros((N, n), dtype=np.int64), 0
    for d in range(L):
        cdf = np.cumsum(np.exp(node_logp[rows, first + prefix]), axis=-1)  # (N, n, V)
        token = np.minimum((u[..., d, None] >= cdf).sum(-1), world.V - 1)
        prefix, first = prefix * world.V + token, first + world.V**d
    return prefix
