"""Which of a run's numbers are robust accuracies and which are only upper bounds, and why: the one rule.

A robust accuracy is only as good as the attacks behind it. Where they could not follow the model's
gradient the number is an *upper bound* (Athalye, Carlini & Wagner 2018; Carlini et al. 2019), and no page
may read it as robustness. Three kinds of evidence decide it, per (model, gradient mode):

* the scan (meta.json's ``gradient_path``): no gradient reaches the input, or an operation on its path has
  no gradient rule -- every mode of that model is an upper bound, escalated or not (the escalation's
  gradient-free and transfer attacks lower the number; they do not make the gradient attacks whole);
* the gradient-masking checklist (diagnostics.json): a mode that failed a check is an upper bound, and a
  mode-free failure (``deterministic``) fails every mode;
* the checklist's absence: a mode no checklist judged (``--no-diagnostics``, a mode the checklist did not
  reach) is *unchecked*: not marked, but nothing may call it robust either.

A model's :class:`Standing` over the modes it was attacked under follows: *verified* when at least one
mode is trusted (judged and passed, no lost gradient: its worst case over modes rests on a healthy
gradient), *unverified* when none is and some are marked, *unchecked* when none was judged. Tables, the
verdict, the claims, the gallery, :class:`~robustbench_wave.api.BenchmarkResult` and the export all ask
:class:`Trust`; none reads diagnostics.json's checks for this itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from robustbench_wave.evaluation.meta_sections import ModelsMeta
from robustbench_wave.models.autobpda import LOST, NO_RULE, UNHANDLED

#: Key of mode-free checks (``deterministic``, ...) in :attr:`Trust.failures`.
ALL_MODES = "all"
#: Finding rules that leave the input without a gradient through that operation in every mode.
UNHANDLED_RULES = frozenset({LOST, NO_RULE, UNHANDLED})

#: (model, gradient mode) -> why that model's cells in that mode are an upper bound, not robustness.
Marks = dict[tuple[str, str], str]


class Standing(str, Enum):
    """What a model's numbers are, over the gradient modes it was attacked under."""

    VERIFIED = "verified"  # some mode judged by the checklist and passed, no lost gradient
    UNVERIFIED = "unverified"  # no trusted mode, some marked: upper bounds
    UNCHECKED = "unchecked"  # no mode judged by a checklist: nothing may call it robust

    @property
    def trusted(self) -> bool:
        return self is Standing.VERIFIED


def path_reason(path: Mapping[str, Any]) -> str | None:
    """Why a scan's result (meta.json's ``gradient_path``) leaves every mode without a full gradient, or None:
    no gradient reaches the input in any mode the model offers, or an operation on its input path has no rule
    (its gradient is lost there in every mode: :data:`UNHANDLED_RULES`, or the scan's ``unhandled`` list)."""
    reaches = bool(path.get("exact_gradient")) or "bpda" in (path.get("modes") or [])
    if not reaches:
        return f"no gradient reaches the input in any mode: {path.get('summary', '')}"
    findings = path.get("findings") or []
    unhandled = [f"{f['op']} [{f['kind']}]" for f in findings if f.get("rule") in UNHANDLED_RULES]
    unhandled += [str(u) for u in (path.get("unhandled") or []) if str(u) not in unhandled]
    if unhandled:
        return f"operations on the input path without a gradient rule: {', '.join(unhandled)}"
    return None


@dataclass(frozen=True)
class Trust:
    """The run's (or runs') evidence about its gradients, and the one rule that reads it."""

    modes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # model -> modes attacked under
    marks: Mapping[tuple[str, str], str] = field(default_factory=dict)  # upper bounds, with why
    checked: frozenset[tuple[str, str]] = frozenset()  # (model, mode) the checklist judged
    failures: Mapping[str, Mapping[str, tuple[str, ...]]] = field(
        default_factory=dict
    )  # model -> mode -> names
    checklist: bool = False  # whether any checklist ran

    # ---------------------------------------------------------------------------------------- building
    @classmethod
    def from_run(
        cls, meta: Mapping[str, Any], diagnostics: Sequence[Mapping[str, Any]] | None, *, where: Any = None
    ) -> Trust:
        """The trust of one run folder: its meta.json and diagnostics.json's ``models`` entries (None or
        empty: no checklist ran)."""
        models = ModelsMeta.from_meta(meta, where) if where is not None else ModelsMeta.from_meta(meta)
        modes = {m.name: tuple(m.grad_modes or ()) for m in models.values()}
        marks: Marks = {}
        checked: set[tuple[str, str]] = set()
        failures: dict[str, dict[str, tuple[str, ...]]] = {}
        for entry in diagnostics or []:
            model = str(entry.get("model", ""))
            checks = list(entry.get("checks") or [])
            judged = {str(c["grad_mode"]) for c in checks if c.get("grad_mode")}
            if any(not c.get("grad_mode") for c in checks):
                judged |= set(modes.get(model, ()))
            modes[model] = tuple(dict.fromkeys([*modes.get(model, ()), *sorted(judged)]))
            checked |= {(model, m) for m in judged}
            fails = _failed_by_mode(checks)
            failures[model] = {m: tuple(v) for m, v in fails.items()}
            for mode in judged:
                names = [*fails.get(mode, []), *fails.get(ALL_MODES, [])]
                if names:
                    marks[(model, mode)] = "failed gradient checks: " + ", ".join(dict.fromkeys(names))
        for m in models.values():
            reason = path_reason(m.gradient_path) if m.gradient_path else None
            if reason is None:
                continue
            how = "escalated, still an upper bound" if m.escalation else "not escalated"
            for mode in m.grad_modes or ():
                marks.setdefault((m.name, str(mode)), f"gradient lost at the scan ({reason}); {how}")
        return cls(modes, marks, frozenset(checked), failures, bool(diagnostics))

    @classmethod
    def combine(cls, parts: Iterable[Trust]) -> Trust:
        """The trust of several runs of the same models (training seeds): a mark in any run marks the cell,
        a cell is checked only where every run that attacked it judged it."""
        parts = list(parts)
        modes: dict[str, tuple[str, ...]] = {}
        marks: Marks = {}
        failures: dict[str, dict[str, tuple[str, ...]]] = {}
        for t in parts:
            for model, ms in t.modes.items():
                modes[model] = tuple(dict.fromkeys([*modes.get(model, ()), *ms]))
            for key, why in t.marks.items():
                marks.setdefault(key, why)
            for model, fails in t.failures.items():
                into = failures.setdefault(model, {})
                for mode, names in fails.items():
                    into[mode] = tuple(dict.fromkeys([*into.get(mode, ()), *names]))
        attacked = [{(m, g) for m, ms in t.modes.items() for g in ms} for t in parts]
        every = set().union(*attacked) if attacked else set()
        checked = {k for k in every if all(k in t.checked for t, a in zip(parts, attacked) if k in a)}
        return cls(modes, marks, frozenset(checked), failures, any(t.checklist for t in parts))

    @classmethod
    def passed(cls, modes: Mapping[str, Sequence[str]]) -> Trust:
        """Every (model, mode) judged by a checklist that passed everything: what a caller states who ran
        the checklist outside the harness (and the tests' known answer)."""
        modes = {m: tuple(ms) for m, ms in modes.items()}
        checked = frozenset((m, g) for m, ms in modes.items() for g in ms)
        return cls(modes, {}, checked, {m: {} for m in modes}, True)

    # ----------------------------------------------------------------------------------------- reading
    def upper_bound(self, model: str, mode: str) -> str | None:
        """Why (model, mode)'s numbers are an upper bound, or None when they are not marked."""
        return self.marks.get((model, str(mode)))

    def is_checked(self, model: str, mode: str) -> bool:
        """Whether a checklist judged (model, mode)."""
        return (model, str(mode)) in self.checked

    def is_trusted(self, model: str, mode: str) -> bool:
        """Judged by the checklist and not marked: a robust accuracy, as far as the harness can tell."""
        return self.is_checked(model, mode) and self.upper_bound(model, mode) is None

    def attacked_modes(self, model: str, modes: Iterable[str] | None = None) -> list[str]:
        """``modes`` (the model's recorded modes when None)."""
        return [str(m) for m in (modes if modes is not None else self.modes.get(model, ()))]

    def trusted_modes(self, model: str, modes: Iterable[str] | None = None) -> list[str]:
        """The model's trusted modes among ``modes``."""
        return [m for m in self.attacked_modes(model, modes) if self.is_trusted(model, m)]

    def standing(self, model: str, modes: Iterable[str] | None = None) -> Standing:
        """The model's :class:`Standing` over ``modes`` (those it was attacked under; default: recorded)."""
        attacked = self.attacked_modes(model, modes)
        if any(self.is_trusted(model, m) for m in attacked):
            return Standing.VERIFIED
        if any(self.upper_bound(model, m) for m in attacked):
            return Standing.UNVERIFIED
        return Standing.UNCHECKED

    def why(self, model: str, modes: Iterable[str] | None = None) -> dict[str, str]:
        """mode -> why it is not trusted, for every untrusted mode among ``modes``."""
        out = {}
        for m in self.attacked_modes(model, modes):
            reason = self.upper_bound(model, m)
            if reason is None and not self.is_checked(model, m):
                reason = "no gradient checklist judged it"
            if reason is not None:
                out[m] = reason
        return out

    def failed_checks(self, model: str, modes: Iterable[str] | None = None) -> dict[str, list[str]]:
        """mode (or :data:`ALL_MODES`) -> the model's failed checks, of ``modes`` and the mode-free ones."""
        keep = None if modes is None else {str(m) for m in modes} | {ALL_MODES}
        fails = self.failures.get(model, {})
        return {m: list(v) for m, v in fails.items() if v and (keep is None or m in keep)}

    def checklist_escalation(self, model: str) -> str | None:
        """Why the checklist calls for escalation, or None: it judged the model and every mode it judged
        failed a check (a model with one passing mode rests on a healthy gradient already)."""
        judged = sorted(m for k, m in self.checked if k == model)
        fails = self.failures.get(model, {})
        if not judged or any((model, m) not in self.marks or self._lost_only(model, m) for m in judged):
            return None
        names = dict.fromkeys(f"{n}[{m}]" for m, v in fails.items() for n in v)
        return (
            f"every gradient mode ({', '.join(judged)}) failed a gradient-masking check: {', '.join(names)}"
        )

    def _lost_only(self, model: str, mode: str) -> bool:
        """Whether (model, mode) is marked by the scan alone (no failed check)."""
        fails = self.failures.get(model, {})
        return not (fails.get(mode) or fails.get(ALL_MODES))


def _failed_by_mode(checks: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """mode (or :data:`ALL_MODES`) -> names of the checks that failed there."""
    out: dict[str, list[str]] = {}
    for c in checks:
        if c.get("passed") is False:
            out.setdefault(str(c.get("grad_mode") or ALL_MODES), []).append(str(c["name"]))
    return out
