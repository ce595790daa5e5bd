"""Attacks from torchattacks (Kim 2020), registered under the ``torchattacks`` backend.

FGSM, L∞/L2 PGD, APGD and APGD-T (Croce & Hein 2020), FAB-T (Croce & Hein 2020b), Square (Andriushchenko
et al. 2020) and MI-FGSM (Dong et al. 2018): with APGD-CE the first four are AutoAttack's standard version
(``attacks/autoattack.toml``). APGD, APGD-T, FAB-T, Square and MI-FGSM are first implemented here, so their
families are declared here (second implementations: ART's APGD, APGD-T and Square, the builtin FAB-T).

torchattacks draws from torch's global RNG, and every one of its attacks ascends the batch's *mean* loss,
whose gradient carries a factor 1/B: its rounding differs with the batch's size B, and where a pixel's
gradient is rounding noise (a BPDA straight-through path, cancelling terms) even FGSM's sign flips. So every
runner here is registered with ``per_example_rng=False``: the evaluation calls it on fixed blocks of example
ids inside :func:`robustbench_wave.attacks.seeding.seeded` (``request.block_seed``, which APGD, APGD-T,
FAB and Square also take as their own seed), and its points depend neither on ``--batch-size`` nor on how a
run is sharded over ranks.
torchattacks' PGD has no restarts: :func:`keep_first_success` adds them.

EOT (``eot_iter > 1``): APGD and APGD-T average ``eot_iter`` gradients themselves; FGSM and L∞ PGD switch to
torchattacks' ``EOTPGD`` (FGSM = one step of size eps from the clean point). torchattacks has neither an L2
EOT PGD nor a DLR-loss PGD, so this back-end refuses those settings (:meth:`RunnerSpec.rejection`) instead of
running a different attack under the entry's name. With the run's ``eot_rows`` > 0 their EOT loops are served
by batched forwards (:func:`~robustbench_wave.attacks.draws.with_batched_draws`): same loop, same sum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks import apgdt, fab, schemas
from robustbench_wave.attacks.draws import with_batched_draws
from robustbench_wave.attacks.pgd import keep_first_success, step_size
from robustbench_wave.attacks.registry import (
    AttackKind,
    AttackRequest,
    Param,
    RunOutput,
    Threat,
    Trait,
    register_attack,
    register_family,
)
from robustbench_wave.attacks.square import SquareSettings, VoteQueries, square_linf, vote_square

TARGETED_TRAITS = (Trait.ITERATIVE, Trait.AUTOATTACK)
#: Square's parameter for the draws of each query's K-draw vote (1: one forward per query).
SQUARE_VOTE_DRAWS = "vote_draws"

register_family(
    "apgd",
    kind=AttackKind.WHITE_BOX,
    threats=(Threat.LINF, Threat.L2),
    grad_dependent=True,
    traits=(Trait.ITERATIVE, Trait.WHOLE_BALL, Trait.AUTOATTACK),
    params={
        "steps": schemas.steps(100),
        "restarts": schemas.RESTARTS,
        "loss": schemas.LOSS,
        "rho": schemas.RHO,
        "eot_iter": schemas.EOT_ITER,
    },
    default_backend="torchattacks",
)
# AutoAttack's targeted members: each runs once per target class, the n_target_classes classes with the
# highest clean logits after the top one (9 in AutoAttack's standard version; fewer if the data has fewer).
register_family(
    "apgd-t",
    kind=AttackKind.WHITE_BOX,
    threats=(Threat.LINF, Threat.L2),
    grad_dependent=True,
    traits=TARGETED_TRAITS,
    params={
        "steps": schemas.steps(100),
        "restarts": schemas.RESTARTS,
        "n_target_classes": schemas.N_TARGET_CLASSES,
        "rho": schemas.RHO,
        "eot_iter": schemas.EOT_ITER,
    },
    default_backend="torchattacks",
)
register_family(
    "fab-t",
    kind=AttackKind.WHITE_BOX,
    threats=(Threat.LINF, Threat.L2),
    grad_dependent=True,
    traits=TARGETED_TRAITS,
    params={
        "steps": schemas.steps(100),
        "restarts": schemas.RESTARTS,
        "n_target_classes": schemas.N_TARGET_CLASSES,
        "alpha_max": Param(float, 0.1, minimum=0.0),
        "eta": Param(float, 1.05, minimum=1.0),
        "beta": Param(float, 0.9, minimum=0.0),
    },
    default_backend="torchattacks",
)
register_family(
    "square",
    kind=AttackKind.BLACK_BOX,
    threats=(Threat.LINF, Threat.L2),
    grad_dependent=False,
    traits=(Trait.AUTOATTACK,),
    params={
        "n_queries": Param(int, 1000, minimum=1),
        "p_init": Param(float, 0.8, minimum=0.0),
        "restarts": schemas.RESTARTS,
        "loss": Param(str, "margin", choices=("margin", "ce")),
        # A protocol choice, off by default (0): below this eps Square gets ``small_eps_queries`` queries instead
        # of ``n_queries``, where it breaks almost nothing (the evidence is in attacks/default.toml).
        "small_eps_below": Param(float, 0.0, minimum=0.0),
        "small_eps_queries": Param(int, 100, minimum=1),
        # EOT for a score-based attack: K > 1 scores every query by the K-draw vote of the records (the mean
        # margin over K draws, success = the vote wrong; attacks/square.py). Set to the run's K by the 'rand'
        # protocol on a randomised model; 1 (single draws) on a deterministic model and under --eot off.
        SQUARE_VOTE_DRAWS: Param(int, 1, minimum=1),
    },
    default_backend="torchattacks",
)
# MI-FGSM (Dong et al. 2018): iterated FGSM along a momentum of L1-normalised gradients, L∞ only; the step
# defaults to eps / steps, the paper's choice (alpha = eps / T).
register_family(
    "mifgsm",
    kind=AttackKind.WHITE_BOX,
    threats=(Threat.LINF,),
    grad_dependent=True,
    traits=(Trait.ITERATIVE, Trait.WHOLE_BALL),
    params={
        "steps": schemas.steps(10),
        "rel_step_size": schemas.rel_step_size(0.1),
        "decay": Param(float, 1.0, minimum=0.0),
    },
    default_backend="torchattacks",
)


def _eot(cls: type, request: AttackRequest) -> Callable[..., Any]:
    """``cls``, or with EOT (``eot_iter`` > 1) and the run's ``eot_rows`` > 0 a builder of ``cls`` whose own EOT
    loop is served by batched draws (:func:`~robustbench_wave.attacks.draws.with_batched_draws`)."""
    rows = request.context.eot_rows
    if request.params.get("eot_iter", 1) <= 1 or rows <= 0:
        return cls

    def build(*args: Any, **kwargs: Any) -> Any:
        atk = with_batched_draws(cls)(*args, **kwargs)
        atk.draw_rows = rows
        return atk

    return build


def square_queries(params: Mapping[str, Any], eps: float) -> int:
    """Square's query budget at ``eps``: ``n_queries``, or ``small_eps_queries`` below ``small_eps_below``."""
    return params["small_eps_queries"] if eps < params["small_eps_below"] else params["n_queries"]


@register_attack("fgsm", backend="torchattacks", per_example_rng=False)  # mean loss: see above
def torchattacks_fgsm(request: AttackRequest) -> RunOutput:
    import torchattacks

    model, x, y, eps = request.model, request.images, request.labels, request.eps
    eot = request.params.get("eot_iter", 1)
    if eot > 1:  # one EOT step of size eps from the clean point: FGSM on the mean gradient
        atk = _eot(torchattacks.EOTPGD, request)(
            model, eps=eps, alpha=eps, steps=1, eot_iter=eot, random_start=False
        )
        return RunOutput(atk(x, y).detach())
    return RunOutput(torchattacks.FGSM(model, eps=eps)(x, y).detach())


def pgd_rejects(threat: str, params: Mapping[str, Any]) -> str | None:
    """The PGD settings torchattacks cannot honour: a DLR loss, and EOT under L2 (EOTPGD is L∞ only)."""
    if params.get("loss", "ce") != "ce":
        return f"torchattacks' PGD has no {params['loss']!r} loss: use backend = 'builtin' or 'foolbox'"
    if params.get("eot_iter", 1) > 1 and threat != Threat.LINF.value:
        return "torchattacks has no L2 PGD with EOT (EOTPGD is L∞ only): use backend = 'builtin' or 'foolbox'"
    return None


@register_attack("pgd", backend="torchattacks", per_example_rng=False, rejects=pgd_rejects)
def torchattacks_pgd(request: AttackRequest) -> RunOutput:
    import torchattacks

    p, eps, model = request.params, request.eps, request.model
    reason = pgd_rejects(request.threat, p)
    if reason is not None:
        raise ValueError(f"attack {request.name!r}: {reason}")
    kw = {"eps": eps, "alpha": step_size(p, eps), "steps": p["steps"], "random_start": p["random_start"]}
    if p.get("eot_iter", 1) > 1:
        atk = _eot(torchattacks.EOTPGD, request)(model, eot_iter=p["eot_iter"], **kw)
    else:
        atk = (torchattacks.PGD if request.threat == Threat.LINF.value else torchattacks.PGDL2)(model, **kw)
    return RunOutput(keep_first_success(model, request.images, request.labels, p["restarts"], atk))


@register_attack("apgd", backend="torchattacks", per_example_rng=False)
def torchattacks_apgd(request: AttackRequest) -> RunOutput:
    import torchattacks

    p = request.params
    atk = _eot(torchattacks.APGD, request)(
        request.model,
        norm=request.threat,
        eps=request.eps,
        steps=p["steps"],
        n_restarts=p["restarts"],
        seed=request.block_seed,
        loss=p["loss"],
        rho=p["rho"],
        eot_iter=p["eot_iter"],
    )
    return RunOutput(atk(request.images, request.labels).detach())


def target_count(request: AttackRequest) -> int:
    """How many target classes a targeted member tries: ``n_target_classes``, at most classes - 1."""
    classes = request.context.class_count(request.model, request.images)
    if classes < 2:
        raise ValueError(
            f"attack {request.name!r} ({request.family}) needs at least 2 classes, got {classes}"
        )
    return min(request.params["n_target_classes"], classes - 1)


@functools.cache
def _apgdt_class() -> type:
    """torchattacks' APGDT, with its targeted DLR loss defined for fewer than four classes.

    AutoAttack's loss is -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4) / 2); with three classes z_pi4 does not
    exist and we use z_pi1 - z_pi3, with two the plain margin (denominator 1). Four or more: torchattacks' own
    at L∞; at L2 the authors' rounding of it, and each point keeps its own step size (``apgdt.l2_single_run``:
    torchattacks' ``step_size[0]`` coupled the rows). With one restart and no EOT its targets run side by side (:mod:`robustbench_wave.attacks.apgdt`:
    the same points in fewer passes); ``row_targets``, when set, is each row's target class.
    """
    import torchattacks

    class APGDTFewClasses(torchattacks.APGDT):
        row_targets: torch.Tensor | None = None

        def perturb(
            self, x_in: torch.Tensor, y_in: torch.Tensor, best_loss: bool = False, cheap: bool = True
        ):
            if not apgdt.batchable(self, x_in):
                return super().perturb(x_in, y_in, best_loss=best_loss, cheap=cheap)
            return apgdt.perturb_side_by_side(self, x_in, y_in)

        def attack_single_run(self, x_in: torch.Tensor, y_in: torch.Tensor):
            if self.norm == "L2":
                return apgdt.l2_single_run(self, x_in, y_in)
            return super().attack_single_run(x_in, y_in)

        def dlr_loss_targeted(self, x: torch.Tensor, y: torch.Tensor, y_target: torch.Tensor) -> torch.Tensor:
            if self.row_targets is not None:
                y_target = self.row_targets
            if x.shape[1] >= 4:
                return super().dlr_loss_targeted(x, y, y_target)
            u = torch.arange(x.shape[0], device=x.device)
            x_sorted = x.sort(dim=1)[0]
            scale = x_sorted[:, -1] - x_sorted[:, -3] + 1e-12 if x.shape[1] == 3 else 1.0
            return -(x[u, y] - x[u, y_target]) / scale

    return APGDTFewClasses


@register_attack("apgd-t", backend="torchattacks", per_example_rng=False)
def torchattacks_apgdt(request: AttackRequest) -> RunOutput:
    p = request.params
    atk = _eot(_apgdt_class(), request)(
        request.model,
        norm=request.threat,
        eps=request.eps,
        steps=p["steps"],
        n_restarts=p["restarts"],
        seed=request.block_seed,
        eot_iter=p["eot_iter"],
        rho=p["rho"],
        n_classes=target_count(request) + 1,  # torchattacks targets n_classes - 1 classes
    )
    return RunOutput(atk(request.images, request.labels).detach())


@register_attack("fab-t", backend="torchattacks", per_example_rng=False)
def torchattacks_fabt(request: AttackRequest) -> RunOutput:
    """torchattacks' FAB-T; with one restart (no random start: AutoAttack's setting) its targets run side by
    side (:mod:`robustbench_wave.attacks.fab`: the same points as ``torchattacks.FAB``, in fewer passes)."""
    import torchattacks

    p = request.params
    targets = target_count(request)
    if p["restarts"] == 1:
        settings = fab.FabSettings(
            request.threat, request.eps, p["steps"], p["alpha_max"], p["eta"], p["beta"]
        )
        return RunOutput(fab.fab_t(request.model, request.images, request.labels, targets, settings).detach())
    atk = torchattacks.FAB(
        request.model,
        norm=request.threat,
        eps=request.eps,
        steps=p["steps"],
        n_restarts=p["restarts"],
        alpha_max=p["alpha_max"],
        eta=p["eta"],
        beta=p["beta"],
        seed=request.block_seed,
        multi_targeted=True,
        n_classes=targets + 1,  # torchattacks targets n_classes - 1 classes
    )
    return RunOutput(atk(request.images, request.labels).detach())


def square_votes(request: AttackRequest) -> VoteQueries | None:
    """The K-draw scoring of Square's queries the entry asks for (``vote_draws`` > 1): the search on batched
    draws, every break on the records' common random numbers (the run's seed, the block's ids, its
    ``eot_rows``); None: single draws, as torchattacks."""
    draws = int(request.params.get(SQUARE_VOTE_DRAWS, 1))
    if draws <= 1:
        return None
    return VoteQueries(request.ids, request.context.seed, draws, request.context.eot_rows)


@register_attack("square", backend="torchattacks", per_example_rng=False)
def torchattacks_square(request: AttackRequest) -> RunOutput:
    """torchattacks' Square; under L∞ as :func:`~robustbench_wave.attacks.square.square_linf` runs it (the same
    points, without the forwards of points a proposal leaves unchanged). With ``vote_draws`` > 1 every query is
    scored by K batched draws and every break by the records' K-draw vote
    (:class:`~robustbench_wave.attacks.square.VoteQueries`)."""
    import torchattacks

    p = request.params
    settings = {  # the same settings either way
        "eps": request.eps,
        "n_queries": square_queries(p, request.eps),
        "n_restarts": p["restarts"],
        "p_init": p["p_init"],
        "loss": p["loss"],
        "seed": request.block_seed,
    }
    votes = square_votes(request)
    if request.threat == Threat.LINF.value:
        linf = SquareSettings(**settings)
        return RunOutput(square_linf(request.model, request.images, request.labels, linf, votes=votes)[0])
    if votes is not None:
        x, y = request.images, request.labels
        return RunOutput(vote_square(request.model, x, y, request.threat, settings, votes))
    atk = torchattacks.Square(request.model, norm=request.threat, **settings)
    return RunOutput(atk(request.images, request.labels).detach())


@functools.cache
def _mifgsm_class() -> type:
    """torchattacks' MIFGSM (untargeted), with a zero gradient taken as a zero step.

    torchattacks divides each gradient by its mean absolute value, so a gradient that is exactly zero (the
    blocked gradient mode, or logits saturated beyond float precision) turns the point into NaN; here its
    normaliser is at least 1e-12, which changes nothing else (the sign step ignores the scale).
    """
    import torchattacks

    class MIFGSMZeroSafe(torchattacks.MIFGSM):
        def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            images = images.clone().detach().to(self.device)
            labels = labels.clone().detach().to(self.device)
            momentum = torch.zeros_like(images)
            adv = images.clone().detach()
            for _ in range(self.steps):
                adv.requires_grad = True
                cost = nn.functional.cross_entropy(self.get_logits(adv), labels)
                (grad,) = torch.autograd.grad(cost, adv)
                grad = grad / grad.abs().mean(dim=(1, 2, 3), keepdim=True).clamp_min(1e-12)
                momentum = grad + momentum * self.decay
                adv = adv.detach() + self.alpha * momentum.sign()
                delta = torch.clamp(adv - images, min=-self.eps, max=self.eps)
                adv = torch.clamp(images + delta, min=0, max=1).detach()
            return adv

    return MIFGSMZeroSafe


@register_attack("mifgsm", backend="torchattacks", per_example_rng=False)
def torchattacks_mifgsm(request: AttackRequest) -> RunOutput:
    """MI-FGSM: no random start, but a batch-mean loss (module docstring), so it runs on id blocks too."""
    p, eps = request.params, request.eps
    atk = _mifgsm_class()(request.model, eps=eps, alpha=step_size(p, eps), steps=p["steps"], decay=p["decay"])
    return RunOutput(atk(request.images, request.labels).detach())
