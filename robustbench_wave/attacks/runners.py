"""Attack implementations behind one contract: ``runner(model, x, y, ids, eps, entry, ctx) -> RunOutput``.

Three backends implement the gradient attacks, so that each can check the others:

* ``builtin`` -- our PGD (L∞ and L2; Madry et al. 2018) with random start, restarts, the *best iterate per
  example* (torchattacks' PGD returns the last iterate) and per-example randomness: a point's random start is
  drawn from a generator seeded by ``(seed, attack name, example_id, restart)`` only, never by its batch or
  position. Also FGSM, the noise baselines and the transfer attack (PGD on a surrogate model).
* ``torchattacks`` -- FGSM, PGD, PGD-L2, APGD (Croce & Hein 2020) and Square (Andriushchenko et al. 2020).
* ``foolbox`` -- FGSM, L∞-PGD and L2-PGD through ``foolbox.PyTorchModel(model, bounds=(0, 1))``
  (needs eagerpy).

Library attacks draw from torch's global RNG; the evaluation calls them on fixed blocks of example ids inside
:func:`seeded` (forked RNG, restored afterwards), so their results do not depend on the batch size either.
Nothing here judges success: the evaluation audits every returned point and classifies it itself
(foolbox's rule: "we don't really know what the attack returns").
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks.suite import AttackEntry

# ----------------------------------------------------------------------------------------------- model state


@contextlib.contextmanager
def attack_mode(model: nn.Module | None) -> Iterator[nn.Module | None]:
    """Eval mode and frozen parameters for the duration of an attack; everything is restored even on errors.

    torchattacks flips ``model.train()/eval()`` itself and does not restore it when an attack raises; we save
    every module's ``training`` flag and every parameter's ``requires_grad`` before and put them back after.
    Freezing the parameters also saves the backward pass the work of computing weight gradients.
    """
    if model is None:
        yield None
        return
    modes = [(m, m.training) for m in model.modules()]
    grads = [(p, p.requires_grad) for p in model.parameters()]
    try:
        model.eval()
        for p, _ in grads:
            p.requires_grad_(False)
        yield model
    finally:
        for m, training in modes:
            m.training = training
        for p, req in grads:
            p.requires_grad_(req)


class GradSafe(nn.Module):
    """Adds ``0 * sum(x)`` to the logits so a blocked front-end gives a *zero* input gradient, not an error.

    With ``grad_mode(model, "blocked")`` the front-end output is detached, so the logits no longer depend on
    the input and ``torch.autograd.grad(loss, x)`` would raise; the seed's premise is "the attacker sees no
    gradient", which every attack library can handle as an all-zero gradient.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.training = False  # only a view for attacks (no recursion: model.eval() is attack_mode's job)
        # torchattacks finds the device through next(model.parameters()); give parameter-free models one.
        self._device_anchor = nn.Parameter(torch.zeros(0, device=model_device(model)), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.model(x)
        if torch.is_grad_enabled() and x.requires_grad:
            logits = logits + 0.0 * x.flatten(1).sum(1, keepdim=True)
        return logits


def model_device(model: nn.Module) -> torch.device:
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


def input_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d(sum of cross-entropy)/dx as an attack sees it (respects the model's current gradient mode)."""
    with attack_mode(model):
        xr = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            loss = F.cross_entropy(GradSafe(model)(xr), y, reduction="sum")
            (grad,) = torch.autograd.grad(loss, xr)
    return grad


def input_gradient_blocked(model: nn.Module, x: torch.Tensor) -> bool:
    """True when every autograd path from the input to the logits ends in a zero-gradient node.

    Under ``grad_mode(model, "blocked")`` a fixed front-end returns its value through a function whose
    backward is all zeros; if *every* path from the input crosses such a node (or none exists), the input
    gradient is zero for every input, so a gradient attack never leaves its starting point and one step gives
    exactly the result of many (checked in the tests). A model with a path around the front-end (a skip
    connection on raw pixels) returns False. The check reads the graph, not gradient values, so it cannot be
    fooled by a gradient that merely happens to vanish at one point.
    """
    with attack_mode(model), torch.enable_grad():
        xr = x[:2].detach().clone().requires_grad_(True)
        out = model(xr)
    if not out.requires_grad:
        return True
    stack, seen = [out.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ in ZERO_GRADIENT_NODES:
            continue
        if getattr(fn, "variable", None) is xr:
            return False
        stack.extend(f for f, _ in fn.next_functions)
    return True


ZERO_GRADIENT_NODES = {"_ZeroGradientBackward"}  # robustbench_wave.frontend's blocked-mode backward


# ------------------------------------------------------------------------------------------------ randomness


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any parts (stable across runs and machines, unlike ``hash()``)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | None = None) -> Iterator[None]:
    """Seed torch's global RNG for a library call, restoring the caller's RNG state afterwards."""
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed % (1 << 63))
        yield


def example_generators(seed: int, stream: str, ids: torch.Tensor, restart: int) -> list[torch.Generator]:
    """One CPU generator per example, seeded by (seed, stream, example_id, restart) only."""
    return [torch.Generator().manual_seed(derive_seed(seed, stream, int(i), restart)) for i in ids.tolist()]


def per_example(
    draw: Callable[[torch.Generator], torch.Tensor], gens: list[torch.Generator], device: torch.device
) -> torch.Tensor:
    return torch.stack([draw(g) for g in gens]).to(device)


def random_delta(
    norm: str, shape: tuple[int, ...], eps: float, gens: list[torch.Generator], device: torch.device
) -> torch.Tensor:
    """A random start inside the eps-ball: uniform in the L∞ cube, uniform in the L2 ball."""
    if norm == "Linf":
        return eps * (2 * per_example(lambda g: torch.rand(shape, generator=g), gens, device) - 1)
    dim = math.prod(shape)

    def l2(g: torch.Generator) -> torch.Tensor:
        d = torch.randn(shape, generator=g)
        radius = torch.rand((), generator=g) ** (1.0 / dim)
        return d / d.norm().clamp_min(1e-12) * radius

    return eps * per_example(l2, gens, device)


# --------------------------------------------------------------------------------------------- bookkeeping


@dataclass
class RunOutput:
    """A runner's result: candidate points (audited later) and, for iterative attacks, last-iterate flags."""

    x_adv: torch.Tensor
    correct_last: torch.Tensor | None = None  # (B,) bool: the final iterate of every restart was still right


@dataclass
class RunContext:
    """Evaluation-wide inputs a runner may need."""

    seed: int = 0
    surrogate: nn.Module | None = None  # already wrapped and in attack mode
    block_seed: int = 0  # seed for library attacks (set per id block by the evaluation)


class BestIterate:
    """Per-example best candidate: a misclassified point beats a correct one; then the higher loss wins."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x.detach().clone()
        self.loss = torch.full((x.shape[0],), -math.inf, device=x.device)
        self.wrong = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)

    def update(self, idx: torch.Tensor, x: torch.Tensor, loss: torch.Tensor, wrong: torch.Tensor) -> None:
        old_wrong, old_loss = self.wrong[idx], self.loss[idx]
        better = (wrong & ~old_wrong) | ((wrong == old_wrong) & (loss > old_loss))
        sel = idx[better]
        self.x[sel] = x[better].detach()
        self.loss[sel] = loss[better].detach()
        self.wrong[sel] = wrong[better]


def _loss_and_wrong(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(x)
    return F.cross_entropy(logits, y, reduction="none"), logits.argmax(1) != y


def _project(x_adv: torch.Tensor, x: torch.Tensor, eps: float, norm: str) -> torch.Tensor:
    delta = x_adv - x
    if norm == "Linf":
        delta = delta.clamp(-eps, eps)
    else:
        n = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
        delta = delta * (eps / n).clamp(max=1.0).view(-1, *[1] * (x.dim() - 1))
    return (x + delta).clamp(0.0, 1.0)


def _ascent_step(x_adv: torch.Tensor, grad: torch.Tensor, step: float, norm: str) -> torch.Tensor:
    if norm == "Linf":
        return x_adv + step * grad.sign()
    g = grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (grad.dim() - 1))
    return x_adv + step * grad / g


def pgd_core(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    *,
    eps: float,
    norm: str,
    steps: int,
    step_size: float,
    restarts: int = 1,
    random_start: bool = True,
    seed: int = 0,
    stream: str = "pgd",
    all_restarts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Projected gradient ascent on cross-entropy keeping the best iterate of every example.

    ``model`` must already be wrapped (:class:`GradSafe`) and in attack mode. Restarts after the first run
    only on examples not yet misclassified unless ``all_restarts``. Returns ``(x_best, correct_last,
    history)``: ``correct_last[i]`` is True when the final iterate of every restart of example i was still
    classified right (a False best with a True last is a success a last-iterate attack would have missed);
    ``history[t]`` is the mean loss after t+1 steps over every example and restart that ran.
    """
    if norm not in ("Linf", "L2"):
        raise ValueError(f"PGD norm must be 'Linf' or 'L2', got {norm!r}")
    x, y = x.detach(), y.detach()
    best = BestIterate(x)
    correct_last = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    hist_sum = torch.zeros(steps, dtype=torch.float64)
    hist_n = 0
    for r in range(restarts):
        if r == 0 or all_restarts:
            idx = torch.arange(x.shape[0], device=x.device)
        else:
            idx = (~best.wrong).nonzero().flatten()
        if idx.numel() == 0:
            break
        xa, ya = x[idx], y[idx]
        adv = xa.clone()
        if random_start and eps > 0:
            gens = example_generators(seed, stream, ids[idx.cpu()], r)
            adv = _project(xa + random_delta(norm, tuple(x.shape[1:]), eps, gens, x.device), xa, eps, norm)
        stalled = False
        for t in range(steps):
            adv.requires_grad_(True)
            with torch.enable_grad():
                loss, wrong = _loss_and_wrong(model, adv, ya)
                (grad,) = torch.autograd.grad(loss.sum(), adv)
            adv, loss = adv.detach(), loss.detach()
            best.update(idx, adv, loss, wrong)
            if t > 0:
                hist_sum[t - 1] += float(loss.sum())
            new = _project(_ascent_step(adv, grad, step_size, norm), xa, eps, norm)
            if torch.equal(new, adv):  # no iterate moved (e.g. zero gradient): every later one is this one
                hist_sum[t:] += float(loss.sum())
                stalled = True
                break
            adv = new
        if not stalled:
            with torch.no_grad():
                loss, wrong = _loss_and_wrong(model, adv, ya)
            best.update(idx, adv, loss, wrong)
            if steps > 0:
                hist_sum[steps - 1] += float(loss.sum())
        correct_last[idx] &= ~wrong
        hist_n += idx.numel()
    history = (hist_sum / max(hist_n, 1)).to(torch.float32)
    return best.x, correct_last, history


def pgd_with_history(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    norm: str,
    steps: int,
    step_size: float,
    restarts: int = 1,
    seed: int = 0,
    *,
    ids: torch.Tensor | None = None,
    random_start: bool = True,
    stream: str = "pgd",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Builtin PGD returning ``(x_adv_best, history)``: mean cross-entropy after each step (shape (steps,)).

    Every restart runs on every example, so the history averages over all ``len(x) * restarts`` runs. The
    gradient rule is whatever ``grad_mode(model, ...)`` the caller set. ``ids`` default to ``arange(len(x))``;
    pass the evaluation's example ids (and ``stream`` = the suite entry name) to reproduce its random starts.
    """
    ids = torch.arange(x.shape[0]) if ids is None else ids.cpu()
    with attack_mode(model):
        x_adv, _, history = pgd_core(
            GradSafe(model),
            x,
            y,
            ids,
            eps=eps,
            norm=norm,
            steps=steps,
            step_size=step_size,
            restarts=restarts,
            random_start=random_start,
            seed=seed,
            stream=stream,
            all_restarts=True,
        )
    return x_adv, history


# ------------------------------------------------------------------------------------------------- runners
Runner = Callable[
    [nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, float, AttackEntry, RunContext], RunOutput
]


def _step_size(entry: AttackEntry, eps: float) -> float:
    return entry.params["rel_step_size"] * eps


def _builtin_pgd(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    p = entry.params
    x_adv, correct_last, _ = pgd_core(
        model,
        x,
        y,
        ids,
        eps=eps,
        norm=entry.threat,
        steps=p["steps"],
        step_size=_step_size(entry, eps),
        restarts=p["restarts"],
        random_start=p["random_start"],
        seed=ctx.seed,
        stream=entry.name,
    )
    return RunOutput(x_adv, correct_last)


def _builtin_fgsm(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    xr = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        loss = F.cross_entropy(model(xr), y, reduction="sum")
        (grad,) = torch.autograd.grad(loss, xr)
    return RunOutput((x + eps * grad.sign()).clamp(0.0, 1.0).detach())


def _builtin_transfer(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    if ctx.surrogate is None:
        raise ValueError(
            f"attack {entry.name!r} (transfer) needs a surrogate model: pass surrogate=... / --surrogate"
        )
    p = entry.params
    x_adv, _, _ = pgd_core(
        ctx.surrogate,
        x,
        y,
        ids,
        eps=eps,
        norm=entry.threat,
        steps=p["steps"],
        step_size=_step_size(entry, eps),
        restarts=p["restarts"],
        random_start=p["random_start"],
        seed=ctx.seed,
        stream=entry.name,
    )
    return RunOutput(x_adv)


def noise_sample(distribution: str, x: torch.Tensor, eps: float, gens: list[torch.Generator]) -> torch.Tensor:
    """Random corruption at a matched budget, clipped to [0,1] (clipping never increases the norm).

    uniform: U(-eps, eps) per value (L∞); sign: ±eps per value (the L∞ cube's corners); gaussian: a Gaussian
    direction scaled to L2 norm eps; salt_pepper: floor(eps*H*W) pixel positions (all channels) set to 0 or 1.
    """
    shape = tuple(x.shape[1:])
    if distribution == "uniform":
        delta = eps * (2 * per_example(lambda g: torch.rand(shape, generator=g), gens, x.device) - 1)
    elif distribution == "sign":
        delta = eps * (
            2 * per_example(lambda g: (torch.rand(shape, generator=g) < 0.5).float(), gens, x.device) - 1
        )
    elif distribution == "gaussian":

        def gauss(g: torch.Generator) -> torch.Tensor:
            d = torch.randn(shape, generator=g)
            return d / d.norm().clamp_min(1e-12)

        delta = eps * per_example(gauss, gens, x.device)
    elif distribution == "salt_pepper":
        _, h, w = shape
        k = math.floor(eps * h * w + 1e-9)

        def mask_and_value(g: torch.Generator) -> torch.Tensor:
            pos = torch.randperm(h * w, generator=g)[:k]
            out = torch.full((2, h * w), 0.0)
            out[0, pos] = 1.0
            out[1] = (torch.rand(h * w, generator=g) < 0.5).float()
            return out.view(2, 1, h, w)

        mv = per_example(mask_and_value, gens, x.device)  # (B, 2, 1, H, W)
        mask, value = mv[:, 0], mv[:, 1]
        return torch.where(mask.bool().expand_as(x), value.expand_as(x), x)
    else:
        raise ValueError(f"unknown noise distribution {distribution!r}")
    return (x + delta).clamp(0.0, 1.0)


def _builtin_noise(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    best = BestIterate(x)
    idx = torch.arange(x.shape[0], device=x.device)
    for d in range(entry.params["draws"]):
        gens = example_generators(ctx.seed, entry.name, ids, d)
        x_new = noise_sample(entry.params["distribution"], x, eps, gens)
        with torch.no_grad():
            loss, wrong = _loss_and_wrong(model, x_new, y)
        best.update(idx, x_new, loss, wrong)
    return RunOutput(best.x)


def _restarts(entry: AttackEntry) -> int:
    return int(entry.params.get("restarts", 1))


def _keep_first_success(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    restarts: int,
    attack: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Restarts for libraries without them: rerun on points still classified right, keep the first success."""
    out = x.clone()
    todo = torch.arange(x.shape[0], device=x.device)
    for _ in range(restarts):
        if todo.numel() == 0:
            break
        adv = attack(x[todo], y[todo]).detach()
        with torch.no_grad():
            wrong = model(adv).argmax(1) != y[todo]
        out[todo] = adv
        todo = todo[~wrong]
    return out


def _ta_fgsm(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    import torchattacks

    return RunOutput(torchattacks.FGSM(model, eps=eps)(x, y).detach())


def _ta_pgd(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    import torchattacks

    p = entry.params
    cls = torchattacks.PGD if entry.threat == "Linf" else torchattacks.PGDL2
    atk = cls(model, eps=eps, alpha=_step_size(entry, eps), steps=p["steps"], random_start=p["random_start"])
    return RunOutput(_keep_first_success(model, x, y, _restarts(entry), atk))


def _ta_apgd(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    import torchattacks

    p = entry.params
    atk = torchattacks.APGD(
        model,
        norm=entry.threat,
        eps=eps,
        steps=p["steps"],
        n_restarts=p["restarts"],
        seed=ctx.block_seed,
        loss=p["loss"],
        rho=p["rho"],
    )
    return RunOutput(atk(x, y).detach())


def _ta_square(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    import torchattacks

    p = entry.params
    atk = torchattacks.Square(
        model,
        norm=entry.threat,
        eps=eps,
        n_queries=p["n_queries"],
        n_restarts=p["restarts"],
        p_init=p["p_init"],
        loss=p["loss"],
        seed=ctx.block_seed,
    )
    return RunOutput(atk(x, y).detach())


def _foolbox_model(model: nn.Module, device: torch.device) -> Any:
    import foolbox

    return foolbox.PyTorchModel(model, bounds=(0.0, 1.0), device=device)


def _fb_run(model: nn.Module, attack: Any, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    fmodel = _foolbox_model(model, x.device)
    _, clipped, _ = attack(fmodel, x, y, epsilons=eps)
    return clipped.detach()


def _fb_fgsm(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    import foolbox

    return RunOutput(_fb_run(model, foolbox.attacks.FGSM(), x, y, eps))


def _fb_pgd(model, x, y, ids, eps, entry, ctx) -> RunOutput:  # type: ignore[no-untyped-def]
    import foolbox

    p = entry.params
    cls = foolbox.attacks.LinfPGD if entry.threat == "Linf" else foolbox.attacks.L2PGD
    atk = cls(abs_stepsize=_step_size(entry, eps), steps=p["steps"], random_start=p["random_start"])
    return RunOutput(
        _keep_first_success(model, x, y, _restarts(entry), lambda a, b: _fb_run(model, atk, a, b, eps))
    )


@dataclass(frozen=True)
class RunnerSpec:
    fn: Runner
    per_example_rng: bool  # True: results depend only on each example (batch freely); False: use id blocks


RUNNERS: dict[tuple[str, str], RunnerSpec] = {
    ("noise", "builtin"): RunnerSpec(_builtin_noise, True),
    ("fgsm", "builtin"): RunnerSpec(_builtin_fgsm, True),
    ("fgsm", "torchattacks"): RunnerSpec(_ta_fgsm, True),
    ("fgsm", "foolbox"): RunnerSpec(_fb_fgsm, True),
    ("pgd", "builtin"): RunnerSpec(_builtin_pgd, True),
    ("pgd", "torchattacks"): RunnerSpec(_ta_pgd, False),
    ("pgd", "foolbox"): RunnerSpec(_fb_pgd, False),
    ("apgd", "torchattacks"): RunnerSpec(_ta_apgd, False),
    ("square", "torchattacks"): RunnerSpec(_ta_square, False),
    ("transfer", "builtin"): RunnerSpec(_builtin_transfer, True),
}


def get_runner(family: str, backend: str) -> RunnerSpec:
    try:
        return RUNNERS[(family, backend)]
    except KeyError:
        have = sorted(b for f, b in RUNNERS if f == family)
        raise ValueError(
            f"no {backend!r} implementation of attack family {family!r}; available: {have}"
        ) from None
