"""The static decode (sampling.decode: graph): sampler.sample's tokens drawn with static shapes, so
that a decode step can be captured as a CUDA graph once per process and replayed for every token
of every later call. The buffers (a Decoder) live for the process; the batch compacts to a few
fixed sizes (buckets); the sampling tail is fused (fused_draw, top-k and top-p included); a
capture that fails, or a first replay that differs from the eager step, leaves that step (one batch
size) eager with the same samples; the other sizes, and the next job's model, capture again.

tests/test_sampler.py holds the plain per-token loop with this schedule that it equals token for
token on a CPU, and checks the capture bookkeeping with EagerGraphs.
"""

from __future__ import annotations

import functools
import weakref

import torch

from method import cut_tail
from method.cut_tail import cut_draw, cut_draw_static
from method.decoding import (
    NAN_MESSAGE,
    NONE,
    Samples,
    collect,
    filter_logits,
    keyed_draw,
    kv_cache,
    left_pad,
    stream_uniforms,
)
from method.model import last_positions
from orchestration import config, memory

CHECK_EVERY = 8  # graph decode: tokens between the host's reads of how many rows have finished
MIN_BUCKET = 8  # graph decode: the smallest batch it compacts to (each batch size is one graph)
TAIL_CHUNK = memory.TAIL_CHUNK  # vocabulary entries per chunk of the fused sampling tail
CAPACITY_STEP = (
    memory.CAPACITY_STEP
)  # a decoder's positions, rounded up to this, so calls whose prompts differ a little share it
REDONE = {"calls": 0}  # calls redone without graphs: a cut token needed more fallback rows than a graph holds
GRAPHS = None  # the capture backend; None: CUDA graphs on a CUDA device, none on a CPU (tests and gpu_check --dry set EagerGraphs())


@functools.cache
def static_kv_class():
    """StaticKV, built on first use so that importing the sampler does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class StaticKV(DynamicLayer):
        """One layer's KV cache of fixed shape (rows, kv heads, capacity, head dim): a decoded
        token is written at the slot `slot` (a device tensor shared by every layer, advanced by the
        decoder), and attention reads the whole buffer, the unwritten slots masked out. Nothing
        about a step's shapes or addresses changes from token to token, or from call to call, so the
        step can be captured as a CUDA graph once. After a compaction the first `rows` rows are used (a view)."""

        def __init__(self, kfull: torch.Tensor, vfull: torch.Tensor, slot: torch.Tensor):
            super().__init__()
            self.kfull, self.vfull, self.rows, self.slot = kfull, vfull, kfull.shape[0], slot
            self.capacity, self.device, self.is_initialized = kfull.shape[2], kfull.device, True

        def load(self, grown, n: int) -> None:
            """The prompt's keys and values from a GrowingKV layer holding P prompts, each repeated n
            times; the unwritten slots zeroed, so that masked-out values are finite (0 x garbage could be NaN)."""
            L = grown.length
            for full, src in ((self.kfull, grown.kbuf), (self.vfull, grown.vbuf)):
                b, h, _, d = full.shape
                full.view(-1, n, h, self.capacity, d)[:, :, :, :L] = src[
                    :, None, :, :L
                ]  # (P, n, h, L, d) <- (P, 1, h, L, d)
                full[:, :, L:] = 0
            self.rows = self.kfull.shape[0]

        def update(self, key_states, value_states, *args, **kwargs):
            self.kfull[: self.rows].index_copy_(2, self.slot, key_states)
            self.vfull[: self.rows].index_copy_(2, self.slot, value_states)
            return self.kfull[: self.rows], self.vfull[: self.rows]

        def get_seq_length(self) -> int:
            return self.capacity

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            m = len(indices)
            self.kfull[:m] = self.kfull[indices]  # the right side is gathered into a new tensor first
            self.vfull[:m] = self.vfull[indices]
            self.rows = m

    return StaticKV


def _tempered(x: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logits divided by the temperature; at temperature 1 the logits themselves, with no division."""
    return x if temperature == 1.0 else x / temperature


def fused_draw(
    logits: torch.Tensor,
    s: config.SamplingCfg,
    gen: torch.Generator | None,
    entropy: bool,
    u: torch.Tensor | None = None,
    over: torch.Tensor | None = None,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The sampling tail in one pass over the vocabulary, a chunk at a time. logits: (b, V) in the
    model's dtype; s: the sampler (its temperature, top_k, top_p and tail). Returns the draw (b,), its
    log-probability under the untempered, unfiltered policy (b,), and (entropy=True) that policy's entropy
    (b,), as sample_eager reports them.

    The draw is the exponential race of sampler.multinomial: argmax_v p_v / q_v with q ~ Exp(1),
    here argmax_v (x_v / T - log q_v), the same ranking without the softmax (and without dividing
    by T = 1). q is drawn from `gen` one (b, chunk) block per chunk, in chunk order: when one chunk
    holds the whole vocabulary these are sampler.multinomial's generator calls and tokens; with
    more chunks they are other draws of the same independent Exp(1) numbers, so the same
    distribution. With top-k or top-p the race runs over filter_logits(x / T, top_k, top_p), the
    very tensor sample_eager softmaxes (the sort and cumulative sum need the whole row; their
    shapes are static). Greedy (T = 0, gen None): argmax_v x_v, unfiltered, as sample_eager.
    u (b,): each row's uniform for this token (one stream per sample): the draw is then
    decoding.keyed_draw over the whole row's probabilities, the very draw sample_eager makes, and
    `gen` is not read. tail cut (with a filter on): the draw is method/cut_tail.py's, the draws
    sample_eager makes under tail cut: cut_draw (its fallback reads the host once), or with `over` (a
    () bool buffer) cut_draw_static, which reads nothing and sets `over` where the token must be redrawn.
    The log-probability and entropy come from an online log-sum-exp: m = max x, s = sum exp(x - m),
    ent_u = sum exp(x - m) x; log Z = m + log s, H = log Z - ent_u / s."""
    chunk, temperature, top_k, top_p = chunk or TAIL_CHUNK, s.temperature, s.top_k, s.top_p
    b, V = logits.shape
    dev = logits.device
    filtered = None
    cut = temperature > 0 and s.tail == "cut" and (top_k > 0 or top_p < 1.0)
    if cut:
        if over is None:
            tok = cut_draw(logits.float() / temperature, top_k, top_p, u=u, gen=gen)[0]  # (b,)
        else:
            tok, flag = cut_draw_static(logits.float() / temperature, top_k, top_p, u=u, gen=gen)
            over |= flag
    elif temperature > 0 and (top_k > 0 or top_p < 1.0):
        filtered = filter_logits(logits.float() / temperature, top_k, top_p)  # (b, V) fp32, -inf outside the kept set
    keyed = temperature > 0 and u is not None and not cut
    if keyed:
        tok = keyed_draw((filtered if filtered is not None else logits.float() / temperature).softmax(-1), u)  # (b,)
    m = torch.full((b,), float("-inf"), device=dev)
    s = torch.zeros(b, device=dev)
    ent_u = torch.zeros(b, device=dev)
    drawn = keyed or cut
    if not drawn:
        best, tok = torch.full((b,), float("-inf"), device=dev), torch.zeros(b, dtype=torch.long, device=dev)
        picked = torch.zeros(b, device=dev)  # the drawn token's logit
    for c in range(0, V, chunk):
        x = logits[:, c : c + chunk].float()  # (b, chunk)
        m_new = torch.maximum(m, x.max(-1).values)
        scale = torch.exp(m - m_new)  # rescales what was summed so far; exp(-inf) = 0 at the start
        e = torch.exp(x - m_new[:, None])
        s = s * scale + e.sum(-1)
        if entropy:
            ent_u = ent_u * scale + (e * x).sum(-1)
        m = m_new
        if drawn:
            continue
        if temperature > 0:
            q = torch.empty_like(x).exponential_(1, generator=gen)  # (b, chunk) this chunk's draws
            tempered = filtered[:, c : c + chunk] if filtered is not None else _tempered(x, temperature)
            score = tempered - q.log()
        else:
            score = x
        cbest, carg = score.max(-1)
        better = cbest > best  # the first maximum wins, as argmax's does
        best, tok = torch.where(better, cbest, best), torch.where(better, carg + c, tok)
        picked = torch.where(better, x.gather(-1, carg[:, None]).squeeze(-1), picked)
    if drawn:
        picked = logits.gather(-1, tok[:, None]).squeeze(-1).float()
    lse = m + s.log()
    return tok, picked - lse, (lse - ent_u / s) if entropy else None


def buckets(B: int) -> list[int]:
    """The batch sizes a graph decode of B rows compacts to: B, then halves down to MIN_BUCKET."""
    out = [B]
    while out[-1] // 2 >= MIN_BUCKET:
        out.append(out[-1] // 2)
    return out


class CudaGraphs:
    """CUDA graph capture for the static decode: one memory pool for every graph this process
    captures (the buckets of every decoder; they never replay at the same time), and a count of
    captures. fault: called inside the capture, after the step was recorded (gpu_check.py uses it to
    make a capture fail as a real one does)."""

    def __init__(self, fault=None):
        self.pool, self.captures, self.fault = None, 0, fault

    def capture(self, step, gen: torch.Generator | None):
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        g = torch.cuda.CUDAGraph()
        if gen is not None:
            g.register_generator_state(gen)  # replays draw on from the generator's state at replay time
        stream = torch.cuda.current_stream()
        try:
            with torch.cuda.graph(g, pool=self.pool):  # synchronizes and empties the allocator's cache: once per graph
                step()  # recorded, not run
                if self.fault is not None:
                    self.fault()
        except BaseException:
            torch.cuda.set_stream(stream)  # a capture_end that raised leaves the capture stream current
            raise
        self.captures += 1
        return g.replay


class EagerGraphs:
    """A stand-in for CudaGraphs on a CPU: capture records the step without running it and replay
    runs it, so the capture, self-check and fallback bookkeeping run without a GPU (tests, gpu_check
    --dry). fault: called at capture after the step ran, as if a capture had got that far before it
    raised (the generator and the buffers moved on)."""

    def __init__(self, fault=None):
        self.captures, self.fault = 0, fault

    def capture(self, step, gen: torch.Generator | None):
        if self.fault is not None:
            step()
            self.fault()
        self.captures += 1
        return step


@functools.cache
def _cuda_graphs() -> CudaGraphs:
    return CudaGraphs()


def graph_backend(device: torch.device):
    """How the static decode captures its steps: GRAPHS when set, else CUDA graphs on CUDA, else none."""
    if GRAPHS is not None:
        return GRAPHS
    return _cuda_graphs() if device.type == "cuda" else None


class Decoder:
    """The static decode's device buffers for `rows` rows and `capacity` positions, made once per
    process and model and reused by every call that fits, with the steps captured on them (a graph
    records the buffers' addresses, so it replays only on these buffers): the KV cache (StaticKV
    layers), the attention mask, positions, tokens, flags, outputs, and one random generator that
    each call reseeds (a graph replays from the state of the generator it registered)."""

    def __init__(self, grown_cache, rows: int, capacity: int, device: torch.device):
        from transformers.cache_utils import Cache

        layer = static_kv_class()
        slot = torch.zeros(1, dtype=torch.long, device=device)  # where the next token's keys and values go
        kv = []
        for g in grown_cache.layers:
            h, d = g.kbuf.shape[1], g.kbuf.shape[3]
            kv.append(
                layer(
                    g.kbuf.new_zeros(rows, h, capacity, d), g.vbuf.new_zeros(rows, h, capacity, g.vbuf.shape[3]), slot
                )
            )
        self.rows, self.capacity, self.device = rows, capacity, device
        self.st = {
            "cache": Cache(layers=kv),
            "slot": slot,
            "gen": torch.Generator(device=device),
            "mask": torch.zeros((rows, 1, 1, capacity), dtype=torch.bool, device=device),  # True = attend
            "pos": torch.zeros((rows, 1), dtype=torch.long, device=device),
            "tok": torch.zeros(rows, dtype=torch.long, device=device),
            "alive": torch.zeros(rows, dtype=torch.long, device=device),
            "done": torch.zeros(rows, dtype=torch.bool, device=device),
            "t": torch.zeros(1, dtype=torch.long, device=device),
            "out": torch.full((rows, capacity), NONE, dtype=torch.long, device=device),
            "u": torch.zeros(
                (rows, capacity), dtype=torch.float64, device=device
            ),  # each sample's uniforms (keyed draws)
            "logp": torch.zeros((rows, capacity), device=device),
            "ent": torch.zeros(rows, device=device),
            "nan": torch.zeros((), dtype=torch.bool, device=device),
            "over": torch.zeros((), dtype=torch.bool, device=device),  # a cut token needed more fallback rows
        }
        self.stops: dict[tuple, torch.Tensor] = {}  # one device tensor per stop set: a graph reads its address
        self.steps: dict[tuple, StaticStep] = {}

    def start(
        self,
        grown_cache,
        n: int,
        mask: torch.Tensor,
        pos: torch.Tensor,
        seed: int | list[int],
        stops: list[int],
        T: int,
    ) -> None:
        """Reset every buffer for a call: the prompts' cache (P prompts x n samples), their padding
        mask (P, Lp) and positions (P, Lp), the generator seeded by `seed` (an int) or each sample's
        T uniforms (a list of seeds, one per sample), the stop set."""
        st, Lp = self.st, mask.shape[1]
        for layer, grown in zip(st["cache"].layers, grown_cache.layers):
            layer.load(grown, n)
        st["mask"].zero_()
        st["mask"][:, 0, 0, :Lp] = mask.repeat_interleave(n, 0).bool()
        st["pos"].copy_(pos[:, -1:].repeat_interleave(n, 0) + 1)
        st["slot"].fill_(Lp)
        st["alive"].copy_(torch.arange(self.rows, device=self.device))
        for k in ("tok", "done", "t", "logp", "ent", "nan", "over"):
            st[k].zero_()
        st["out"].fill_(NONE)
        if isinstance(seed, list):
            st["u"][: len(seed), :T] = stream_uniforms(seed, T, self.device)
        else:
            st["gen"].manual_seed(seed)
        key = tuple(stops)
        if key not in self.stops:
            self.stops[key] = torch.tensor(stops, device=self.device)
        st["stops"] = self.stops[key]

    def step(self, rows: int, s: config.SamplingCfg, entropy: bool, graphs, keyed: bool = False) -> "StaticStep":
        key = (rows, s.temperature, s.top_k, s.top_p, s.tail, entropy, id(self.st["stops"]), id(graphs), keyed)
        if key not in self.steps:
            self.steps[key] = StaticStep(self, rows, s, entropy, graphs, keyed)
        return self.steps[key]


_DECODERS: dict = {"model": None, "by_rows": {}}  # this process's decoders, for one model at a time


def model_state(model) -> tuple:
    """What a captured step depends on besides its buffers: the model, where each of its weights
    lives (lora_folded puts new ones in place), and which LoRA layers are switched on."""
    from method.model import LoRALinear

    return (
        id(model),
        model.training,
        tuple(t.data_ptr() for t in model.parameters()),
        tuple(t.data_ptr() for t in model.buffers()),
        tuple(m.enabled for m in model.modules() if isinstance(m, LoRALinear)),
    )


def decoder_for(model, grown_cache, rows: int, positions: int, device: torch.device) -> Decoder:
    """This process's decoder for `rows` rows with at least `positions` positions: the one made
    before if it fits and the model is as it was, else a new one (capacity rounded up to
    CAPACITY_STEP). A changed model drops every decoder and its graphs."""
    state = model_state(model)
    if _DECODERS["model"] != state:
        reset_decoders()
        _DECODERS["model"] = state
        weakref.finalize(model, _forget, state)  # a model freed frees its decoders
    dec = _DECODERS["by_rows"].get(rows)
    if dec is None or dec.capacity < positions or dec.device != device:
        dec = _DECODERS["by_rows"][rows] = Decoder(
            grown_cache, rows, -(-positions // CAPACITY_STEP) * CAPACITY_STEP, device
        )
    return dec


def reset_decoders() -> None:
    """Drop this process's decoders (their buffers and graphs)."""
    _DECODERS["model"], _DECODERS["by_rows"] = None, {}


def _forget(state: tuple) -> None:
    if _DECODERS["model"] == state:
        reset_decoders()


class StaticStep:
    """One decode step of a Decoder at a fixed batch size `rows`: read each row's last token, run
    the model on it with the static cache, draw the next token with the fused tail, record it.
    Every input is a buffer the step reads in place, so with a capture backend (graphs) it is
    captured after its first run, once per process, and replayed from then on. The first replay is
    checked against the eager step from the same state (tokens equal). A capture that raises is
    undone (the buffers and the generator's state as before it, the generator a fresh object, in
    case the failed capture left the registered one in capture state), and a replay that differs
    is redone eagerly; either way this step (its shape and settings) runs eagerly from then on, with
    one line on stderr; the other steps still capture, and a new model (the next job) makes new
    steps that try again."""

    graphs_off: str | None = None  # the last reason a step of this process gave graphs up (for reports)

    def __init__(self, dec: Decoder, rows: int, s: config.SamplingCfg, entropy: bool, graphs, keyed: bool = False):
        self.dec, self.rows, self.s, self.entropy, self.graphs = dec, rows, s, entropy, graphs
        self.keyed = keyed and s.temperature > 0  # draw from each sample's uniforms (st["u"]), not the generator
        self.replay, self.checked, self.off = None, False, None  # off: why this step gave graphs up

    def generator(self) -> torch.Generator | None:
        """The generator this step draws from (and a capture registers): none when greedy or keyed."""
        return self.dec.st["gen"] if self.s.temperature > 0 and not self.keyed else None

    def eager(self, model) -> None:
        st, r, s = self.dec.st, self.rows, self.s
        st["mask"][:r].index_fill_(-1, st["slot"], True)  # the slot this token is written to
        logits = model(
            input_ids=st["tok"][:r, None],
            attention_mask=st["mask"][:r],
            position_ids=st["pos"][:r],
            cache=st["cache"],
            use_cache=True,
        ).logits[:, -1]  # (r, V)
        u = st["u"][st["alive"][:r], st["t"].expand(r)] if self.keyed else None  # (r,) this token's uniform per row
        over = st["over"] if self.graphs is not None else None  # a graph holds no host read: the cut's static fallback
        record(st, r, *fused_draw(logits, s, self.generator(), self.entropy, u=u, over=over))
        st["pos"][:r] += 1
        st["slot"] += 1

    def __call__(self, model) -> None:
        if self.graphs is None or self.off is not None:
            return self.eager(model)
        if self.replay is None:
            self.eager(model)  # this token, and the capture's warm-up
            before = self.snapshot()
            try:
                self.replay = self.graphs.capture(lambda: self.eager(model), self.generator())
            except Exception as e:
                self.restore(before, fresh_generator=True)
                for other in (
                    self.dec.steps.values()
                ):  # graphs that registered the old generator would draw from it: capture anew
                    if other is not self and other.replay is not None and other.generator() is not None:
                        other.replay, other.checked = None, False
                self.give_up(f"capture failed ({(str(e).strip().splitlines() or [type(e).__name__])[0][:120]})")
            return None
        if self.checked:
            return self.replay()
        before = self.snapshot()
        self.eager(model)
        want = self.dec.st["tok"][: self.rows].clone()
        self.restore(before)
        self.replay()
        if torch.equal(self.dec.st["tok"][: self.rows], want):
            self.checked = True
        else:
            self.restore(before)
            self.eager(model)
            self.give_up("its first replay drew other tokens than the eager step")
        return None

    SMALL = (
        "pos",
        "slot",
        "t",
        "tok",
        "done",
        "ent",
        "nan",
        "over",
    )  # what a step changes other than by idempotent writes

    def snapshot(self) -> dict:
        return {**{k: self.dec.st[k].clone() for k in self.SMALL}, "gen": self.dec.st["gen"].get_state()}

    def restore(self, snap: dict, fresh_generator: bool = False) -> None:
        st = self.dec.st
        for k in self.SMALL:
            st[k].copy_(snap[k])
        if fresh_generator:
            st["gen"] = torch.Generator(device=self.dec.device)
        st["gen"].set_state(snap["gen"])

    def give_up(self, why: str) -> None:
        import sys

        self.replay, self.off = None, why
        StaticStep.graphs_off = why
        print(
            f"sampler: CUDA graphs off for the {self.rows}-row step, the static decode runs it eagerly (other shapes, "
            f"and the next job, capture again): {why}",
            file=sys.stderr,
            flush=True,
        )


def record(st: dict, r: int, tok: torch.Tensor, logp: torch.Tensor, ent: torch.Tensor | None) -> None:
    """Write a step's draws into the decode buffers: rows that finished earlier record nothing."""
    done, alive = st["done"][:r], st["alive"][:r]
    cols = st["t"].expand(r)
    st["out"].index_put_((alive, cols), tok.masked_fill(done, NONE))
    st["logp"].index_put_((alive, cols), logp.masked_fill(done, 0.0))
    if ent is not None:
        st["ent"].index_add_(0, alive, ent * ~done)
    st["nan"] |= logp.isnan().any()
    st["done"][:r] = done | (tok[:, None] == st["stops"]).any(-1)
    st["tok"][:r] = tok
    st["t"] += 1


@torch.inference_mode()
def sample_static(
    model,
    prompts: list[list[int]],
    n: int,
    s: config.SamplingCfg,
    seed: int | list[int],
    stops: list[int],
    pad: int,
    entropy: bool = False,
    graphs=None,
) -> Samples:
    """sample() with static shapes (sampling.decode: graph): the same distribution as sample_eager,
    other draws from one generator (seed an int); with one seed per sample (a list), the same keyed
    draws as sample_eager, so the same tokens wherever the two decodes' logits agree. The KV cache
    and attention mask have a fixed capacity and are written in place at a device-side slot;
    positions, tokens and flags are device buffers; all of them belong to a
    Decoder kept for the process, so later calls reuse its buffers and captured steps. The batch
    keeps a fixed size, finished rows staying in it (their draws thrown away) until a check every
    CHECK_EVERY tokens compacts it to the smallest of a few fixed sizes (buckets) that holds every
    unfinished row; the tail is fused_draw, top-k and top-p included. graphs: a capture backend
    (CudaGraphs, EagerGraphs) or None (every step eager); tests/test_sampler.py holds the plain
    per-token loop with this schedule that they equal token for token. Under tail cut a captured step
    takes the cut's fallback on the device for up to cut_tail.FALLBACK_ROWS rows a token; a call that
    needed more is redone with graphs None (the host-read fallback), the same tokens (REDONE counts them)."""
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad)  # (P, Lp)
    ids, mask = ids.to(device), mask.to(device)
    P, Lp = ids.shape
    T, B = s.max_new_tokens, P * n
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (P, Lp): positions count real tokens only
    grown = kv_cache(model, Lp)  # the prompt, as sample_eager runs it (transformers builds its mask)
    logits = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        cache=grown,
        use_cache=True,
        logits_to_keep=last_positions(Lp, 1, device),
    ).logits[:, -1]  # (P, V)
    dec = decoder_for(model, grown, B, Lp + T, device)
    dec.start(grown, n, mask, pos, seed, stops, T)
    del grown
    st = dec.st
    keyed = isinstance(seed, list) and s.temperature > 0
    gen, u = st["gen"] if s.temperature > 0 and not keyed else None, st["u"][:B, 0] if keyed else None
    record(st, B, *fused_draw(logits.repeat_interleave(n, 0), s, gen, entropy, u=u))
    rows = B
    for t in range(1, T):
        if t % CHECK_EVERY == 0:
            left = int((~st["done"][:rows]).sum())  # the host read: every CHECK_EVERY tokens
            if left == 0:
                break
            fit = min(b for b in buckets(B) if b >= left)
            if fit < rows:
                compact(st, rows, fit)
                rows = fit
        dec.step(rows, s, entropy, graphs, keyed)(model)
    nan, over = torch.stack([st["nan"], st["over"]]).tolist()  # one host read
    if nan:
        raise RuntimeError(NAN_MESSAGE)
    if over:
        redo_note()
        return sample_static(model, prompts, n, s, seed, stops, pad, entropy, graphs=None)
    return collect(st["out"][:, :T], st["ent"] if entropy else None, st["logp"][:, :T] if entropy else None, stops)


def redo_note() -> None:
    """Count a call redone without graphs (a cut top-p token needed more fallback rows than a graph step
    holds), with one line on stderr the first time in a process."""
    REDONE["calls"] += 1
    if REDONE["calls"] == 1:
        import sys

        print(
            "sampler: a cut top-p token needed more fallback rows than a graph step holds "
            f"(cut_tail.FALLBACK_ROWS {cut_tail.FALLBACK_ROWS}): the call is redone without graphs, the same "
            "tokens (static_decode.REDONE counts the calls; this line once a process)",
            file=sys.stderr,
            flush=True,
        )


def compact(st: dict, rows: int, fit: int) -> None:
    """Move the unfinished rows (in order) to the front, then as many finished ones as fill `fit`."""
    keep = torch.argsort(st["done"][:rows].to(torch.uint8), stable=True)[:fit]
    st["cache"].batch_select_indices(keep)
    for k in ("mask", "pos", "tok", "alive", "done"):
        st[k][:fit] = st[k][:rows][keep]
