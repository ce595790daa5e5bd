"""meta.json's sections as frozen, validated records: what the readers of a run folder take from it.

:mod:`.meta` writes meta.json (:meth:`EvaluationResult.save` adds ``records``, ``attackrun`` the ``run``
entry); the tables, the report, the export, the claims, the merge of shards and the checklist read it. Each
section here has one ``from_meta(meta, where)`` constructor, ``where`` the file it came from: a section that
is absent or null gives its empty value (a run written before the key existed, or a hand-made meta in a
test), one of the wrong shape a one-line ValueError naming the file and the key -- instead of an
AttributeError deep in a table. Values are kept as recorded (no number is rounded or converted), so a page
rendered from a section reads what a page rendered from the raw dict read; the fields are the keys some
reader uses, and ``raw`` keeps a section's whole mapping for the pages that show it as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from robustbench_wave.evaluation.records import META_FILE

Where = str | Path
_EMPTY: Mapping[str, Any] = {}

_KINDS = {
    str: "a string",
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    Mapping: "a JSON object",
    list: "a JSON list",
}


def _malformed(where: Where, key: str, value: Any, kind: type | tuple[type, ...]) -> ValueError:
    kinds = " or ".join(_KINDS[k] for k in (kind if isinstance(kind, tuple) else (kind,)))
    return ValueError(
        f"{where}: '{key}' is {value!r:.60}, not {kinds}; the file is damaged or not a run's "
        f"{META_FILE}: restore it or re-run the attack command"
    )


def _value(
    mapping: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: Where, path: str
) -> Any:
    """``mapping[key]`` when it is of ``kind`` (None when absent or null); ValueError naming ``path`` else. A
    whole number is a number, and neither is true or false."""
    value = mapping.get(key)
    if value is None:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool):
        ok = bool in kinds
    else:
        ok = any(isinstance(value, int | float) if k is float else isinstance(value, k) for k in kinds)
    if not ok:
        raise _malformed(where, path, value, kind)
    return value


def _number(value: Any, where: Where, key: str) -> float:
    """A budget: a number (a whole one too), never null or true/false."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _malformed(where, key, value, float)
    return value


def _object(mapping: Mapping[str, Any], key: str, where: Where, path: str | None = None) -> Mapping[str, Any]:
    """The JSON object under ``key``; {} when absent or null."""
    found = _value(mapping, key, Mapping, where, path or key)
    return found if found is not None else _EMPTY


def _top(meta: Any, where: Where) -> Mapping[str, Any]:
    if not isinstance(meta, Mapping):
        raise ValueError(
            f"{where}: {meta!r:.60} is not a JSON object; restore it or re-run the attack command"
        )
    return meta


@dataclass(frozen=True)
class SuiteMeta:
    """``suite``: the suite as it ran (:meth:`Suite.to_dict`; ``raw`` is what ``parse_suite`` reads back)."""

    name: str | None = None
    description: str | None = None
    attacks: tuple[Mapping[str, Any], ...] | None = None  # the entries, as the suite wrote them
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], where: Where = META_FILE) -> SuiteMeta:
        suite = _object(_top(meta, where), "suite", where)
        attacks = _value(suite, "attack", list, where, "suite.attack")
        return cls(
            name=_value(suite, "name", str, where, "suite.name"),
            description=_value(suite, "description", str, where, "suite.description"),
            attacks=tuple(attacks) if attacks is not None else None,
            raw=suite,
        )


@dataclass(frozen=True)
class DatasetMeta:
    """``dataset`` and the examples: its name, ``DatasetInfo`` (a dict), the budgets, the declared reference
    budget per threat, and the top-level ``n_examples`` and ``data_sha256``."""

    name: str | None = None
    info: Mapping[str, Any] | None = None
    eps: Mapping[str, Any] = field(default_factory=dict)  # threat -> the attacked budgets
    reference: Mapping[str, float] = field(default_factory=dict)  # threat -> the declared reference budget
    n_examples: int | None = None
    data_sha256: str | None = None

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], where: Where = META_FILE) -> DatasetMeta:
        top = _top(meta, where)
        dataset = _object(top, "dataset", where)
        reference = _object(dataset, "reference", where, "dataset.reference")
        for threat, eps in reference.items():
            _number(eps, where, f"dataset.reference.{threat}")
        return cls(
            name=_value(dataset, "name", str, where, "dataset.name"),
            info=_value(dataset, "info", Mapping, where, "dataset.info"),
            eps=_object(dataset, "eps", where, "dataset.eps"),
            reference={str(t): float(e) for t, e in reference.items()},
            n_examples=_value(top, "n_examples", int, where, "n_examples"),
            data_sha256=_value(top, "data_sha256", str, where, "data_sha256"),
        )

    @property
    def slug(self) -> str | None:
        """The data set's folder name (``info.slug``), else its name."""
        return str((self.info or {}).get("slug") or "") or self.name


@dataclass(frozen=True)
class SurrogateMeta:
    """A model's transfer surrogate: its record name and weights' hash."""

    name: str | None = None
    param_sha256: str | None = None


@dataclass(frozen=True)
class ModelMeta:
    """One entry of ``models``: what the run recorded about one attacked model."""

    name: str
    train_seed: int | None = None
    param_sha256: str | None = None
    checkpoint_sha256: str | None = None
    clean_accuracy: float | None = None
    grad_modes: tuple[str, ...] | None = None
    model_spec: Mapping[str, Any] | None = None
    external: str | Mapping[str, Any] | None = None  # a model from outside the zoo: its reference (None: zoo)
    surrogate: SurrogateMeta | None = None
    surrogate_choice: str | None = None
    eot: Mapping[str, Any] | None = None  # EotPlan.to_meta (EotPlan.from_meta reads it back)
    gradient_path: Mapping[str, Any] | None = None
    escalation: Mapping[str, Any] | list[Any] | None = None  # one stage's note, or a list of them
    plan: Mapping[str, Any] = field(default_factory=dict)  # entries resolved or not applicable for it
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, name: str, entry: Any, where: Where = META_FILE) -> ModelMeta:
        key = f"models.{name}"
        if not isinstance(entry, Mapping):
            raise _malformed(where, key, entry, Mapping)
        modes = _value(entry, "grad_modes", list, where, f"{key}.grad_modes")
        surrogate = _value(entry, "surrogate", Mapping, where, f"{key}.surrogate")
        return cls(
            name=name,
            train_seed=_value(entry, "train_seed", int, where, f"{key}.train_seed"),
            param_sha256=_value(entry, "param_sha256", str, where, f"{key}.param_sha256"),
            checkpoint_sha256=_value(entry, "checkpoint_sha256", str, where, f"{key}.checkpoint_sha256"),
            clean_accuracy=_value(entry, "clean_accuracy", float, where, f"{key}.clean_accuracy"),
            grad_modes=tuple(str(m) for m in modes) if modes is not None else None,
            model_spec=_value(entry, "model_spec", Mapping, where, f"{key}.model_spec"),
            external=_value(entry, "external", (str, Mapping), where, f"{key}.external"),
            surrogate=None
            if surrogate is None
            else SurrogateMeta(
                _value(surrogate, "name", str, where, f"{key}.surrogate.name"),
                _value(surrogate, "param_sha256", str, where, f"{key}.surrogate.param_sha256"),
            ),
            surrogate_choice=_value(entry, "surrogate_choice", str, where, f"{key}.surrogate_choice"),
            eot=_value(entry, "eot", Mapping, where, f"{key}.eot"),
            gradient_path=_value(entry, "gradient_path", Mapping, where, f"{key}.gradient_path"),
            escalation=_value(entry, "escalation", (Mapping, list), where, f"{key}.escalation"),
            plan=_object(entry, "plan", where, f"{key}.plan"),
            raw=entry,
        )

    @property
    def pools_tokens(self) -> bool:
        """Whether its recorded spec pools tokens (a ``[tokenpool]`` table)."""
        return bool((self.model_spec or {}).get("tokenpool"))


EntryT = TypeVar("EntryT")
SectionT = TypeVar("SectionT", bound="_Entries[Any]")


@dataclass(frozen=True)
class _Entries(Generic[EntryT]):
    """A section that names its entries (``models``, ``attacks``), in the file's order."""

    entries: Mapping[str, EntryT] = field(default_factory=dict)
    #: The section's key in meta.json and the reader of one of its entries (``from_entry(name, entry, where)``).
    section: ClassVar[str]
    entry_type: ClassVar[Any]

    @classmethod
    def from_meta(cls: type[SectionT], meta: Mapping[str, Any], where: Where = META_FILE) -> SectionT:
        named = _object(_top(meta, where), cls.section, where)
        return cls({str(n): cls.entry_type.from_entry(str(n), e, where) for n, e in named.items()})

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, name: str) -> EntryT | None:
        return self.entries.get(name)

    def values(self) -> Iterator[EntryT]:
        return iter(self.entries.values())


@dataclass(frozen=True)
class ModelsMeta(_Entries[ModelMeta]):
    """``models``: every attacked model's entry, in the file's order."""

    section: ClassVar[str] = "models"
    entry_type: ClassVar[Any] = ModelMeta


@dataclass(frozen=True)
class AttackMeta:
    """One entry of ``attacks``: a suite entry as the run planned it."""

    name: str
    family: str | None = None
    kind: str | None = None
    threat: str | None = None
    backend: str | None = None
    eps: tuple[float, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    skipped: str | None = None  # why it ran for no model

    @classmethod
    def from_entry(cls, name: str, entry: Any, where: Where = META_FILE) -> AttackMeta:
        key = f"attacks.{name}"
        if not isinstance(entry, Mapping):
            raise _malformed(where, key, entry, Mapping)
        eps = _value(entry, "eps", list, where, f"{key}.eps") or []
        for i, e in enumerate(eps):
            _number(e, where, f"{key}.eps[{i}]")
        return cls(
            name=name,
            family=_value(entry, "family", str, where, f"{key}.family"),
            kind=_value(entry, "kind", str, where, f"{key}.kind"),
            threat=_value(entry, "threat", str, where, f"{key}.threat"),
            backend=_value(entry, "backend", str, where, f"{key}.backend"),
            eps=tuple(eps),
            params=_object(entry, "params", where, f"{key}.params"),
            skipped=_value(entry, "skipped", str, where, f"{key}.skipped"),
        )


@dataclass(frozen=True)
class AttacksMeta(_Entries[AttackMeta]):
    """``attacks``: every suite entry's plan, in the suite's order."""

    section: ClassVar[str] = "attacks"
    entry_type: ClassVar[Any] = AttackMeta


@dataclass(frozen=True)
class ProvenanceMeta:
    """``provenance`` (code and platform that made the run, how it ran) and the top-level ``created_utc``."""

    git_revision: str | None = None
    libraries: Mapping[str, Any] = field(default_factory=dict)
    platform: str | None = None
    execution: Mapping[str, Any] | None = None  # device, ranks, shard
    created_utc: str | None = None

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], where: Where = META_FILE) -> ProvenanceMeta:
        top = _top(meta, where)
        prov = _object(top, "provenance", where)
        return cls(
            git_revision=_value(prov, "git_revision", str, where, "provenance.git_revision"),
            libraries=_object(prov, "libraries", where, "provenance.libraries"),
            platform=_value(prov, "platform", str, where, "provenance.platform"),
            execution=_value(prov, "execution", Mapping, where, "provenance.execution"),
            created_utc=_value(top, "created_utc", str, where, "created_utc"),
        )


@dataclass(frozen=True)
class InvocationMeta:
    """``run``: the command that made the run folder and its ``config.json`` (``attackrun.run_meta``)."""

    command: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    run_dir: str | None = None

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], where: Where = META_FILE) -> InvocationMeta:
        run = _object(_top(meta, where), "run", where)
        return cls(
            command=_value(run, "command", str, where, "run.command"),
            config=_object(run, "config", where, "run.config"),
            run_dir=_value(run, "run_dir", str, where, "run.run_dir"),
        )

    @property
    def baseline(self) -> Any:
        """The ``--baseline`` the attack command was given (None: none)."""
        return self.config.get("baseline")


@dataclass(frozen=True)
class SettingsMeta:
    """``settings`` (how the evaluation ran: the choices that change records, and speed) and ``seeds``."""

    attack_seed: int | None = None
    batch_size: int | None = None
    skip_broken: bool | None = None
    backend: str | None = None
    cross_check: str | None = None
    eot: str | None = None
    eot_draws: int | None = None
    device: str | None = None
    fingerprint: str | None = None  # the chunk fingerprint (None in a run joined from shards)
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], where: Where = META_FILE) -> SettingsMeta:
        top = _top(meta, where)
        settings = _object(top, "settings", where)

        def get(key: str, kind: type) -> Any:
            return _value(settings, key, kind, where, f"settings.{key}")

        return cls(
            attack_seed=_value(_object(top, "seeds", where), "attack_seed", int, where, "seeds.attack_seed"),
            batch_size=get("batch_size", int),
            skip_broken=get("skip_broken", bool),
            backend=get("backend", str),
            cross_check=get("cross_check", str),
            eot=get("eot", str),
            eot_draws=get("eot_draws", int),
            device=get("device", str),
            fingerprint=get("fingerprint", str),
            raw=settings,
        )


@dataclass(frozen=True)
class RecordsMeta:
    """``records``: the sha256 and row count of the records file the meta describes."""

    sha256: str | None = None
    rows: int | None = None

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], where: Where = META_FILE) -> RecordsMeta:
        records = _object(_top(meta, where), "records", where)
        return cls(
            sha256=_value(records, "sha256", str, where, "records.sha256"),
            rows=_value(records, "rows", int, where, "records.rows"),
        )
