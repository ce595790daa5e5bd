"""Token Pooling: downsample the token set between the blocks of a timm ``VisionTransformer``.

Marin et al., "Token Pooling in Vision Transformers for Image Classification", WACV 2023 (arXiv 2110.03860),
one of the source papers; its equations are reconstructed in the shared ``spec.md`` §3.  Softmax attention
low-pass filters the tokens, so a block's outputs are redundant; pooling them lets the fully connected layers
(>80% of a ViT's compute) run on fewer tokens.  Given the non-prefix tokens ``F`` (CLS and register tokens
are always kept and never clustered) a pooling layer picks ``K`` tokens ``F^`` minimising ``Σ_i w_i · min_j ||f_i - f^_j||²``:

* ``kmeans`` / ``weighted-kmeans`` -- unconstrained ``F^`` (Lloyd iterations, centres = (weighted) means);
* ``kmedoids`` / ``weighted-kmedoids`` -- ``F^ ⊂ F`` (Voronoi iterations, centres = (weighted) medoids);
* baselines: ``random`` selection, ``importance`` sampling (probability ∝ significance, without
  replacement), ``topk`` significance pruning (PoWER-BERT) and ``grid`` (average pooling on the 2-D grid).

Significance (PoWER-BERT, Goyal et al. 2020) is the attention a token receives from the preceding block,
averaged over heads and summed over queries, minus its self-attention.  Our reconstruction (spec §3, kept
configurable in :class:`TokenPoolConfig`): clustering starts from the top-K significant tokens, runs a few
iterations, and an empty cluster keeps its previous centre.

How it plugs in: :func:`apply_token_pooling` replaces ``vit.blocks`` by :class:`TokenPooledBlocks`, which
runs block ``i`` and then (if scheduled) pooling layer ``i``.  State-dict keys stay those of the plain ViT
(``blocks.<i>.*``; pooling layers have no parameters), so an unpooled checkpoint loads into a pooled model,
as in the paper's fine-tuning setup.  The attention probabilities are read from timm's own non-fused
attention path (``attn.fused_attn = False`` on the blocks that feed a significance-based pooling layer; a
temporary forward hook on ``attn.attn_drop`` sees the probabilities), so nothing of timm is re-implemented.

Gradients: the cluster assignment is discrete, like the wavelet front-end's sparsification, so each pooling
layer is a :class:`~robustbench_wave.frontend.FixedFrontEnd` whose backward rule follows ``grad_mode``:

* ``exact``   -- plain autograd: assignments / selected indices are constants (argmin, top-k and sampling
  have no gradient), the gradient flows through the selected or averaged token values (and, for
  ``weighted-kmeans``, through the significance weights, which enter the centre continuously);
* ``blocked`` -- the whole layer output (prefix tokens included) is detached: nothing upstream of the
  pooling step receives a gradient, the "no gradient through the discrete step" premise.  This also stops
  training gradients, so it only makes sense at attack time;
* ``bpda``    -- forward exact, backward through a smooth surrogate in which the last discrete step becomes
  a softmin at temperature ``bpda_temperature`` (relative to the mean squared distance): K-Means' last
  assignment becomes a soft assignment to the centres it was measured against, K-Medoids' last medoid
  choice becomes a softmin over the cluster's members.  ``random``, ``importance``, ``topk`` and ``grid``
  have no smooth surrogate (grid pooling is linear; the others select by a score that carries no gradient
  to the values), so for them ``bpda`` equals ``exact``.

Every pooling layer is of kind ``"assignment"`` (:data:`~robustbench_wave.models.frontend.ASSIGNMENT`), so
the scoped mode ``bpda-assignment`` (``grad_mode(model, "bpda", only="assignment")``) switches the assignment
alone while another fixed front-end of the model (a wavelet tokenizer's mask) stays exact: exact minus
``bpda-assignment`` is then the assignment's gradient gap and nothing else (claim 5).

Randomness: ``random``, ``importance`` and ``init = "random"`` draw fresh per-example noise from the global
RNG in training mode.  In eval mode they use a generator seeded by ``(seed, layer)`` and one noise vector
shared by every example, so the model is a deterministic function of each input, independent of batch
size and composition (otherwise it would be a randomised defence that needs EOT to evaluate).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from robustbench_wave.models.frontend import ASSIGNMENT, FixedFrontEnd, GradMode

log = logging.getLogger(__name__)


class PoolMethod(str, Enum):
    """How a pooling layer chooses its tokens (the ``method`` of a ``[tokenpool]`` table)."""

    KMEANS = "kmeans"
    WEIGHTED_KMEANS = "weighted-kmeans"
    KMEDOIDS = "kmedoids"
    WEIGHTED_KMEDOIDS = "weighted-kmedoids"
    RANDOM = "random"
    IMPORTANCE = "importance"
    TOPK = "topk"
    GRID = "grid"


class PoolInit(str, Enum):
    """How the clustering methods pick their initial centres."""

    TOPK_SIGNIFICANCE = "topk-significance"
    RANDOM = "random"


CLUSTER_METHODS = tuple(
    m.value
    for m in (
        PoolMethod.KMEANS,
        PoolMethod.WEIGHTED_KMEANS,
        PoolMethod.KMEDOIDS,
        PoolMethod.WEIGHTED_KMEDOIDS,
    )
)
METHODS = tuple(m.value for m in PoolMethod)
INITS = tuple(i.value for i in PoolInit)
_SIGNIFICANCE_METHODS = (
    PoolMethod.IMPORTANCE,
    PoolMethod.TOPK,
    PoolMethod.WEIGHTED_KMEANS,
    PoolMethod.WEIGHTED_KMEDOIDS,
)
_NOISE_METHODS = (PoolMethod.RANDOM, PoolMethod.IMPORTANCE)
_WEIGHTED_METHODS = (PoolMethod.WEIGHTED_KMEANS, PoolMethod.WEIGHTED_KMEDOIDS)
_KMEANS_METHODS = (PoolMethod.KMEANS, PoolMethod.WEIGHTED_KMEANS)
#: Pooling layer ``i`` of a model whose config has seed ``s`` draws its eval-mode noise from ``s * stride + i``.
LAYER_SEED_STRIDE = 1009


# ---------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class TokenPoolConfig:
    """The ``[tokenpool]`` table of a zoo spec.

    ``keep[i]`` (or ``round(keep_ratio[i] * N0)``, ``N0`` = the tokenizer's token count) is the number of
    non-prefix tokens leaving block ``i``; one entry per block, non-increasing.  An entry equal to the
    incoming count means "no pooling after this block" (e.g. the last block of a CLS-token classifier).
    """

    method: str = PoolMethod.WEIGHTED_KMEDOIDS.value
    keep: tuple[int, ...] | None = None
    keep_ratio: tuple[float, ...] | None = None
    iterations: int = 3
    init: str = PoolInit.TOPK_SIGNIFICANCE.value
    bpda_temperature: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"unknown token pooling method {self.method!r}; choose one of: {', '.join(METHODS)}"
            )
        if self.init not in INITS:
            raise ValueError(f"unknown tokenpool init {self.init!r}; choose one of: {', '.join(INITS)}")
        if (self.keep is None) == (self.keep_ratio is None):
            raise ValueError(
                "[tokenpool] needs exactly one of 'keep' (token counts) or 'keep_ratio' (fractions)"
            )
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < 0:
            raise ValueError(f"tokenpool iterations must be an integer >= 0, got {self.iterations!r}")
        if not self.bpda_temperature > 0:
            raise ValueError(f"tokenpool bpda_temperature must be > 0, got {self.bpda_temperature!r}")
        if self.keep is not None:
            if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.keep):
                raise ValueError(f"tokenpool keep must list positive integers, got {list(self.keep)}")
            _check_non_increasing("keep", self.keep)
        if self.keep_ratio is not None:
            if any(not 0 < float(r) <= 1 for r in self.keep_ratio):
                raise ValueError(
                    f"tokenpool keep_ratio entries must be in (0, 1], got {list(self.keep_ratio)}"
                )
            _check_non_increasing("keep_ratio", self.keep_ratio)

    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> TokenPoolConfig:
        """Parse a TOML table; unknown keys are an error (a typo would silently change the experiment)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"unknown [tokenpool] keys {unknown}; known keys: {sorted(known)}")
        values = dict(table)
        for key in ("keep", "keep_ratio"):
            if values.get(key) is not None:
                if isinstance(values[key], (str, bytes)) or not isinstance(values[key], Sequence):
                    raise ValueError(f"tokenpool {key} must be a list with one entry per block")
                values[key] = tuple(values[key])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-friendly form (lists, no ``None``) for provenance files."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v is not None}

    @property
    def needs_significance(self) -> bool:
        return _needs_significance(self.method, self.init)

    def schedule(self, num_tokens: int, depth: int) -> list[int]:
        """Kept non-prefix token count after each of the ``depth`` blocks, starting from ``num_tokens``."""
        entries = self.keep if self.keep is not None else self.keep_ratio
        if len(entries) != depth:
            raise ValueError(f"tokenpool schedule has {len(entries)} entries but the ViT has {depth} blocks")
        if self.keep is not None:
            counts = [int(k) for k in self.keep]
            if counts[0] > num_tokens:
                raise ValueError(
                    f"tokenpool keep[0] = {counts[0]} exceeds the tokenizer's {num_tokens} tokens "
                    "(schedule written for another image size?)"
                )
            return counts
        return [max(1, round(float(r) * num_tokens)) for r in self.keep_ratio]


def _check_non_increasing(name: str, values: Sequence[float]) -> None:
    if any(b > a for a, b in itertools.pairwise(values)):
        raise ValueError(
            f"tokenpool {name} must be non-increasing (tokens cannot be re-created), got {list(values)}"
        )


def _needs_significance(method: str, init: str) -> bool:
    if method in _SIGNIFICANCE_METHODS:
        return True
    return method in CLUSTER_METHODS and init == PoolInit.TOPK_SIGNIFICANCE


def _needs_noise(method: str, init: str) -> bool:
    return method in _NOISE_METHODS or (method in CLUSTER_METHODS and init == PoolInit.RANDOM)


# ------------------------------------------------------------------------------------ functional core


def token_significance(attn_probs: torch.Tensor, num_prefix_tokens: int) -> torch.Tensor:
    """PoWER-BERT significance of the non-prefix tokens: (B, heads, T, T) probabilities -> (B, T - P).

    Attention received, averaged over heads, summed over all queries (prefix queries included), minus the
    token's attention to itself (= attention received from the *other* tokens).
    """
    probs = attn_probs.mean(1)  # (B, T, T): rows = queries, columns = keys
    score = probs.sum(1) - probs.diagonal(dim1=1, dim2=2)  # (B, T)
    return score[:, num_prefix_tokens:]


def squared_distances(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """||x_i - c_k||² for (B, N, D) and (B, K, D) -> (B, N, K), via one batched matmul."""
    d = x.pow(2).sum(-1, keepdim=True) - 2 * (x @ c.transpose(1, 2)) + c.pow(2).sum(-1).unsqueeze(1)
    return d.clamp_min(0)


def clustering_objective(
    x: torch.Tensor, centers: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Reconstruction error Σ_i w_i min_j ||x_i - c_j||² per example (the paper's objective), shape (B,)."""
    d = (x.unsqueeze(2) - centers.unsqueeze(1)).pow(2).sum(-1).min(-1).values  # (B, N)
    return (d if weights is None else d * weights).sum(-1)


def gather_tokens(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[b, index[b, k]] for (B, N, D) and (B, K) -> (B, K, D)."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def topk_index(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest scores per row, sorted by position so token order is preserved."""
    return scores.topk(k, dim=-1).indices.sort(-1).values


@dataclass
class ClusterResult:
    """Output of :func:`kmeans` / :func:`kmedoids`.

    ``assignment`` and ``anchors`` describe the *last* iteration (the cluster of each token and the centres
    it was measured against); the BPDA surrogate relaxes that step.  Both are ``None`` for 0 iterations.
    """

    centers: torch.Tensor  # (B, K, D)
    index: torch.Tensor | None  # (B, K) medoid indices (K-Medoids only)
    assignment: torch.Tensor | None  # (B, N) cluster of each token in the last iteration
    anchors: torch.Tensor | None  # (B, K, D) centres the last assignment used (detached)


def kmeans(
    x: torch.Tensor, init_index: torch.Tensor, iterations: int, weights: torch.Tensor | None = None
) -> ClusterResult:
    """Batched (weighted) Lloyd iterations from the tokens at ``init_index``.

    Assignments are computed without gradient (argmin has none); each centre update is a differentiable
    weighted mean of its members, so autograd gives exactly the "assignments are constants" gradient.
    An empty cluster keeps its previous centre, so the objective never increases.
    """
    k = init_index.shape[1]
    w = torch.ones(x.shape[:2], dtype=x.dtype, device=x.device) if weights is None else weights.to(x.dtype)
    centers = gather_tokens(x, init_index)
    assignment = anchors = None
    for _ in range(iterations):
        with torch.no_grad():
            anchors = centers.detach()
            assignment = squared_distances(x.detach(), anchors).argmin(-1)  # (B, N)
        member = F.one_hot(assignment, k).to(x.dtype) * w.unsqueeze(-1)  # (B, N, K) weighted one-hot
        mass = member.sum(1).unsqueeze(-1)  # (B, K, 1)
        means = (member.transpose(1, 2) @ x) / mass.clamp_min(torch.finfo(x.dtype).tiny)
        centers = torch.where(mass > 0, means, centers)
    return ClusterResult(centers, None, assignment, anchors)


def kmedoids(
    x: torch.Tensor, init_index: torch.Tensor, iterations: int, weights: torch.Tensor | None = None
) -> ClusterResult:
    """Batched (weighted) Voronoi-iteration K-Medoids from the tokens at ``init_index``.

    Each iteration assigns tokens to their nearest medoid, then moves each medoid to the member minimising
    the cluster's (weighted) squared distance; the current medoid is always a candidate, so an empty
    cluster keeps it and the objective never increases.  The output tokens are actual input tokens.
    """
    b, n, _ = x.shape
    k = init_index.shape[1]
    w = torch.ones(b, n, dtype=x.dtype, device=x.device) if weights is None else weights.detach().to(x.dtype)
    medoids = init_index
    assignment = None
    with torch.no_grad():
        dist = squared_distances(x.detach(), x.detach()) if iterations else None  # (B, N, N)
        for _ in range(iterations):
            to_medoid = dist.gather(2, medoids.unsqueeze(1).expand(b, n, k))  # (B, N, K)
            assignment = to_medoid.argmin(-1)  # (B, N)
            one_hot = F.one_hot(assignment, k).to(x.dtype)
            cost = (one_hot * w.unsqueeze(-1)).transpose(1, 2) @ dist  # (B, K, N): cost of candidate m
            candidate = one_hot.transpose(1, 2).bool()  # (B, K, N) members of cluster k
            candidate.scatter_(2, medoids.unsqueeze(-1), True)
            medoids = cost.masked_fill(~candidate, math.inf).argmin(-1)  # (B, K)
    anchors = None if assignment is None else gather_tokens(x.detach(), medoids)
    return ClusterResult(gather_tokens(x, medoids), medoids, assignment, anchors)


def soft_kmeans_step(
    x: torch.Tensor, anchors: torch.Tensor, weights: torch.Tensor | None, temperature: float
) -> torch.Tensor:
    """BPDA surrogate of K-Means' last step: soft assignment to ``anchors``, then weighted means.

    The softmin temperature is ``temperature`` times the mean squared token-centre distance (per example),
    so it does not depend on the scale of the features.  As temperature -> 0 this is the exact step.
    """
    d = squared_distances(x, anchors)  # (B, N, K), differentiable in x
    scale = d.mean((1, 2), keepdim=True).detach().clamp_min(torch.finfo(x.dtype).tiny)
    soft = torch.softmax(-d / (temperature * scale), dim=-1)
    if weights is not None:
        soft = soft * weights.to(x.dtype).unsqueeze(-1)
    return (soft.transpose(1, 2) @ x) / soft.sum(1).unsqueeze(-1).clamp_min(torch.finfo(x.dtype).tiny)


def soft_medoid_step(
    x: torch.Tensor,
    assignment: torch.Tensor,
    medoids: torch.Tensor,
    weights: torch.Tensor | None,
    temperature: float,
) -> torch.Tensor:
    """BPDA surrogate of K-Medoids' last step: a softmin over each cluster's members of the mean
    (weighted) squared distance to the cluster, returning the softmin-weighted average of candidates."""
    k = medoids.shape[1]
    dist = squared_distances(x, x)  # (B, N, N)
    member = F.one_hot(assignment, k).to(x.dtype)
    if weights is not None:
        member = member * weights.detach().to(x.dtype).unsqueeze(-1)
    mass = member.sum(1).unsqueeze(-1).clamp_min(torch.finfo(x.dtype).tiny)  # (B, K, 1)
    cost = (member.transpose(1, 2) @ dist) / mass  # (B, K, N)
    candidate = F.one_hot(assignment, k).transpose(1, 2).bool()
    candidate = candidate.scatter(2, medoids.unsqueeze(-1), True)
    scale = dist.mean((1, 2), keepdim=True).detach().clamp_min(torch.finfo(x.dtype).tiny)
    select = torch.softmax((-cost / (temperature * scale)).masked_fill(~candidate, -math.inf), dim=-1)
    return select @ x


def grid_shape(grid: tuple[int, int], k: int) -> tuple[int, int]:
    """Output grid ``(h', w')`` with ``h' * w' == k`` closest in aspect ratio to ``grid``, or ValueError."""
    h, w = grid
    shapes = [(a, k // a) for a in range(1, k + 1) if k % a == 0 and a <= h and k // a <= w]
    if not shapes:
        raise ValueError(
            f"grid pooling cannot keep {k} tokens of a {h}x{w} grid: use a count h'*w' with "
            f"h' <= {h}, w' <= {w} "
            f"(e.g. {[a * a for a in range(1, min(h, w) + 1)]})"
        )
    return min(shapes, key=lambda s: (abs(math.log(s[0] / s[1]) - math.log(h / w)), s[0]))


def grid_pool(x: torch.Tensor, grid: tuple[int, int], k: int) -> torch.Tensor:
    """Average pooling of (B, h*w, D) tokens laid out row-major on ``grid`` down to ``k`` tokens."""
    b, n, d = x.shape
    h, w = grid
    if h * w != n:
        raise ValueError(f"grid pooling expects {h}x{w} = {h * w} tokens, got {n} (image size changed?)")
    out = F.adaptive_avg_pool2d(x.transpose(1, 2).reshape(b, d, h, w), grid_shape(grid, k))
    return out.flatten(2).transpose(1, 2)


def importance_index(significance: torch.Tensor, noise: torch.Tensor, k: int) -> torch.Tensor:
    """Sample ``k`` tokens without replacement with probability ∝ significance (Gumbel-top-k trick),
    with ``noise`` uniform in (0, 1) so the draw is reproducible from the caller's generator."""
    tiny = torch.finfo(torch.float32).tiny
    u = noise.to(torch.float32).clamp(tiny, 1 - 1e-7)
    keys = significance.detach().to(torch.float32).clamp_min(tiny).log() - (-u.log()).log()
    return topk_index(keys, k)


def pool_tokens(
    x: torch.Tensor,
    k: int,
    method: str,
    *,
    significance: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    iterations: int = 3,
    init: str = PoolInit.TOPK_SIGNIFICANCE.value,
    grid: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, ClusterResult | None]:
    """Pool (B, N, D) non-prefix tokens to (B, k, D) with ``method``; deterministic given its inputs.

    Returns the pooled tokens and, for the clustering methods, the :class:`ClusterResult` (for BPDA).
    ``significance`` (B, N) and ``noise`` (B or 1, N, uniform in [0, 1)) are required by the methods
    that use them (see :func:`_needs_significance` / :func:`_needs_noise`).
    """
    if method not in METHODS:
        raise ValueError(f"unknown token pooling method {method!r}; choose one of: {', '.join(METHODS)}")
    b, n, _ = x.shape
    if not 1 <= k <= n:
        raise ValueError(f"cannot keep {k} of {n} tokens")
    if _needs_significance(method, init) and significance is None:
        raise ValueError(f"token pooling method {method!r} (init {init!r}) needs the significance scores")
    if _needs_noise(method, init) and noise is None:
        raise ValueError(f"token pooling method {method!r} (init {init!r}) needs a noise tensor")
    if noise is not None:
        noise = noise.expand(b, n)
    if method == PoolMethod.GRID:
        if grid is None:
            raise ValueError("grid pooling needs the token grid (h, w)")
        return grid_pool(x, grid, k), None
    if method == PoolMethod.RANDOM:
        return gather_tokens(x, topk_index(noise, k)), None
    if method == PoolMethod.IMPORTANCE:
        return gather_tokens(x, importance_index(significance, noise, k)), None
    if method == PoolMethod.TOPK:
        return gather_tokens(x, topk_index(significance.detach(), k)), None
    init_index = topk_index(significance.detach() if init == PoolInit.TOPK_SIGNIFICANCE else noise, k)
    weights = significance if method in _WEIGHTED_METHODS else None
    cluster = kmeans if method in _KMEANS_METHODS else kmedoids
    result = cluster(x, init_index, iterations, weights)
    return result.centers, result


# ------------------------------------------------------------------------------------------- modules


class TokenPooling(FixedFrontEnd):
    """One pooling layer: keeps the ``num_prefix_tokens`` prefix tokens, pools the rest to ``keep``.

    ``forward(x, significance=None)`` takes the full (B, T, D) sequence (FixedFrontEnd's single-tensor
    ``forward`` does not fit: the significance comes from the preceding block) and honours ``grad_mode``
    as described in the module docstring.  A sequence already at or below ``keep`` passes unchanged.
    """

    kind = ASSIGNMENT  # what a scoped gradient mode (``bpda-assignment``) selects

    def __init__(
        self,
        method: str,
        keep: int,
        *,
        num_prefix_tokens: int,
        iterations: int = 3,
        init: str = PoolInit.TOPK_SIGNIFICANCE.value,
        bpda_temperature: float = 0.1,
        seed: int = 0,
        grid_size: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"unknown token pooling method {method!r}; choose one of: {', '.join(METHODS)}")
        if method == PoolMethod.GRID and grid_size is None:
            raise ValueError("grid pooling needs the input token grid (h, w)")
        self.method = method
        self.keep = int(keep)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.iterations = int(iterations)
        self.init = init
        self.bpda_temperature = float(bpda_temperature)
        self.seed = int(seed)
        self.grid_size = None if grid_size is None else (int(grid_size[0]), int(grid_size[1]))

    @property
    def needs_significance(self) -> bool:
        return _needs_significance(self.method, self.init)

    def is_active(self, num_tokens: int) -> bool:
        """Whether a (B, num_tokens, D) sequence is actually pooled (more non-prefix tokens than ``keep``)."""
        return num_tokens - self.num_prefix_tokens > self.keep

    def extra_repr(self) -> str:
        return (
            f"method={self.method!r}, keep={self.keep}, prefix={self.num_prefix_tokens}, "
            f"iterations={self.iterations}, init={self.init!r}"
        )

    def _noise(self, tokens: torch.Tensor) -> torch.Tensor | None:
        if not _needs_noise(self.method, self.init):
            return None
        b, n = tokens.shape[:2]
        if self.training:
            return torch.rand(b, n, device=tokens.device)
        generator = torch.Generator(device=tokens.device)
        generator.manual_seed(self.seed)
        return torch.rand(1, n, generator=generator, device=tokens.device)

    def _pool(
        self, x: torch.Tensor, significance: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, ClusterResult | None, torch.Tensor | None]:
        prefix, tokens = x[:, : self.num_prefix_tokens], x[:, self.num_prefix_tokens :]
        if significance is not None and significance.shape != tokens.shape[:2]:
            raise ValueError(
                f"significance has shape {tuple(significance.shape)}, expected {tuple(tokens.shape[:2])}"
            )
        pooled, cluster = pool_tokens(
            tokens,
            self.keep,
            self.method,
            significance=significance,
            noise=self._noise(tokens),
            iterations=self.iterations,
            init=self.init,
            grid=self.grid_size,
        )
        return prefix, pooled, cluster, tokens

    def _smooth(
        self, tokens: torch.Tensor, cluster: ClusterResult | None, significance: torch.Tensor | None
    ) -> torch.Tensor | None:
        if cluster is None or cluster.assignment is None:
            return None  # no smooth surrogate: bpda == exact
        weights = significance if self.method in _WEIGHTED_METHODS else None
        if cluster.index is None:
            return soft_kmeans_step(tokens, cluster.anchors, weights, self.bpda_temperature)
        return soft_medoid_step(tokens, cluster.assignment, cluster.index, weights, self.bpda_temperature)

    def transform(self, x: torch.Tensor, significance: torch.Tensor | None = None) -> torch.Tensor:
        """Exact pooling of the full (B, T, D) sequence."""
        if not self.is_active(x.shape[1]):
            return x
        prefix, pooled, _, _ = self._pool(x, significance)
        return torch.cat([prefix, pooled], dim=1)

    def smooth_transform(self, x: torch.Tensor, significance: torch.Tensor | None = None) -> torch.Tensor:
        """The BPDA surrogate's value (equal to :meth:`transform` where no surrogate applies)."""
        if not self.is_active(x.shape[1]):
            return x
        prefix, pooled, cluster, tokens = self._pool(x, significance)
        smooth = self._smooth(tokens, cluster, significance)
        return torch.cat([prefix, pooled if smooth is None else smooth], dim=1)

    def forward(self, x: torch.Tensor, significance: torch.Tensor | None = None) -> torch.Tensor:
        if not self.is_active(x.shape[1]):
            return x
        prefix, pooled, cluster, tokens = self._pool(x, significance)
        if self.grad_mode is GradMode.EXACT or not torch.is_grad_enabled():
            return torch.cat([prefix, pooled], dim=1)
        if self.grad_mode is GradMode.BLOCKED:
            return torch.cat([prefix, pooled], dim=1).detach()
        smooth = self._smooth(tokens, cluster, significance)
        if smooth is not None:  # BPDA: value of the exact pooling, gradient of the surrogate
            pooled = smooth + (pooled - smooth).detach()
        return torch.cat([prefix, pooled], dim=1)


@contextlib.contextmanager
def _capture_attention(attn: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the attention probabilities timm's non-fused path feeds to ``attn.attn_drop``."""
    captured: list[torch.Tensor] = []
    handle = attn.attn_drop.register_forward_hook(lambda _m, args, _out: captured.append(args[0]))
    try:
        yield captured
    finally:
        handle.remove()


class TokenPooledBlocks(nn.Module):
    """Drop-in replacement for ``VisionTransformer.blocks``: block ``i``, then pooling layer ``i`` if any.

    The blocks keep their names (``"0"`` .. ``"depth-1"``) so state-dict keys match the plain ViT; the
    pooling layers live in ``pools`` (no parameters).  Iterating the container is refused on purpose:
    timm's gradient checkpointing and ``forward_intermediates`` iterate ``vit.blocks`` and would silently
    skip the pooling; only :meth:`forward` pools.
    """

    def __init__(
        self, blocks: Sequence[nn.Module], pools: Mapping[int, TokenPooling], config: TokenPoolConfig
    ):
        super().__init__()
        for i, block in enumerate(blocks):
            self.add_module(str(i), block)
        self.depth = len(blocks)
        self.pools = nn.ModuleDict({str(i): pool for i, pool in sorted(pools.items())})
        self.config = config

    def __len__(self) -> int:
        return self.depth

    def __iter__(self) -> Iterator[nn.Module]:
        raise TypeError(
            "token-pooled blocks cannot be iterated (gradient checkpointing / forward_intermediates "
            "would skip the pooling); call vit.blocks(x), or vit.blocks.block(i) for one block"
        )

    def block(self, index: int) -> nn.Module:
        return self._modules[str(index)]

    def pool(self, index: int) -> TokenPooling | None:
        return getattr(self.pools, str(index), None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.depth):
            block, pool = self.block(i), self.pool(i)
            if pool is None or not pool.is_active(x.shape[1]):
                x = block(x)
                continue
            if not pool.needs_significance:
                x = pool(block(x))
                continue
            with _capture_attention(block.attn) as captured:
                x = block(x)
            if len(captured) != 1:
                raise RuntimeError(
                    f"block {i} exposed {len(captured)} attention maps (expected 1); was attn.fused_attn "
                    "switched back on after apply_token_pooling?"
                )
            x = pool(x, token_significance(captured[0], pool.num_prefix_tokens))
        return x


def _prepare_attention(block: nn.Module, index: int, method: str) -> None:
    attn = getattr(block, "attn", None)
    if (
        attn is None
        or not hasattr(attn, "fused_attn")
        or not isinstance(getattr(attn, "attn_drop", None), nn.Module)
    ):
        raise ValueError(
            f"token pooling method {method!r} needs the attention probabilities of block {index}, but its "
            f"attention ({type(attn).__name__}) is not a timm attention with 'fused_attn' and 'attn_drop'; "
            "use method 'random' or 'grid', or init = 'random' with an unweighted clustering method"
        )
    attn.fused_attn = False  # the explicit softmax path passes the probabilities through attn_drop


def _poolable(vit: VisionTransformer) -> tuple[nn.Sequential, int]:
    """The blocks and token count of a ViT that can take pooling layers; anything else is refused."""
    blocks = getattr(vit, "blocks", None)
    if isinstance(blocks, TokenPooledBlocks):
        raise ValueError("this ViT already has token pooling; build a fresh model to change the schedule")
    if not isinstance(blocks, nn.Sequential) or not hasattr(vit, "patch_embed"):
        raise ValueError(
            "apply_token_pooling expects a timm VisionTransformer (nn.Sequential 'blocks', 'patch_embed')"
        )
    if getattr(vit, "grad_checkpointing", False):
        raise ValueError("token pooling does not support timm gradient checkpointing; disable it first")
    num_tokens = getattr(vit.patch_embed, "num_patches", None)
    if not isinstance(num_tokens, int):
        raise ValueError(
            "the ViT's embed_layer must expose an integer 'num_patches' (timm's PatchEmbed contract)"
        )
    return blocks, num_tokens


def apply_token_pooling(vit: VisionTransformer, config: TokenPoolConfig) -> VisionTransformer:
    """Insert Token Pooling layers into a timm ``VisionTransformer`` in place and return it.

    Works with any ``embed_layer`` exposing ``num_patches`` (and ``grid_size`` for grid pooling).  Prefix
    tokens (CLS and registers, ``vit.num_prefix_tokens``) are kept and never clustered; without a CLS token
    (``global_pool='avg'``) every token is pooled.
    """
    blocks, num_tokens = _poolable(vit)
    prefix = int(getattr(vit, "num_prefix_tokens", 1))
    schedule = config.schedule(num_tokens, len(blocks))
    grid = getattr(vit.patch_embed, "grid_size", None)
    grid = (int(grid[0]), int(grid[1])) if grid is not None else None
    if config.method == PoolMethod.GRID and (grid is None or grid[0] * grid[1] != num_tokens):
        raise ValueError(
            f"grid pooling needs an embed_layer with a grid_size matching its {num_tokens} tokens"
        )
    pools: dict[int, TokenPooling] = {}
    n = num_tokens
    for i, k in enumerate(schedule):
        if k >= n:
            continue
        layer_grid = grid if config.method == PoolMethod.GRID else None
        if config.method == PoolMethod.GRID:
            grid = grid_shape(grid, k)
        if config.needs_significance:
            _prepare_attention(blocks[i], i, config.method)
        pools[i] = TokenPooling(
            config.method,
            k,
            num_prefix_tokens=prefix,
            iterations=config.iterations,
            init=config.init,
            bpda_temperature=config.bpda_temperature,
            seed=config.seed * LAYER_SEED_STRIDE + i,
            grid_size=layer_grid,
        )
        n = k
    vit.blocks = TokenPooledBlocks(list(blocks), pools, config)
    log.info(
        "token pooling (%s): non-prefix tokens after each block %s (from %d), pooling after blocks %s",
        config.method,
        schedule,
        num_tokens,
        sorted(pools),
    )
    return vit


def token_pooling_layers(model: nn.Module) -> list[TokenPooling]:
    """All pooling layers inside ``model`` (empty for an unpooled model)."""
    return [m for m in model.modules() if isinstance(m, TokenPooling)]
