"""Siamese GraphSAGE subgraph encoder for DMAR's structsim (SPEC §3 step 2).

- Encoder: 3 GraphSAGE layers in plain torch (mean aggregator,
  ``h' = ReLU(W_self h + W_neigh mean_{u ∈ N(v)} h_u)``, row L2-normalised), mean-pooled
  over the subgraph's nodes into a unit vector. The two Siamese branches share these weights;
  structsim(g, g') = cosine of the two embeddings.
- Subgraphs are the capped radius-1 ego networks of the knowledge graph
  (:mod:`hopgraph.engine.pipelines.dmar.knowledge_graph`) with the KG edges induced among their nodes.
- Node features (choice documented here; SPEC leaves them open): the mean of the
  embeddings of the passages that mention the entity, L2-normalised (zero for
  entities known only from an external edge list), so no extra encoder pass is needed.
- Pre-training: triplet loss ``max(0, D(a,p) − D(a,n) + m)`` with cosine distance
  ``D = 1 − cos``. Positive = the anchor with light node/edge drop (``light_drop``);
  negative = half of the batch a random other ego subgraph sharing no node with the
  anchor, half a heavy perturbation of the anchor (``heavy_drop`` of its nodes and
  edges dropped and the survivors' features replaced by random entities' features).
  Seeded (torch and numpy generators); Adam (torch's update, :mod:`.adam`). Defaults
  (:func:`pretrain`): batch 64, margin m = 0.3, lr 1e-3, ``light_drop`` 0.1,
  ``heavy_drop`` 0.7; 60 steps when DMAR's ``fit`` trains it (``gnn_steps``), 600 with
  ``hopgraph train-gnn``. Hidden and output width 64.

Every ego subgraph is encoded once at index time (:func:`encode_all`); a query then
costs only cosines between stored embeddings. When the knowledge graph grows (a live index's ``add``),
:func:`changed_subgraphs` finds the subgraphs whose encoder input changed and
:func:`encode_subgraphs` encodes only those.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from ....kernels.csr import CSR
from ....kernels.threads import torch_threads
from ...errors import InputError
from ...sparse import join, row_of_entries, take_rows
from .adam import Adam


class SAGELayer(nn.Module):
    """One GraphSAGE layer with the mean aggregator."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.self_lin = nn.Linear(d_in, d_out)
        self.neigh_lin = nn.Linear(d_in, d_out, bias=False)

    def forward(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """One mean-aggregation layer over the edges ``src`` → ``dst``: ReLU(W_self h + mean
        of W_neigh h over in-neighbours)."""
        # W · mean(h_u) = mean(W h_u): project first, then aggregate at the (smaller) output width
        msg = self.neigh_lin(h)
        agg = torch.zeros_like(msg).index_add_(0, dst, msg[src])
        deg = torch.bincount(dst, minlength=len(h)).to(h.dtype)
        agg = agg / deg.clamp_min(1.0)[:, None]
        return torch.relu(self.self_lin(h) + agg)


class SubgraphEncoder(nn.Module):
    """3-layer GraphSAGE + mean pooling → unit subgraph embeddings (shared Siamese weights)."""

    def __init__(self, d_in: int, hidden: int = 64, d_out: int = 64, layers: int = 3) -> None:
        super().__init__()
        dims = [d_in] + [hidden] * (layers - 1) + [d_out]
        self.layers = nn.ModuleList(SAGELayer(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, batch: "SubgraphBatch") -> torch.Tensor:
        """The unit embedding of each subgraph of ``batch`` (SPEC §3): the layers, each output
        L2-normalised, then the nodes pooled per subgraph and L2-normalised."""
        h, src, dst = batch.x, batch.src, batch.dst
        for layer in self.layers:
            h = nn.functional.normalize(layer(h, src, dst), dim=1)
        pooled = torch.zeros((batch.n_graphs, h.shape[1]), dtype=h.dtype).index_add_(0, batch.graph, h)
        return nn.functional.normalize(pooled, dim=1)


@dataclass
class SubgraphBatch:
    """A disjoint union of subgraphs: node features, directed edges (both ways), graph of each node."""

    x: torch.Tensor  # [n, d]
    src: torch.Tensor  # int64 [m]
    dst: torch.Tensor  # int64 [m]
    graph: torch.Tensor  # int64 [n]
    n_graphs: int


class EntityRows:
    """Features of some entities (``values[i]`` of entity ``ids[i]``, ids sorted) read as the rows of
    an [E, d] array (``F[nodes]``) by :func:`ego_batch` without perturbation; a row not held raises."""

    def __init__(self, ids: np.ndarray, values: np.ndarray, n_entities: int) -> None:
        self.ids, self.values, self.n = np.asarray(ids, np.int64), values, int(n_entities)
        self.shape = (self.n, values.shape[1])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, np.int64)
        at = np.minimum(np.searchsorted(self.ids, rows), max(len(self.ids) - 1, 0))
        if len(rows) and (not len(self.ids) or (self.ids[at] != rows).any()):
            raise IndexError("entity features: a row not computed was read")
        return self.values[at]


def entity_features(passage_entities: CSR, X: np.ndarray, entities: np.ndarray | None = None) -> "np.ndarray | EntityRows":
    """Mean embedding of the passages mentioning each entity, L2-normalised (float32 [E, d]). An X
    read by rows only (``rows_only``: its rows held elsewhere) is read at the passages that mention an
    entity (the same sums, in the same order). ``entities`` (sorted ids): those entities' rows only
    (an :class:`EntityRows`; each row's sum as in the whole array)."""
    PT = passage_entities.to_scipy().T.tocsr()
    if entities is not None:
        entities = np.asarray(entities, np.int64)
        sub = PT[entities]
        used = np.unique(sub.indices)
        F = np.asarray(sub[:, used] @ np.asarray(X[used], np.float32), np.float32) if len(used) else \
            np.zeros((len(entities), X.shape[1]), np.float32)
        norms = np.linalg.norm(F, axis=1, keepdims=True)
        return EntityRows(entities, np.divide(F, norms, out=np.zeros_like(F), where=norms > 0), PT.shape[0])
    if getattr(X, "rows_only", False):
        used = np.unique(PT.indices)
        F = np.asarray(PT[:, used] @ X[used], np.float32)
    else:
        F = np.asarray(PT @ np.asarray(X, np.float32), np.float32)
    norms = np.linalg.norm(F, axis=1, keepdims=True)
    return np.divide(F, norms, out=np.zeros_like(F), where=norms > 0)


def ego_batch(ego: CSR, adj: CSR, features: np.ndarray, centres: np.ndarray,
              node_drop: float = 0.0, edge_drop: float = 0.0, feature_swap: float = 0.0,
              rng: np.random.Generator | None = None) -> SubgraphBatch:
    """The ego subgraphs of ``centres`` as one disjoint-union batch (vectorised).

    Optional perturbations: drop non-centre nodes / edges with the given probabilities,
    replace surviving features by random entities' features with prob. ``feature_swap``.
    """
    centres = np.asarray(centres, np.int64)
    sub = take_rows(ego, centres)
    sizes = np.diff(sub.indptr)
    nodes = sub.indices.astype(np.int64)
    graph = np.repeat(np.arange(len(centres)), sizes)
    if node_drop > 0:
        keep = (rng.random(len(nodes)) >= node_drop) | (nodes == centres[graph])
        nodes, graph = nodes[keep], graph[keep]
        sizes = np.bincount(graph, minlength=len(centres))
    starts = np.zeros(len(centres) + 1, np.int64)
    starts[1:] = np.cumsum(sizes)
    # all ordered pairs within each subgraph, kept where the KG has the edge
    pair_counts = sizes * sizes
    g_of_pair = np.repeat(np.arange(len(centres)), pair_counts)
    k = np.arange(int(pair_counts.sum())) - np.repeat(np.cumsum(pair_counts) - pair_counts, pair_counts)
    s_loc = starts[g_of_pair] + k // sizes[g_of_pair]
    d_loc = starts[g_of_pair] + k % sizes[g_of_pair]
    E = adj.n_rows
    adj_keys = row_of_entries(adj.indptr) * E + adj.indices  # increasing: adj's rows hold sorted columns
    _, has = join(adj_keys, nodes[s_loc] * E + nodes[d_loc])
    s_loc, d_loc = s_loc[has], d_loc[has]
    if edge_drop > 0:
        keep = rng.random(len(s_loc)) >= edge_drop
        s_loc, d_loc = s_loc[keep], d_loc[keep]
    x = features[nodes]
    if feature_swap > 0:
        swap = rng.random(len(nodes)) < feature_swap
        x = x.copy()
        x[swap] = features[rng.integers(0, len(features), int(swap.sum()))]
    return SubgraphBatch(torch.from_numpy(np.ascontiguousarray(x, np.float32)), torch.from_numpy(s_loc),
                         torch.from_numpy(d_loc), torch.from_numpy(graph), len(centres))


#: torch intra-op threads of GNN training and encoding: the GNN works on many small tensors, on
#: which a thread pool's synchronisation costs more than it saves (``docs/decisions/dmar-gnn-single-thread.md``)
GNN_THREADS = 1


def triplet_loss(a: torch.Tensor, p: torch.Tensor, n: torch.Tensor, margin: float) -> torch.Tensor:
    """SPEC §3: mean of ``max(0, D(a,p) − D(a,n) + m)`` with cosine distance on unit vectors."""
    d_ap = 1 - (a * p).sum(1)
    d_an = 1 - (a * n).sum(1)
    return torch.relu(d_ap - d_an + margin).mean()


def shared_node(ego: CSR, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether the ego subgraphs of ``a[i]`` and ``b[i]`` share a node (bool [len(a)])."""
    A, B = take_rows(ego, a), take_rows(ego, b)
    E = np.int64(max(ego.n_cols, 1))
    rows_b = row_of_entries(B.indptr)
    hit = np.isin(rows_b * E + B.indices, row_of_entries(A.indptr) * E + A.indices)
    return np.bincount(rows_b[hit], minlength=len(a)) > 0


def disjoint_negatives(ego: CSR, anchors: np.ndarray, rng: np.random.Generator, tries: int = 4
                       ) -> np.ndarray:
    """Random entities whose ego subgraph shares no node with the anchor's (best effort in ``tries``)."""
    E = ego.n_rows
    neg = rng.integers(0, E, len(anchors))
    for _ in range(tries):
        overlap = shared_node(ego, anchors, neg)
        if not overlap.any():
            break
        neg[overlap] = rng.integers(0, E, int(overlap.sum()))
    return neg


def pretrain(encoder: SubgraphEncoder, ego: CSR, adj: CSR, features: np.ndarray,
             steps: int = 60, batch_size: int = 64, margin: float = 0.3, lr: float = 1e-3,
             light_drop: float = 0.1, heavy_drop: float = 0.7, seed: int = 0,
             progress: bool = False, log: Callable[[str], None] | None = None) -> list[float]:
    """Triplet pre-training (module docstring); returns the loss per step."""
    if steps < 0 or batch_size < 1:
        raise InputError(f"steps must be >= 0 and batch_size >= 1, got {steps}, {batch_size}")
    E = ego.n_rows
    losses: list[float] = []
    if E < 2 or steps == 0:
        return losses
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = Adam(encoder.parameters(), lr=lr)
    encoder.train()
    with torch_threads(GNN_THREADS):
        _pretrain_loop(encoder, ego, adj, features, opt, rng, losses, steps, batch_size, margin, light_drop,
                       heavy_drop, progress, log)
    encoder.eval()
    return losses


def _pretrain_loop(encoder, ego, adj, features, opt, rng, losses, steps, batch_size, margin, light_drop,
                   heavy_drop, progress, log) -> None:
    from tqdm.auto import tqdm

    E = ego.n_rows
    for step in tqdm(range(steps), desc="pre-train GNN (triplet)", disable=not progress, unit="step"):
        anchors = rng.integers(0, E, batch_size)
        half = batch_size // 2
        a = encoder(ego_batch(ego, adj, features, anchors))
        p = encoder(ego_batch(ego, adj, features, anchors, light_drop, light_drop, rng=rng))
        n_rand = encoder(ego_batch(ego, adj, features, disjoint_negatives(ego, anchors[:half], rng)))
        n_heavy = encoder(ego_batch(ego, adj, features, anchors[half:], heavy_drop, heavy_drop, 1.0, rng=rng))
        loss = triplet_loss(a, p, torch.cat([n_rand, n_heavy]), margin)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None and (step + 1) % max(steps // 10, 1) == 0:
            log(f"step {step + 1}/{steps}: triplet loss {np.mean(losses[-max(steps // 10, 1):]):.4f}")


def encode_all(encoder: SubgraphEncoder, ego: CSR, adj: CSR, features: np.ndarray,
               chunk: int = 4096, progress: bool = False) -> np.ndarray:
    """Embeddings (float32 [E, d_out], unit rows) of every entity's ego subgraph, in chunks."""
    return encode_subgraphs(encoder, ego, adj, features, np.arange(ego.n_rows), chunk, progress)


@torch.no_grad()
def encode_subgraphs(encoder: SubgraphEncoder, ego: CSR, adj: CSR, features: np.ndarray,
                     ids: np.ndarray, chunk: int = 4096, progress: bool = False) -> np.ndarray:
    """Embeddings (float32 [len(ids), d_out], unit rows) of the ego subgraphs of entities ``ids``,
    ``chunk`` subgraphs a batch."""
    from tqdm.auto import tqdm

    ids = np.asarray(ids, np.int64)
    encoder.eval()
    d_out = encoder.layers[-1].self_lin.out_features
    out = np.zeros((len(ids), d_out), np.float32)
    with torch_threads(GNN_THREADS):
        for s in tqdm(range(0, len(ids), chunk), desc="encode ego subgraphs", disable=not progress, unit="chunk"):
            out[s:s + chunk] = encoder(ego_batch(ego, adj, features, ids[s:s + chunk])).numpy()
    return out


def changed_subgraphs(old_ego: CSR, old_adj: CSR, old_passages: CSR, new_ego: CSR, new_adj: CSR, new_passages: CSR,
                      old_ids: np.ndarray, compared_ego: CSR | None = None) -> np.ndarray:
    """Entities of a grown knowledge graph whose ego subgraph input to the encoder differs from
    the old graph's (bool [E_new]); ``old_ids[e]`` is new entity e's id in the old graph, -1 if new.
    ``*_passages`` are the passage → entity links ``[N, E]`` the features are made of
    (:func:`entity_features`); the new corpus is the old one with passages appended.

    What the encoder reads of a subgraph is its node set (in id order; ``old_ids`` must be
    increasing where defined, as for a vocabulary that grows in sorted order), the features of
    those nodes and the KG edges among them (:func:`ego_batch`). A node's features are the mean
    of the embeddings of the passages linking it, and the old passages' embeddings do not change,
    so they change only when that set of passages does. An entity is marked when it is new, when
    its capped ego node set changed, when one of its nodes is new or linked by other passages, or
    when an edge appeared or vanished between two of its nodes. Vectorised: sorted key sets and
    sparse products, linear up to the sorts in the entries of the graphs.

    When only some rows can differ (old graphs read by rows, whose other rows are not read),
    ``old_ego`` / ``old_passages`` and ``compared_ego`` (the new ego graph) / ``new_passages`` hold
    just those rows (the others empty); ``new_ego`` stays whole."""
    E = new_ego.n_rows
    old_ids = np.asarray(old_ids, np.int64)
    known = np.flatnonzero(old_ids >= 0)
    if len(known) != old_ego.n_rows or (np.diff(old_ids[known]) <= 0).any():
        raise InputError("changed_subgraphs: every old entity needs one new id, in the same order")
    new_of_old = known  # old id i -> new id known[i]

    def keys(m: CSR, rows_of: np.ndarray | None = None, cols_of: np.ndarray | None = None) -> np.ndarray:
        rows = row_of_entries(m.indptr)
        cols = np.asarray(m.indices, np.int64)
        if rows_of is not None:
            rows = rows_of[rows]
        if cols_of is not None:
            cols = cols_of[cols]
        return np.sort(rows * E + cols)  # sorted already for a canonical CSR and increasing ids

    def diff(new: CSR, old: CSR, map_rows: bool) -> np.ndarray:
        return np.setxor1d(keys(new), keys(old, new_of_old if map_rows else None, new_of_old), assume_unique=True)

    changed = np.zeros(E, bool)
    changed[diff(new_ego if compared_ego is None else compared_ego, old_ego, True) // E] = True
    dirty = old_ids < 0  # a new entity is a new node of its own subgraph (and of the others holding it)
    dirty[diff(new_passages, old_passages, False) % E] = True
    changed[row_of_entries(new_ego.indptr)[dirty[new_ego.indices]]] = True  # a subgraph holding a dirty node
    edges = diff(new_adj, old_adj, True)
    if len(edges):
        holders = new_ego.to_scipy().T.tocsr()  # node -> entities whose subgraph holds it
        both = holders[edges // E].multiply(holders[edges % E])
        changed[both.indices] = True
    return changed


def encoder_arrays(encoder: SubgraphEncoder) -> dict[str, np.ndarray]:
    """The encoder weights as named float32 arrays (for :func:`hopgraph.engine.storage.save_arrays`)."""
    return {f"gnn.{k}": v.detach().numpy().astype(np.float32) for k, v in encoder.state_dict().items()}


def encoder_from_arrays(arrays: dict[str, np.ndarray]) -> SubgraphEncoder:
    """Rebuild an encoder from :func:`encoder_arrays`' output (shapes inferred)."""
    state = {k[4:]: torch.from_numpy(finite_weights(k, v)) for k, v in arrays.items() if k.startswith("gnn.")}
    n_layers = len({k.split(".")[1] for k in state})
    if n_layers == 0:
        raise InputError("no GNN weights found")
    d_in = state["layers.0.self_lin.weight"].shape[1]
    hidden = state["layers.0.self_lin.weight"].shape[0]
    d_out = state[f"layers.{n_layers - 1}.self_lin.weight"].shape[0]
    enc = SubgraphEncoder(d_in, hidden, d_out, n_layers)
    enc.load_state_dict(state)
    enc.eval()
    return enc


def finite_weights(name: str, array: np.ndarray) -> np.ndarray:
    """A stored float weight array as a writable copy; InputError naming it if not finite floats."""
    a = np.array(array)
    if a.dtype.kind != "f" or not np.isfinite(a).all():
        raise InputError(f"stored weights {name} must be finite floats")
    return a
